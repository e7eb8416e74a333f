package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
)

// These tests drive the plaintext relay with an upstream that follows a
// script written byte by byte, so that a test decides exactly what each
// response looks like and when it is sent relative to the requests the
// upstream has read.

// scriptedUpstream serves one scripted connection at a time and records
// every request it reads.
type scriptedUpstream struct {
	addr netip.AddrPort

	mu   sync.Mutex
	seen []*http.Request
	done chan struct{} // closed when the script of the first connection returns
}

// upstreamConn is the upstream's end of one connection, as a script sees it.
type upstreamConn struct {
	s  *scriptedUpstream
	c  net.Conn
	br *bufio.Reader
}

// startScripted listens on addr (port 0: any) and runs script on the first
// connection it accepts; later connections are closed at once.
func (e *testEnv) startScripted(addr netip.Addr, script func(u *upstreamConn)) *scriptedUpstream {
	e.t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { ln.Close() })
	s := &scriptedUpstream{addr: netip.MustParseAddrPort(ln.Addr().String()), done: make(chan struct{})}
	go func() {
		first := true
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !first {
				c.Close()
				continue
			}
			first = false
			e.t.Cleanup(func() { c.Close() })
			go func() {
				defer close(s.done)
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				script(&upstreamConn{s: s, c: c, br: bufio.NewReader(c)})
			}()
		}
	}()
	return s
}

// next reads the next request, body included, and records it; nil at the
// end of the stream or if the bytes are not a request.
func (u *upstreamConn) next() *http.Request {
	req, err := http.ReadRequest(u.br)
	if err != nil {
		return nil
	}
	io.Copy(io.Discard, req.Body)
	u.s.mu.Lock()
	u.s.seen = append(u.s.seen, req)
	u.s.mu.Unlock()
	return req
}

// head reads the next request head and records it, leaving its body
// unread; nil at the end of the stream.
func (u *upstreamConn) head() *http.Request {
	req, err := http.ReadRequest(u.br)
	if err != nil {
		return nil
	}
	u.s.mu.Lock()
	u.s.seen = append(u.s.seen, req)
	u.s.mu.Unlock()
	return req
}

// acceptWebSocket reads a request and, if it is a WebSocket handshake,
// switches and echoes every byte after it until the end of the stream;
// anything else gets a 400.
func (u *upstreamConn) acceptWebSocket() {
	req := u.next()
	if req == nil {
		return
	}
	if !strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		u.send("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
		return
	}
	u.send("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	io.Copy(u.c, u.br)
}

// send writes each part with a write of its own, so that the parts leave
// as separate segments where the stack allows (TCP_NODELAY is on).
func (u *upstreamConn) send(parts ...string) {
	for _, p := range parts {
		if _, err := io.WriteString(u.c, p); err != nil {
			return
		}
	}
}

// serveRest answers every further request with a short 200.
func (u *upstreamConn) serveRest() {
	for u.next() != nil {
		u.send("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
	}
}

// wait waits until the script has returned (the proxy closed its end, or
// the script ended) and returns the requests the upstream read.
func (s *scriptedUpstream) wait(t *testing.T) []*http.Request {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream's script is still running")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// requestLines renders requests as "METHOD target host" lines for messages.
func requestLines(reqs []*http.Request) string {
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "  %s %s host %s upgrade %q\n", r.Method, r.URL, r.Host, r.Header.Get("Upgrade"))
	}
	return b.String()
}

// assertNeverSaw fails if the upstream read a request for host.
func assertNeverSaw(t *testing.T, reqs []*http.Request, host string) {
	t.Helper()
	for _, r := range reqs {
		if strings.HasPrefix(r.Host, host) {
			t.Fatalf("the upstream received a request for %s:\n%s", host, requestLines(reqs))
		}
	}
}

// readResponse reads one response and its body from br.
func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the response to %s: %v", method, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of a %d response to %s: %v", resp.StatusCode, method, err)
	}
	return resp, string(body)
}

const (
	wsRequest = "GET /ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	evilRequest = "GET /exfil HTTP/1.1\r\nHost: evil.test\r\n\r\n"
	fake101     = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
)

