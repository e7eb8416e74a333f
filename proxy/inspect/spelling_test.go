package inspect

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/doorman-net/doorman/ca"
)

// reqSpelling is one request as a client may write it on the wire.
type reqSpelling struct {
	method, target string
	header         [][2]string
}

// postMessages are spellings of POST /v1/messages that origins route to
// its handler, and targets no rule can be trusted to judge.
var postMessages = []reqSpelling{
	{"POST", "/v1/messages", nil},
	{"POST", "/v1/messages/", nil},
	{"POST", "//v1/messages", nil},
	{"POST", "/v1//messages", nil},
	{"POST", "/v1/messages;x", nil},
	{"POST", "/v1;x/messages", nil},
	{"POST", "/V1/MESSAGES", nil},
	{"post", "/v1/messages", nil},
	{"Post", "/V1/Messages/", nil},
	{"POST", "/v1%2Fmessages", nil},
	{"POST", "/v1%2fmessages", nil},
	{"POST", "/%761/messages", nil},
	{"POST", "/v1%252Fmessages", nil},
	{"POST", "/v1/messages%3Fx", nil},
	{"POST", "/v1/messages%23x", nil},
	{"POST", "/v1/messages.", nil},
	{"POST", "/v1/messages%20", nil},
	{"POST", "/v1/me%C5%BF%C5%BFages", nil},
	{"POST", "/v1/%EF%BD%8Dessages", nil},
	{"POST", "/v1/messages?x", nil},
	{"POST", "/v1/messages#x", nil},
	{"POST", "/v1/x/..;/messages", nil},
	{"POST", "/v1/x/%2e%2e/messages", nil},
	{"POST", "/v1%5Cmessages", nil},
	{"POST", "/v1\\messages", nil},
	{"POST", "/v1/messages%00", nil},
	{"POST", "/v1%C0%AFmessages", nil},
	{"POST", "https://" + host + "/v1/messages", nil},
	{"POST", "https://" + host + "//v1/messages/", nil},
	{"PUT", "/v1/messages", [][2]string{{"X-HTTP-Method-Override", "POST"}}},
	{"PUT", "/v1/messages", [][2]string{{"x_http_method_override", "post"}}},
	{"GET", "/v1/messages?_method=POST", nil},
}

// TestSpellingsNeverReachTheUpstream: every spelling of a denied request
// is refused, over HTTP/1.1 and HTTP/2, and the upstream reads none of
// them; the decision log says which spelling each was.
func TestSpellingsNeverReachTheUpstream(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test deny POST /v1/messages\ninspect api.example.test deny GET /secret\n", true)
	spellings := append(postMessages, reqSpelling{"HEAD", "/secret", nil}, reqSpelling{"head", "/SECRET/", nil})
	for _, sp := range spellings {
		if got := rawH1Spelling(t, b, sp); !strings.HasPrefix(got, "HTTP/1.1 403") {
			t.Errorf("HTTP/1.1 %s %s %v: %q", sp.method, sp.target, sp.header, got)
		}
		if strings.HasPrefix(sp.target, "https:") {
			continue // HTTP/2 has no absolute form
		}
		if got := rawH2(t, b, sp); got != "403" {
			t.Errorf("HTTP/2 %s %s %v: %q", sp.method, sp.target, sp.header, got)
		}
	}
	// HTTP/2 carries what no request line can: a space in :path.
	if got := rawH2(t, b, reqSpelling{"POST", "/v1/messages /x", nil}); got != "403" {
		t.Errorf("HTTP/2 :path with a space: %q", got)
	}
	b.seen.mu.Lock()
	reached := append([]string(nil), b.seen.targets...)
	b.seen.mu.Unlock()
	if len(reached) != 0 {
		t.Fatalf("spellings of a denied request reached the upstream: %q", reached)
	}
	log := b.log()
	for _, want := range []string{
		"matched another spelling of the request: trailing slash dropped",
		"matched another spelling of the request: repeated slashes merged",
		"matched another spelling of the request: path parameters (;) dropped",
		"matched another spelling of the request: case folded",
		"matched another spelling of the request: the method in upper case",
		"matched another spelling of the request: decoded twice",
		"matched another spelling of the request: cut at an encoded ? or #",
		"matched another spelling of the request: NFKC-normalized",
		"matched another spelling of the request: HEAD, which origins answer as GET",
		"names", // a method override
		"ambiguous request target: a fragment (#) in the target",
		"ambiguous request target: a dot segment in the path",
		"ambiguous request target: a backslash in the path",
		"ambiguous request target: a control character in the path",
		"ambiguous request target: a path that is not UTF-8",
		"ambiguous request target: a space or control character in the target",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the decision log does not say %q", want)
		}
	}
	// What is not denied still passes, on both protocols.
	if got := rawH1Spelling(t, b, reqSpelling{"POST", "/v1/models", nil}); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("POST /v1/models over HTTP/1.1: %q", got)
	}
	if got := rawH2(t, b, reqSpelling{"POST", "/v1/models", nil}); got != "200" {
		t.Errorf("POST /v1/models over HTTP/2: %q", got)
	}
}

