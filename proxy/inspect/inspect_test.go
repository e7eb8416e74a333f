package inspect

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
)

const host = "api.example.test"

// upstreamCert is a self-signed certificate for host: the test's root.
func upstreamCert(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// seen is what the fake upstream was sent.
type seen struct {
	mu      sync.Mutex
	headers []http.Header
	protos  []string
	hosts   []string
	targets []string // method and request target, as the upstream read them
	// trailers are the request trailers the upstream read, of requests
	// the default handler answered.
	trailers []http.Header
}

func (s *seen) last() (http.Header, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.headers) == 0 {
		return nil, ""
	}
	return s.headers[len(s.headers)-1], s.protos[len(s.protos)-1]
}

type bed struct {
	t       testing.TB
	srv     *Server
	caDir   string
	logs    *bytes.Buffer
	logMu   *sync.Mutex
	seen    *seen
	release chan struct{} // lets the SSE handler finish
	upAddr  string
	policy  *conf.Policy
	secret  string
}

type lockedBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func newBed(t testing.TB, policy string, upstreamH2 bool) *bed {
	t.Helper()
	b := &bed{t: t, seen: &seen{}, release: make(chan struct{}), logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	b.secret = "sk-real-secret-0123456789"
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte(b.secret+"\n"), 0o600)
	policy = strings.ReplaceAll(policy, "SECRETFILE", secretFile)
	p, err := conf.ParseFile([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	b.policy = p
	b.caDir = filepath.Join(t.TempDir(), "net")
	if _, err := ca.Ensure(b.caDir, p.InspectedHosts()); err != nil {
		t.Fatal(err)
	}
	cert, roots := upstreamCert(t)
	up := httptest.NewUnstartedServer(http.HandlerFunc(b.upstream))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	up.EnableHTTP2 = upstreamH2
	up.StartTLS()
	t.Cleanup(up.Close)
	b.upAddr = up.Listener.Addr().String()
	b.srv = New(Config{
		Sandbox: "sb1", Minter: ca.NewMinter(b.caDir), UpstreamRoots: roots,
		Logger: slog.New(slog.NewJSONHandler(lockedBuf{b.logMu, b.logs}, nil)),
		Policy: func() *conf.Policy { return b.policy },
	})
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func (b *bed) log() string {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	return b.logs.String()
}

// upstream is the fake host: it echoes, streams events, and speaks
// WebSocket (an echo of raw bytes after the 101).
func (b *bed) upstream(w http.ResponseWriter, r *http.Request) {
	b.seen.mu.Lock()
	b.seen.headers = append(b.seen.headers, r.Header.Clone())
	b.seen.protos = append(b.seen.protos, r.Proto)
	b.seen.hosts = append(b.seen.hosts, r.Host)
	b.seen.targets = append(b.seen.targets, r.Method+" "+r.RequestURI)
	b.seen.mu.Unlock()
	switch r.URL.Path {
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-b.release
		io.WriteString(w, "data: last\n\n")
	case "/ws":
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "not ws", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 64)
		n, _ := brw.Read(buf)
		conn.Write(buf[:n])
	case "/hop":
		// Fields of one hop, named by Connection, both ways.
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "1")
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "hop body")
		w.Header().Set("X-Sum", "42")
	case "/cut":
		// A body of unknown length cut short by the upstream.
		io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	default:
		body, _ := io.ReadAll(r.Body)
		b.seen.mu.Lock()
		b.seen.trailers = append(b.seen.trailers, r.Trailer.Clone())
		b.seen.mu.Unlock()
		fmt.Fprintf(w, "upstream got %s %s %d bytes", r.Method, r.URL.Path, len(body))
	}
}

// session accepts one client connection and serves it as an inspected
// session of host; it returns the client's end.
func (b *bed) session(name string) net.Conn {
	t := b.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	go b.srv.Serve(&Session{
		Conn: sc, Name: name, Client: netip.MustParseAddrPort("10.0.0.2:1000"), Dst: netip.MustParseAddrPort("203.0.113.7:443"),
		Dial:    func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "tcp", b.upAddr) },
		DialKey: name,
	})
	t.Cleanup(func() { client.Close() })
	return client
}

