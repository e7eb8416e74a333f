package inspect

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
)

// setBed is an inspected host a rule set covers, in front of a fake
// provider that records what reached it and answers what the test says.
type setBed struct {
	t      testing.TB
	name   string
	srv    *Server
	caDir  string
	logs   lockedBuf
	upAddr string
	pol    *conf.Policy

	mu     sync.Mutex
	bodies []string
	hdrs   []http.Header
	// answer is the fake provider's response to the next request.
	answer func(w http.ResponseWriter, r *http.Request)
}

func newSetBed(t testing.TB, name, policy string) *setBed {
	t.Helper()
	b := &setBed{t: t, name: name, logs: lockedBuf{&sync.Mutex{}, &bytes.Buffer{}}}
	p, err := conf.ParseFile([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	b.pol = p
	b.caDir = filepath.Join(t.TempDir(), "net")
	if _, err := ca.Ensure(b.caDir, p.InspectedHosts()); err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	cert, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.bodies = append(b.bodies, string(body))
		b.hdrs = append(b.hdrs, r.Header.Clone())
		answer := b.answer
		b.mu.Unlock()
		if answer != nil {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"type":"message","content":[{"type":"text","text":"hi"}]}`)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	b.upAddr = up.Listener.Addr().String()
	b.srv = New(Config{
		Sandbox: "sb1", Minter: ca.NewMinter(b.caDir), UpstreamRoots: roots,
		Logger: slog.New(slog.NewJSONHandler(b.logs, nil)),
		Policy: func() *conf.Policy { return b.pol },
	})
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func (b *setBed) client(h2 bool) *http.Client {
	data, err := ca.CertPEM(b.caDir)
	if err != nil {
		b.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			defer ln.Close()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return nil, err
			}
			sc, err := ln.Accept()
			if err != nil {
				return nil, err
			}
			go b.srv.Serve(&Session{
				Conn: sc, Name: b.name, Client: netip.MustParseAddrPort("10.0.0.2:1000"), Dst: netip.MustParseAddrPort("203.0.113.7:443"),
				Dial:    func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "tcp", b.upAddr) },
				DialKey: b.name,
			})
			return client, nil
		},
		TLSClientConfig:    &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2:  h2,
		DisableCompression: true,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	b.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func (b *setBed) received() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.bodies...)
}

func (b *setBed) post(c *http.Client, path, body string, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	req, _ := http.NewRequest("POST", "https://"+b.name+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatalf("POST %s: %v", path, err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(data)
}

// The handler applies a set in each action: deny refuses with a JSON
// error naming the tool and the rule, nothing reaching the provider;
// strip forwards the rest (a new Content-Length, gzip undone); probe
// passes everything and logs the tools.
func TestRuleSetActions(t *testing.T) {
	const anth = "api.anthropic.com"
	withTool := `{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"},{"name":"f","input_schema":{}}],"messages":[]}`
	stripped := `{"model":"m","tools":[{"name":"f","input_schema":{}}],"messages":[]}`
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			b := newSetBed(t, anth, anth+"\nruleset closed-book\n")
			c := b.client(h2)
			resp, body := b.post(c, "/v1/messages", withTool)
			var refusal struct {
				Error struct{ Type, Tool, Rule, Reason string }
			}
			if json.Unmarshal([]byte(body), &refusal); resp.StatusCode != 403 || refusal.Error.Type != "doorman_policy" ||
				refusal.Error.Tool != "anthropic.web_search" || !strings.Contains(refusal.Error.Rule, "closed-book@1: tool anthropic.web_search") {
				t.Fatalf("deny: %d %s", resp.StatusCode, body)
			}
			if got := b.received(); len(got) != 0 {
				t.Fatalf("the refused request reached the provider: %q", got)
			}

			b.pol, _ = conf.ParseFile([]byte(anth + "\nruleset closed-book strip\n"))
			resp, body = b.post(c, "/v1/messages", withTool)
			if got := b.received(); resp.StatusCode != 200 || len(got) != 1 || got[0] != stripped {
				t.Fatalf("strip: %d %s; the provider got %q", resp.StatusCode, body, got)
			}
			// A gzip body is read decoded and forwarded so.
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			io.WriteString(zw, withTool)
			zw.Close()
			resp, body = b.post(c, "/v1/messages", gz.String(), "Content-Encoding", "gzip")
			b.mu.Lock()
			last, lastHdr := b.bodies[len(b.bodies)-1], b.hdrs[len(b.hdrs)-1]
			b.mu.Unlock()
			if resp.StatusCode != 200 || last != stripped || lastHdr.Get("Content-Encoding") != "" || lastHdr.Get("Accept-Encoding") != "identity" {
				t.Fatalf("gzip: %d %s; the provider got %q %v", resp.StatusCode, body, last, lastHdr)
			}
			// A coding doorman does not decode is refused.
			if resp, body := b.post(c, "/v1/messages", "xx", "Content-Encoding", "br"); resp.StatusCode != 415 {
				t.Fatalf("br: %d %s", resp.StatusCode, body)
			}
			// A tool_choice naming the removed tool cannot go.
			resp, body = b.post(c, "/v1/messages", `{"tools":[{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"tool","name":"web_search"}}`)
			if resp.StatusCode != 403 || !strings.Contains(body, "tool_choice names the removed tool") {
				t.Fatalf("tool_choice: %d %s", resp.StatusCode, body)
			}

			b.pol, _ = conf.ParseFile([]byte(anth + "\nruleset closed-book probe\n"))
			n := len(b.received())
			resp, _ = b.post(c, "/v1/messages", withTool)
			if got := b.received(); resp.StatusCode != 200 || len(got) != n+1 || got[n] != withTool {
				t.Fatalf("probe: %d; the provider got %q", resp.StatusCode, got[n:])
			}
			log := b.logs.b.String()
			for _, want := range []string{
				`"ruleset":"closed-book@1 deny"`, `"ruleset":"closed-book@1 strip"`, `"ruleset":"closed-book@1 probe"`,
				`"tools":["anthropic.web_search at tools[0] (web_search_20250305)"]`,
				`"removed":["anthropic.web_search at tools[0] (web_search_20250305)"]`,
				`"declared":["web_search_20250305"]`,
			} {
				if !strings.Contains(log, want) {
					t.Errorf("the log lacks %s:\n%s", want, log)
				}
			}
		})
	}
}