// TestDefaultDenyRefusesOtherSpellings: on a host whose default is deny,
// an allow rule passes its request's canonical spelling only.
func TestDefaultDenyRefusesOtherSpellings(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test allow GET /docs/*\ninspect api.example.test default deny\n", true)
	for _, sp := range []reqSpelling{
		{"GET", "/docs//a", nil},
		{"GET", "/docs/a;x", nil},
		{"GET", "/docs/secret.key;.txt", nil},
		{"GET", "/docs/a%2Fb", nil},
		{"GET", "/docs/a%252Fb", nil},
		{"GET", "/docs/a.", nil},
		{"GET", "/docs/a%3Fb", nil},
		{"GET", "/docs/..;/admin", nil},
		{"get", "/docs/a", nil},
		{"HEAD", "/docs/a", nil},
		{"GET", "/Docs/a", nil},
		{"GET", "/docs/a", [][2]string{{"X-HTTP-Method-Override", "DELETE"}}},
		{"GET", "/docs/a?_method=DELETE", nil},
	} {
		if got := rawH1Spelling(t, b, sp); !strings.HasPrefix(got, "HTTP/1.1 403") {
			t.Errorf("HTTP/1.1 %s %s %v: %q", sp.method, sp.target, sp.header, got)
		}
		if got := rawH2(t, b, sp); got != "403" {
			t.Errorf("HTTP/2 %s %s %v: %q", sp.method, sp.target, sp.header, got)
		}
	}
	b.seen.mu.Lock()
	reached := append([]string(nil), b.seen.targets...)
	b.seen.mu.Unlock()
	if len(reached) != 0 {
		t.Fatalf("non-canonical spellings reached the upstream: %q", reached)
	}
	if log := b.log(); !strings.Contains(log, "not the canonical spelling allow rules match: repeated slashes") ||
		!strings.Contains(log, "not the canonical spelling allow rules match: a method override") {
		t.Errorf("the decision log does not say why:\n%s", log)
	}
	if got := rawH1Spelling(t, b, reqSpelling{"GET", "/docs/a", nil}); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Errorf("GET /docs/a: %q", got)
	}
}

// TestForwardedAsJudged: the upstream reads the path the rules judged:
// the client's, its percent-encoding normalized (RFC 3986 6.2.2), the
// query as sent.
func TestForwardedAsJudged(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test deny DELETE\n", false)
	for _, c := range []struct {
		sp   reqSpelling
		want string
		h2   bool
	}{
		{reqSpelling{"GET", "/%761/m%65ssages", nil}, "GET /v1/messages", true},
		{reqSpelling{"GET", "/a%2fb%7e", nil}, "GET /a%2Fb~", true},
		{reqSpelling{"GET", "/caf\xc3\xa9/{x}", nil}, "GET /caf%C3%A9/%7Bx%7D", true},
		{reqSpelling{"GET", "/x?q=%7e&r=a+b", nil}, "GET /x?q=%7e&r=a+b", true},
		{reqSpelling{"GET", "https://" + host + "/%7Ex?y", nil}, "GET /~x?y", false},
		{reqSpelling{"GET", "//a;b/c.", nil}, "GET //a;b/c.", true},
	} {
		protos := []bool{false}
		if c.h2 {
			protos = append(protos, true)
		}
		for _, h2 := range protos {
			var got string
			if h2 {
				got = rawH2(t, b, c.sp)
			} else {
				got = rawH1Spelling(t, b, c.sp)
			}
			b.seen.mu.Lock()
			last := ""
			if n := len(b.seen.targets); n > 0 {
				last = b.seen.targets[n-1]
			}
			b.seen.mu.Unlock()
			if last != c.want {
				t.Errorf("h2=%v %s %q: the upstream read %q, want %q (%s)", h2, c.sp.method, c.sp.target, last, c.want, got)
			}
		}
	}
}

// rawH1Spelling sends one request, written as sp says, over an inspected
// HTTP/1.1 session and returns the answer's status line.
func rawH1Spelling(t *testing.T, b *bed, sp reqSpelling) string {
	t.Helper()
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 2\r\n", sp.method, sp.target, host)
	for _, h := range sp.header {
		fmt.Fprintf(&req, "%s: %s\r\n", h[0], h[1])
	}
	req.WriteString("\r\n{}")
	return strings.TrimSpace(rawH1(t, b, req.String()))
}

// rawH2 sends one request, written as sp says (the method as :method,
// the target as :path), over an inspected HTTP/2 session, and returns
// the answer's :status, or "reset" if the stream or connection was
// refused.
func rawH2(t *testing.T, b *bed, sp reqSpelling) string {
	t.Helper()
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
	fields := [][2]string{{":method", sp.method}, {":scheme", "https"}, {":authority", host}, {":path", sp.target}, {"content-length", "2"}}
	for _, h := range sp.header {
		fields = append(fields, [2]string{strings.ToLower(h[0]), h[1]})
	}
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(1, true, []byte("{}"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "reset"
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return "reset"
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hf {
				if h.Name == ":status" {
					return h.Value
				}
			}
			return "no status"
		}
	}
}

// TestPathOverridesDropped: headers with which an origin would route a
// request to another path than the one judged (X-Original-URL and kin,
// X-Forwarded-Prefix), or take the client for another, never reach it,
// however their names are spelled.
func TestPathOverridesDropped(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test deny /admin\n", false)
	hdrs := [][2]string{
		{"X-Original-URL", "/admin"}, {"X_Original_URL", "/admin"}, {"X-Rewrite-URL", "/admin"}, {"x_rewrite_url", "/admin"},
		{"X-Original-URI", "/admin"}, {"X-Envoy-Original-Path", "/admin"}, {"X-Forwarded-Prefix", "/admin"},
		{"X_Forwarded_For", "10.0.0.1"}, {"X-Forwarded-Host", "admin.example.test"}, {"Forwarded", "for=10.0.0.1"},
	}
	for _, h2 := range []bool{false, true} {
		sp := reqSpelling{"GET", "/public", hdrs}
		var got string
		if h2 {
			got = rawH2(t, b, sp)
		} else {
			got = rawH1Spelling(t, b, sp)
		}
		h, _ := b.seen.last()
		if h == nil {
			t.Fatalf("h2=%v: GET /public did not reach the upstream (%s)", h2, got)
		}
		for k := range h {
			if key := strings.ToLower(strings.ReplaceAll(k, "_", "-")); strings.HasPrefix(key, "x-forwarded-") || strings.HasPrefix(key, "x-original-") ||
				key == "x-rewrite-url" || key == "forwarded" || key == "x-envoy-original-path" {
				t.Errorf("h2=%v: the upstream got %s: %q", h2, k, h[k])
			}
		}
	}
}