// client is an HTTP client whose connections are inspected sessions.
func (b *bed) client(h2 bool) *http.Client {
	data, err := ca.CertPEM(b.caDir)
	if err != nil {
		b.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return b.session(host), nil },
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	b.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

const policy = `api.example.test
inspect api.example.test deny POST /v1/messages json:tools[].type=web_search*
inspect api.example.test deny DELETE
inspect api.example.test inject x-api-key dm-placeholder SECRETFILE
inspect api.example.test inject authorization dm-placeholder SECRETFILE
inspect api.example.test max-body 1000
`

func do(t *testing.T, c *http.Client, method, url, ctype, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(data)
}

func TestRules(t *testing.T) {
	for _, c := range []struct{ clientH2, upstreamH2 bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("client-h2=%v,upstream-h2=%v", c.clientH2, c.upstreamH2), func(t *testing.T) {
			b := newBed(t, policy, c.upstreamH2)
			cl := b.client(c.clientH2)
			base := "https://" + host
			withTool := `{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"}]}`
			without := `{"model":"m","tools":[{"type":"bash_20250124","name":"bash"}]}`

			resp, body := do(t, cl, "POST", base+"/v1/messages", "application/json", withTool, "x-api-key", "dm-placeholder")
			if resp.StatusCode != 403 {
				t.Fatalf("web search request: %d %s", resp.StatusCode, body)
			}
			var refusal struct {
				Error struct{ Host, Rule, Sandbox string }
			}
			if err := json.Unmarshal([]byte(body), &refusal); err != nil || refusal.Error.Host != host || refusal.Error.Sandbox != "sb1" ||
				refusal.Error.Rule != "deny POST /v1/messages json:tools[].type=web_search*" {
				t.Fatalf("refusal body %s (%v)", body, err)
			}
			if h, _ := b.seen.last(); h != nil {
				t.Fatal("the refused request reached the upstream")
			}

			resp, body = do(t, cl, "POST", base+"/v1/messages", "application/json", without, "x-api-key", "dm-placeholder")
			if resp.StatusCode != 200 || body != fmt.Sprintf("upstream got POST /v1/messages %d bytes", len(without)) {
				t.Fatalf("request without the tool: %d %s", resp.StatusCode, body)
			}
			h, proto := b.seen.last()
			if h.Get("X-Api-Key") != b.secret {
				t.Fatalf("upstream got x-api-key %q", h.Get("X-Api-Key"))
			}
			// HTTP/2 upstream only for a client that speaks it.
			if wantProto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[c.clientH2 && c.upstreamH2]; proto != wantProto {
				t.Fatalf("upstream spoke %s, want %s", proto, wantProto)
			}
			// Bearer scheme kept; a value that only contains the
			// placeholder is left alone.
			do(t, cl, "GET", base+"/x", "", "", "authorization", "Bearer dm-placeholder", "x-api-key", "my dm-placeholder!")
			if h, _ := b.seen.last(); h.Get("Authorization") != "Bearer "+b.secret || h.Get("X-Api-Key") != "my dm-placeholder!" {
				t.Fatalf("injection: %q %q", h.Get("Authorization"), h.Get("X-Api-Key"))
			}

			if resp, _ := do(t, cl, "DELETE", base+"/thing", "", ""); resp.StatusCode != 403 {
				t.Fatalf("DELETE: %d", resp.StatusCode)
			}
			if resp, body := do(t, cl, "DELETE", base+"/thing", "", ""); !strings.Contains(body, "rule: deny DELETE") || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("plain refusal %q", body)
			}
			big := `{"tools":[],"pad":"` + strings.Repeat("x", 2000) + `"}`
			if resp, _ := do(t, cl, "POST", base+"/v1/messages", "application/json", big); resp.StatusCode != 413 {
				t.Fatalf("oversized body: %d", resp.StatusCode)
			}
			// A big body where no body rule applies streams through.
			if resp, body := do(t, cl, "POST", base+"/upload", "", strings.Repeat("y", 5000)); resp.StatusCode != 200 || !strings.Contains(body, "5000 bytes") {
				t.Fatalf("upload: %d %s", resp.StatusCode, body)
			}
			if resp, _ := do(t, cl, "GET", base+"/a/../v1/messages", "", ""); resp.StatusCode != 403 {
				t.Fatalf("dot segments: %d", resp.StatusCode)
			}
			if resp, _ := do(t, cl, "POST", base+"/v1/messages", "application/json", withTool, "Content-Encoding", "gzip"); resp.StatusCode != 403 {
				t.Fatalf("encoded body: %d", resp.StatusCode)
			}

			log := b.log()
			for _, want := range []string{`"msg":"request"`, `"method":"POST"`, `"path":"/v1/messages"`, `"status":403`, `"status":413`, `"rule":"default allow"`} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %s:\n%s", want, log)
				}
			}
			for _, secret := range []string{b.secret, "dm-placeholder"} {
				if strings.Contains(log, secret) {
					t.Errorf("the log holds %q", secret)
				}
			}
		})
	}
}