// The attack of issue 14: the response to an allowed request carries, in
// its body, a line that looks like a 101; a WebSocket upgrade is pending
// when it passes; the server declines the upgrade, and the next request
// names a host the policy does not admit, on the same address (a CDN). A
// line scan of the responses takes the body line for the answer to the
// upgrade and stops checking; a framer knows it is body.
func TestHTTPFake101InBody(t *testing.T) {
	clResponse := func(first string, rest ...string) (string, []string) {
		n := len(first) + len(strings.Join(rest, ""))
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", n, first), rest
	}
	type variant struct {
		name string
		// head is sent before the upgrade request arrives, rest after.
		head string
		rest []string
	}
	var variants []variant
	head, rest := clResponse("line one\r\n", "\r\n"+fake101+"tail\r\n")
	variants = append(variants, variant{"content-length", head, rest})
	variants = append(variants, variant{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nline one\r\n\r\n",
		[]string{fmt.Sprintf("%x\r\n\r\n%s\r\n", len(fake101)+2, fake101), "0\r\n\r\n"}})
	head, rest = clResponse("line one\r\n", "body\r\n", "HTTP/1.1 101 Switching Protocols\r\n",
		"Upgrade: websocket\r\nConnection: Upgrade\r\n", "\r\n", "tail of the body\r\n")
	variants = append(variants, variant{"segments", head, rest})
	for _, tc := range variants {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
			up := e.startScripted(apiAddr, func(u *upstreamConn) {
				if u.next() == nil {
					return
				}
				u.send(tc.head)
				// The upgrade request has reached the upstream: the
				// proxy is waiting for its answer while the rest of the
				// first body passes.
				if u.next() == nil {
					return
				}
				u.send(tc.rest...)
				u.send("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\ndeclined\n")
				u.serveRest()
			})
			c := e.dial(up.addr)
			c.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(c)
			io.WriteString(c, "GET /one HTTP/1.1\r\nHost: api.test\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("first response: %v", err)
			}
			// Pipelined behind the first response: the upgrade and the
			// request for the other host.
			io.WriteString(c, wsRequest+evilRequest)
			body, err := io.ReadAll(resp.Body)
			if err != nil || !strings.Contains(string(body), "HTTP/1.1 101 Switching Protocols\r\n") {
				t.Fatalf("first body %q, %v", body, err)
			}
			if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "declined\n" {
				t.Fatalf("answer to the upgrade: %d %q, want the 200 that declines", resp.StatusCode, body)
			}
			resp, third := readResponse(t, br, "GET")
			if resp.StatusCode != 403 || !strings.Contains(third, `"evil.test"`) {
				t.Errorf("request for evil.test answered %d %q, want 403", resp.StatusCode, third)
			}
			c.Close()
			assertNeverSaw(t, up.wait(t), "evil.test")
			r := e.waitRecord(recordFor("evil.test", "deny"))
			if !strings.Contains(r["reason"].(string), "request for evil.test") {
				t.Errorf("reason %q", r["reason"])
			}
		})
	}
}

// An h2c upgrade is not honoured: the upstream never sees Upgrade: h2c,
// answers in HTTP/1.1, and the next request's Host is checked. Were the
// upgrade forwarded, a server that accepts it would make the rest of the
// stream HTTP/2, whose requests name any :authority.
func TestHTTPH2CUpgradeRefused(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	up := e.startScripted(apiAddr, func(u *upstreamConn) {
		for {
			req := u.next()
			if req == nil {
				return
			}
			if strings.EqualFold(req.Header.Get("Upgrade"), "h2c") {
				// What an h2c server does; the test's stand-in for
				// HTTP/2 then reads the client's next request, which is
				// routed by its own authority.
				u.send("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
				continue
			}
			u.send("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhttp/1.1\n")
		}
	})
	c := e.dial(up.addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, HTTP2-Settings\r\n"+
		"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	resp, body := readResponse(t, br, "GET")
	if resp.StatusCode == 101 {
		// The switch went through: the rest is the stand-in for HTTP/2.
		io.WriteString(c, evilRequest)
		resp, body = readResponse(t, br, "GET")
		t.Errorf("h2c upgrade reached the upstream and switched; the request for evil.test then got %d %q", resp.StatusCode, body)
	} else {
		if resp.StatusCode != 200 || body != "http/1.1\n" {
			t.Fatalf("h2c upgrade request answered %d %q, want the server's HTTP/1.1 200", resp.StatusCode, body)
		}
		io.WriteString(c, evilRequest)
		if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 403 || !strings.Contains(body, `"evil.test"`) {
			t.Errorf("request for evil.test after a refused h2c upgrade answered %d %q, want 403", resp.StatusCode, body)
		}
	}
	c.Close()
	seen := up.wait(t)
	assertNeverSaw(t, seen, "evil.test")
	for _, r := range seen {
		if r.Header.Get("Upgrade") != "" || r.Header.Get("Http2-Settings") != "" {
			t.Errorf("the upstream saw Upgrade %q, HTTP2-Settings %q", r.Header.Get("Upgrade"), r.Header.Get("Http2-Settings"))
		}
	}
	r := e.waitRecord(recordFor("evil.test", "deny"))
	if reason := r["reason"].(string); !strings.Contains(reason, "request for evil.test") || !strings.Contains(reason, "h2c upgrade refused") {
		t.Errorf("reason %q, want the denied request and the refused h2c upgrade", reason)
	}
}

// wsEcho performs a WebSocket handshake on a connection whose upstream
// runs acceptWebSocket, and checks that bytes after it, HTTP-looking ones
// included, come back unchanged.
func wsEcho(t *testing.T, c *net.TCPConn, br *bufio.Reader) {
	t.Helper()
	io.WriteString(c, wsRequest)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("WebSocket handshake after the earlier responses: %v, %v", resp, err)
	}
	frames := "\x81\x05hello" + evilRequest
	io.WriteString(c, frames)
	got := make([]byte, len(frames))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != frames {
		t.Fatalf("after the switch: %q, %v; want %q echoed", got, err, frames)
	}
}

// A response to HEAD has no body, whatever its headers say: the next
// response starts right after its head.
func TestHTTPHeadResponseHasNoBody(t *testing.T) {
	for name, head := range map[string]string{
		"content-length": "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
		"chunked":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
			up := e.startScripted(apiAddr, func(u *upstreamConn) {
				if u.next() == nil {
					return
				}
				u.send(head)
				u.acceptWebSocket()
			})
			c := e.dial(up.addr)
			c.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(c)
			io.WriteString(c, "HEAD / HTTP/1.1\r\nHost: api.test\r\n\r\n")
			if resp, body := readResponse(t, br, "HEAD"); resp.StatusCode != 200 || body != "" {
				t.Fatalf("HEAD answered %d %q", resp.StatusCode, body)
			}
			wsEcho(t, c, br)
		})
	}
}