// The tripwire through the handler: a streamed response is cut before
// the event that shows a provider-side tool, with an error event; a JSON
// response of known length is refused whole; probe passes both.
func TestRuleSetTripwire(t *testing.T) {
	const anth = "api.anthropic.com"
	sse := "event: message_start\ndata: {\"type\":\"message_start\"}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web_fetch\",\"input\":{}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"web_fetch_tool_result\",\"content\":{\"type\":\"web_fetch_result\",\"url\":\"https://x\",\"content\":\"SECRET PAGE\"}}}\n\n"
	jsonBody := `{"content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}},{"type":"web_search_tool_result","content":[{"title":"SECRET PAGE"}]}]}`
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			b := newSetBed(t, anth, anth+"\nruleset closed-book strip\n")
			c := b.client(h2)
			b.answer = func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/stream" {
					w.Header().Set("Content-Type", "text/event-stream")
					for _, ev := range strings.SplitAfter(sse, "\n\n") {
						io.WriteString(w, ev)
						w.(http.Flusher).Flush()
					}
					return
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, jsonBody)
			}
			req, _ := http.NewRequest("POST", "https://"+anth+"/stream", strings.NewReader(`{"stream":true}`))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil || !strings.HasPrefix(string(got), "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: error\ndata: {") ||
				strings.Contains(string(got), "SECRET") || strings.Contains(string(got), "server_tool_use\"") {
				t.Fatalf("stream: err %v, got %q", err, got)
			}
			resp, body := b.post(c, "/json", `{}`)
			if resp.StatusCode != 403 || strings.Contains(body, "SECRET") || !strings.Contains(body, "anthropic.server_tool") {
				t.Fatalf("json: %d %s", resp.StatusCode, body)
			}
			log := b.logs.b.String()
			if !strings.Contains(log, `"evidence":["anthropic.server_tool"]`) || !strings.Contains(log, `"verdict":"deny"`) {
				t.Errorf("log:\n%s", log)
			}

			b.pol, _ = conf.ParseFile([]byte(anth + "\nruleset closed-book probe\n"))
			resp, body = b.post(c, "/json", `{}`)
			if resp.StatusCode != 200 || body != jsonBody {
				t.Fatalf("probe json: %d %s", resp.StatusCode, body)
			}
			b.mu.Lock()
			b.answer = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", "gzip")
				io.WriteString(w, "not scanned")
			}
			b.mu.Unlock()
			b.pol, _ = conf.ParseFile([]byte(anth + "\nruleset closed-book\n"))
			if resp, _ := b.post(c, "/json", `{}`); resp.StatusCode != 502 {
				t.Fatalf("a coded response: %d", resp.StatusCode)
			}
		})
	}
}

// A sibling session: a request whose Host is another name of the front
// end than the session's is refused (the session check every inspected
// session has), and the set inspects every name of the front end.
func TestRuleSetSiblingSession(t *testing.T) {
	b := newSetBed(t, "storage.googleapis.com", "storage.googleapis.com\ngenerativelanguage.googleapis.com\nruleset closed-book\n")
	if b.pol.InspectFor("storage.googleapis.com") == nil {
		t.Fatal("storage.googleapis.com is not inspected")
	}
	c := b.client(true)
	req, _ := http.NewRequest("POST", "https://storage.googleapis.com/v1beta/models/m:generateContent", strings.NewReader(`{"tools":[{"googleSearch":{}}]}`))
	req.Host = "generativelanguage.googleapis.com"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || len(b.received()) != 0 {
		t.Fatalf("fronted request: %d, provider got %q", resp.StatusCode, b.received())
	}
}