// A request for another host inside the session is refused, whatever
// the client puts in Host, :authority or an absolute-form target.
func TestAuthorityMustBeTheSessions(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test allow *\n", false)
	cl := b.client(true)
	req, _ := http.NewRequest("GET", "https://"+host+"/", nil)
	req.Host = "other.example.test"
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("h2 :authority of another host: %d", resp.StatusCode)
	}
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: other.example.test\r\n\r\n",
		"GET https://other.example.test/ HTTP/1.1\r\nHost: " + host + "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: " + host + ":8443\r\n\r\n",
		"CONNECT other.example.test:443 HTTP/1.1\r\nHost: other.example.test:443\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
	} {
		got := rawH1(t, b, raw)
		if !strings.HasPrefix(got, "HTTP/1.1 403") && !strings.HasPrefix(got, "HTTP/1.1 400") {
			t.Errorf("%q: %q", raw, got)
		}
	}
	if h, _ := b.seen.last(); h != nil {
		t.Fatalf("a request for another host reached the upstream: %v", b.seen.hosts)
	}
	// Smuggling: two lengths are refused before any rule; a
	// Content-Length beside Transfer-Encoding is read as chunked (RFC
	// 9112 6.3), and what follows the chunked body is the next request,
	// judged like any other; a folded line is unfolded. The upstream
	// reads only doorman's framing.
	if got := rawH1(t, b, "POST / HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde"); !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Errorf("two lengths: %q", got)
	}
	rawH1(t, b, "POST /first HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
	rawH1(t, b, "GET /fold HTTP/1.1\r\nHost: "+host+"\r\nX: a\r\n b\r\n\r\n")
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	for i, h := range b.seen.hosts {
		if h != host {
			t.Errorf("upstream request %d for host %q", i, h)
		}
	}
	for _, h := range b.seen.headers {
		for k, vs := range h {
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n") {
					t.Errorf("upstream header %s: %q", k, v)
				}
			}
		}
	}
}