// Interim responses (100 Continue, 103 Early Hints) come before the final
// response to the same request and do not answer it.
func TestHTTPInterimResponses(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	up := e.startScripted(apiAddr, func(u *upstreamConn) {
		req := u.head()
		if req == nil {
			return
		}
		u.send("HTTP/1.1 100 Continue\r\n\r\n")
		io.Copy(io.Discard, req.Body)
		u.send("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
			"HTTP/1.1 201 Created\r\nContent-Length: 8\r\n\r\ncreated\n")
		u.acceptWebSocket()
	})
	c := e.dial(up.addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: api.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	if resp, _ := readResponse(t, br, "POST"); resp.StatusCode != 100 {
		t.Fatalf("first answer %d, want 100 Continue", resp.StatusCode)
	}
	io.WriteString(c, "hello")
	if resp, _ := readResponse(t, br, "POST"); resp.StatusCode != 103 || resp.Header.Get("Link") == "" {
		t.Fatalf("second answer %d %v, want 103 Early Hints", resp.StatusCode, resp.Header)
	}
	if resp, body := readResponse(t, br, "POST"); resp.StatusCode != 201 || body != "created\n" {
		t.Fatalf("final answer %d %q, want 201", resp.StatusCode, body)
	}
	wsEcho(t, c, br)
}

// 204 and 304 responses have no body, whatever their headers say.
func TestHTTPNoContentAndNotModified(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	up := e.startScripted(apiAddr, func(u *upstreamConn) {
		if u.next() == nil || u.next() == nil {
			return
		}
		u.send("HTTP/1.1 204 No Content\r\nContent-Length: 40\r\n\r\n",
			"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nTransfer-Encoding: chunked\r\nETag: \"x\"\r\n\r\n")
		u.acceptWebSocket()
	})
	c := e.dial(up.addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "DELETE /item HTTP/1.1\r\nHost: api.test\r\n\r\nGET /item HTTP/1.1\r\nHost: api.test\r\nIf-None-Match: \"x\"\r\n\r\n")
	if resp, _ := readResponse(t, br, "DELETE"); resp.StatusCode != 204 {
		t.Fatalf("DELETE answered %d, want 204", resp.StatusCode)
	}
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 304 {
		t.Fatalf("conditional GET answered %d, want 304", resp.StatusCode)
	}
	wsEcho(t, c, br)
}

// A response without Content-Length or Transfer-Encoding runs until the
// server closes: every byte reaches the client, HTTP-looking lines
// included, then the connection ends; a request pipelined behind it goes
// nowhere.
func TestHTTPCloseDelimitedResponse(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	first, rest := "first part\r\n", "\r\n"+fake101+"\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nthe end\r\n"
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
	up := e.startScripted(apiAddr, func(u *upstreamConn) {
		if u.next() == nil {
			return
		}
		u.send(head, first)
		if u.next() == nil { // the WebSocket handshake
			return
		}
		u.send(rest)
	})
	c := e.dial(up.addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: api.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("response: %v, %v", resp, err)
	}
	io.WriteString(c, wsRequest+evilRequest)
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != first+rest {
		t.Fatalf("close-delimited body %q, %v; want %q and the end of the stream", body, err, first+rest)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the body: %d bytes, %v; want EOF", n, err)
	}
	c.Close()
	assertNeverSaw(t, up.wait(t), "evil.test")
	r := e.waitRecord(recordFor("api.test", "allow"))
	if down, _ := r["bytes_down"].(float64); down != float64(len(head+first+rest)) {
		t.Errorf("bytes_down %v, want %d", r["bytes_down"], len(head+first+rest))
	}
}

// A 101 the request did not ask for, or that switches to anything but
// WebSocket, cuts the connection: it is not relayed, and the decision
// line says why.
func TestHTTPUnaskedSwitchCutsConnection(t *testing.T) {
	for _, tc := range []struct{ name, request, answer, reason string }{
		{"plain GET", "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n",
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
			"101 Switching Protocols to a GET request that asked for no WebSocket upgrade"},
		{"h2c despite the removed upgrade", "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
			"101 Switching Protocols to a GET request that asked for no WebSocket upgrade"},
		{"other protocol to a WebSocket handshake", wsRequest,
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
			`101 Switching Protocols to "h2c", not websocket`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
			up := e.startScripted(apiAddr, func(u *upstreamConn) {
				if u.next() == nil {
					return
				}
				u.send(tc.answer)
				u.serveRest()
			})
			c := e.dial(up.addr)
			c.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(c, tc.request)
			got, _ := io.ReadAll(c) // a reset or EOF ends it
			if len(got) != 0 {
				t.Fatalf("client received %q; want the connection cut before the 101", got)
			}
			io.WriteString(c, evilRequest)
			c.Close()
			assertNeverSaw(t, up.wait(t), "evil.test")
			r := e.waitRecord(recordFor("api.test", "deny"))
			if reason := r["reason"].(string); !strings.Contains(reason, tc.reason) {
				t.Errorf("reason %q, want it to say %q", reason, tc.reason)
			}
		})
	}
}

// A response stream that cannot be framed, or a response nobody asked for,
// cuts the connection with a deny line that says why.
func TestHTTPResponseFramingErrors(t *testing.T) {
	for _, tc := range []struct{ name, answer, reason string }{
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 20\r\n\r\nok",
			"conflicting Content-Length values 2 and 20"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokHTTP/1.1 101 Switching Protocols\r\n\r\n",
			"chunk data is followed by"},
		{"not a response", "HTTP/2 200\r\n\r\n", "does not start with HTTP/1.0 or HTTP/1.1"},
		{"unsolicited", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno",
			"a response with no request outstanding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
			up := e.startScripted(apiAddr, func(u *upstreamConn) {
				if u.next() == nil {
					return
				}
				u.send(tc.answer)
				u.serveRest()
			})
			c := e.dial(up.addr)
			c.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
			io.ReadAll(c)
			c.Close()
			up.wait(t)
			r := e.waitRecord(recordFor("api.test", "deny"))
			if reason := r["reason"].(string); !strings.HasPrefix(reason, "response framing: ") || !strings.Contains(reason, tc.reason) {
				t.Errorf("reason %q, want response framing: ...%s", reason, tc.reason)
			}
		})
	}
}

// CONNECT answered with 2xx makes the connection a tunnel; any other
// answer leaves it HTTP, checked request by request.
func TestHTTPConnect(t *testing.T) {
	t.Run("established", func(t *testing.T) {
		e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
		up := e.startScripted(apiAddr, func(u *upstreamConn) {
			if u.next() == nil {
				return
			}
			u.send("HTTP/1.1 200 Connection established\r\n\r\n")
			io.Copy(u.c, u.br)
		})
		c := e.dial(up.addr)
		c.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		io.WriteString(c, "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n")
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v, %v", resp, err)
		}
		tunnel := "\x16\x03\x01\x00\x05hello" + evilRequest
		io.WriteString(c, tunnel)
		got := make([]byte, len(tunnel))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != tunnel {
			t.Fatalf("through the tunnel: %q, %v", got, err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
		up := e.startScripted(apiAddr, func(u *upstreamConn) {
			if u.next() == nil {
				return
			}
			u.send("HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 5\r\n\r\nnope\n")
			u.serveRest()
		})
		c := e.dial(up.addr)
		c.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		io.WriteString(c, "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n")
		if resp, body := readResponse(t, br, "CONNECT"); resp.StatusCode != 407 || body != "nope\n" {
			t.Fatalf("CONNECT answered %d %q, want 407", resp.StatusCode, body)
		}
		io.WriteString(c, evilRequest)
		if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 403 {
			t.Fatalf("request for evil.test after a refused CONNECT answered %d, want 403", resp.StatusCode)
		}
		c.Close()
		assertNeverSaw(t, up.wait(t), "evil.test")
	})
}

// The HTTP/2 preface after HTTP/1.x requests is refused with a 403 and
// never relayed; as the first bytes of a connection it names no host, so
// only an address entry could admit it.
func TestHTTPH2CPriorKnowledge(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	up := e.startScripted(apiAddr, func(u *upstreamConn) { u.serveRest() })
	c := e.dial(up.addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("first request answered %d", resp.StatusCode)
	}
	io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 403 || !strings.Contains(body, "h2c prior knowledge") {
		t.Fatalf("HTTP/2 preface answered %d %q, want 403", resp.StatusCode, body)
	}
	c.Close()
	for _, r := range up.wait(t) {
		if r.Method != "GET" {
			t.Errorf("the upstream received %s %s", r.Method, r.URL)
		}
	}
	r := e.waitRecord(func(m map[string]any) bool { return m["verdict"] == "deny" && m["proto"] == "http" })
	if r["reason"] != "h2c prior knowledge after HTTP/1.x requests" {
		t.Errorf("reason %q", r["reason"])
	}

	first := e.dial(netip.AddrPortFrom(evilAddr, up.addr.Port()))
	first.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(first, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	io.ReadAll(first)
	r = e.waitRecord(func(m map[string]any) bool { return m["proto"] == "h2c" })
	if r["verdict"] != "deny" || !strings.Contains(r["reason"].(string), "h2c prior knowledge names no host") {
		t.Errorf("h2c with prior knowledge as the first bytes: %v", r)
	}
}

// An allowed connection whose h2c upgrade was refused says so in its
// decision line.
func TestHTTPH2CUpgradeNoted(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	up := e.startScripted(apiAddr, func(u *upstreamConn) { u.serveRest() })
	c := e.dial(up.addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("answered %d %q", resp.StatusCode, body)
	}
	c.Close()
	up.wait(t)
	r := e.waitRecord(recordFor("api.test", "allow"))
	if r["reason"] != "name allowed; h2c upgrade refused" {
		t.Errorf("reason %q", r["reason"])
	}
}

// Large response bodies arrive intact, whatever their framing, and the
// connection stays framed after them: the proxy knows the next response
// is the answer to a WebSocket handshake.
func TestHTTPLargeResponses(t *testing.T) {
	body := randomBytes(40<<20, 7)
	sum := sha256.Sum256(body)
	for _, framing := range []string{"content-length", "chunked", "close"} {
		t.Run(framing, func(t *testing.T) {
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
			up := e.startScripted(apiAddr, func(u *upstreamConn) {
				if u.next() == nil {
					return
				}
				switch framing {
				case "content-length":
					u.send(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body)))
					u.c.Write(body)
				case "chunked":
					u.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
					for b := body; len(b) > 0; {
						n := min(len(b), 3<<20+17)
						u.send(fmt.Sprintf("%x\r\n", n))
						u.c.Write(b[:n])
						u.send("\r\n")
						b = b[n:]
					}
					u.send("0\r\n\r\n")
				case "close":
					u.send("HTTP/1.1 200 OK\r\n\r\n")
					u.c.Write(body)
					return
				}
				u.acceptWebSocket()
			})
			c := e.dial(up.addr)
			c.SetDeadline(time.Now().Add(60 * time.Second))
			br := bufio.NewReader(c)
			io.WriteString(c, "GET /big HTTP/1.1\r\nHost: api.test\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			if err != nil || n != int64(len(body)) || !bytes.Equal(h.Sum(nil), sum[:]) {
				t.Fatalf("body: %d bytes, %v; want the %d bytes sent", n, err, len(body))
			}
			if framing != "close" {
				// Framed right, the next response is the 101 it is.
				wsEcho(t, c, br)
			}
			c.Close()
			up.wait(t)
			r := e.waitRecord(recordFor("api.test", "allow"))
			if down, _ := r["bytes_down"].(float64); down < float64(len(body)) {
				t.Errorf("bytes_down %v, want at least %d", r["bytes_down"], len(body))
			}
		})
	}
}