// rawH1 sends raw bytes over an inspected HTTP/1.1 session and returns
// the first line of the answer.
func rawH1(t *testing.T, b *bed, raw string) string {
	t.Helper()
	data, _ := ca.CertPEM(b.caDir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	c := tls.Client(b.session(host), &tls.Config{ServerName: host, RootCAs: pool, NextProtos: []string{"http/1.1"}})
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line
}

// An HTTP/2 header value with CR/LF cannot become a second header line
// on an HTTP/1.1 upstream: the h2 server refuses the stream.
func TestH2HeaderInjection(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test allow *\n", false)
	data, _ := ca.CertPEM(b.caDir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	c := tls.Client(b.session(host), &tls.Config{ServerName: host, RootCAs: pool, NextProtos: []string{"h2"}})
	defer c.Close()
	if err := c.Handshake(); err != nil || c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("h2: %v %q", err, c.ConnectionState().NegotiatedProtocol)
	}
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", host}, {":path", "/"},
		{"x-a", "1\r\nx-injected: yes"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok && rst.StreamID == 1 {
			break
		}
		if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == 1 {
			break
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			break
		}
	}
	for _, h := range b.seen.headers {
		if h.Get("X-Injected") != "" {
			t.Fatal("a header injected through an h2 value reached the upstream")
		}
	}
	if len(b.seen.headers) != 0 {
		t.Fatalf("the malformed request reached the upstream: %v", b.seen.headers)
	}
}

func TestStreamAndWebSocket(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test allow *\n", true)
	for _, h2 := range []bool{false, true} {
		cl := b.client(h2)
		resp, err := cl.Get("https://" + host + "/sse")
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "data: first\n" {
			t.Fatalf("first event: %q %v", line, err)
		}
		// The first event arrived while the upstream still holds the
		// stream open: nothing was buffered.
		b.release <- struct{}{}
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(rest), "data: last") {
			t.Fatalf("rest %q", rest)
		}
	}
	// WebSocket over HTTP/1.1: the echo comes back after the handshake.
	data, _ := ca.CertPEM(b.caDir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	c := tls.Client(b.session(host), &tls.Config{ServerName: host, RootCAs: pool, NextProtos: []string{"http/1.1"}})
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	status, _ := br.ReadString('\n')
	if !strings.HasPrefix(status, "HTTP/1.1 101") {
		t.Fatalf("websocket handshake: %q", status)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
	}
	io.WriteString(c, "ping-frame")
	buf := make([]byte, 10)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping-frame" {
		t.Fatalf("echo %q %v", buf, err)
	}
}

// Hop-by-hop fields stay on their hop both ways, trailers are passed on,
// and a response the upstream cuts short is cut short for the client,
// not ended as if it were whole.
func TestRelayFraming(t *testing.T) {
	for _, c := range []struct{ clientH2, upstreamH2 bool }{{false, false}, {true, true}} {
		b := newBed(t, "api.example.test\ninspect api.example.test allow *\n", c.upstreamH2)
		cl := b.client(c.clientH2)
		req, _ := http.NewRequest("GET", "https://"+host+"/hop", nil)
		if !c.clientH2 {
			req.Header.Set("Connection", "X-Req-Hop")
		}
		req.Header.Set("X-Req-Hop", "1")
		req.Header.Set("X-Forwarded-For", "198.51.100.9")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "hop body" || resp.Trailer.Get("X-Sum") != "42" {
			t.Fatalf("h2=%v: body %q (%v), trailer %v", c.clientH2, body, err, resp.Trailer)
		}
		if !c.upstreamH2 && resp.Header.Get("X-Resp-Hop") != "" {
			t.Fatalf("the upstream's hop field reached the client: %v", resp.Header)
		}
		h, _ := b.seen.last()
		if (!c.clientH2 && h.Get("X-Req-Hop") != "") || h.Get("X-Forwarded-For") != "" || h.Get("User-Agent") != "Go-http-client/"+map[bool]string{false: "1.1", true: "2.0"}[c.clientH2] {
			t.Fatalf("h2=%v: the upstream got %v", c.clientH2, h)
		}

		resp, err = cl.Get("https://" + host + "/cut")
		if err != nil {
			t.Fatal(err)
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("h2=%v: a cut response reached the client as whole: %q", c.clientH2, body)
		}
	}
}

// Without a CA the session fails its handshake, and the result says so.
func TestNoCA(t *testing.T) {
	srv := New(Config{Sandbox: "sb", Policy: func() *conf.Policy { return nil }})
	defer srv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		tc := tls.Client(c, &tls.Config{ServerName: host, InsecureSkipVerify: true})
		tc.Handshake()
		tc.Close()
	}()
	sc, _ := ln.Accept()
	res := srv.Serve(&Session{Conn: sc, Name: host})
	if res.HandshakeErr == nil || !strings.Contains(res.HandshakeErr.Error(), "no CA") {
		t.Fatalf("handshake error %v", res.HandshakeErr)
	}
}
