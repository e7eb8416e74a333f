package sniff

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// FuzzServerName checks that ServerName never panics, that its answer for
// a prefix of a stream is final once it is not ErrIncomplete, and that a
// hello it accepts gives the same name however it is cut into records.
func FuzzServerName(f *testing.F) {
	f.Add([]byte{})
	f.Add(defaultSpec(hostSNI("a.example"), hostSNI("b.example")).record())
	f.Add(defaultSpec(sni(sniEntry{0, "a.example"}, sniEntry{0, "b.example"})).record())
	f.Add(records(message(defaultSpec(hostSNI("split.example")).body()), func(int) int { return 1 }))
	f.Fuzz(func(t *testing.T, data []byte) {
		ch, err := ParseClientHello(data)
		if err == nil && ch.ServerName != "" {
			if _, herr := checkHostName([]byte(ch.ServerName)); herr != nil || strings.ToLower(ch.ServerName) != ch.ServerName {
				t.Fatalf("returned invalid name %q (%v)", ch.ServerName, herr)
			}
		}
		if err != nil && err != ErrIncomplete && err != ErrNotTLS && !errors.Is(err, ErrMalformedHello) {
			t.Fatalf("error %v is none of the documented kinds", err)
		}
		// Every prefix: ErrIncomplete, or exactly the final answer.
		step := 1
		if len(data) > 2048 {
			step = len(data) / 512
		}
		// HelloNeeds of an incomplete prefix is more than its length and,
		// when the answer is a hello, no more than the length at which
		// it came. (A malformed record header may be found before.)
		final := -1
		if err != ErrIncomplete {
			final = len(data)
		}
		var needs [][2]int
		for n := 0; n < len(data); n += step {
			pch, perr := ParseClientHello(data[:n])
			if perr == ErrIncomplete {
				if final < 0 || n < final {
					needs = append(needs, [2]int{n, HelloNeeds(data[:n])})
				}
				continue
			}
			final = min(final, n)
			if pch != ch || !sameError(perr, err) {
				t.Fatalf("first %d of %d bytes gave %+v, %v; all gave %+v, %v", n, len(data), pch, perr, ch, err)
			}
		}
		for _, nn := range needs {
			if n, need := nn[0], nn[1]; need <= n || (err == nil && n < final && need > final) {
				t.Fatalf("HelloNeeds of the first %d bytes is %d; the answer came at %d", n, need, final)
			}
		}
		if err != ErrIncomplete && HelloNeeds(data) != 0 {
			t.Fatalf("HelloNeeds of a complete answer is %d", HelloNeeds(data))
		}
		if goName, ok := goServerName(data); ok && err == nil && !strings.EqualFold(goName, ch.ServerName) {
			t.Fatalf("crypto/tls reads server name %q, we read %q", goName, ch.ServerName)
		}
		if err != nil {
			return
		}
		msg := handshakeBytes(t, data)
		for _, size := range []int{1, 3, 5 + int(data[len(data)/2])} {
			split := records(msg, func(int) int { return size })
			if sch, serr := ParseClientHello(split); serr != nil || sch != ch {
				t.Fatalf("in records of %d: %+v, %v; in the original: %+v", size, sch, serr, ch)
			}
		}
	})
}

// goServerName feeds data to a crypto/tls server and returns the server
// name it parsed, ok false if it did not get as far as a parsed ClientHello.
func goServerName(data []byte) (name string, ok bool) {
	stop := errors.New("stop after the ClientHello")
	srv := tls.Server(&replayConn{r: bytes.NewReader(data)}, &tls.Config{
		GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			name, ok = chi.ServerName, true
			return nil, stop
		},
	})
	srv.Handshake()
	return name, ok
}

// replayConn is a net.Conn that reads from r and discards what is written.
type replayConn struct {
	net.Conn // nil: the methods below are all crypto/tls uses here
	r        *bytes.Reader
}

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// FuzzParseRequestHead checks that ParseRequestHead never panics, that its
// answer for a prefix is final once it is not ErrIncomplete, and that Go's
// own HTTP server reads a head it accepts the same way: same method,
// target and host.
func FuzzParseRequestHead(f *testing.F) {
	for _, r := range seedRequests {
		f.Add([]byte(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseRequestHead(data)
		if err != nil && err != ErrIncomplete && !errors.Is(err, ErrNotHTTP) && !errors.Is(err, ErrMalformedRequest) {
			t.Fatalf("error %v is none of the documented kinds", err)
		}
		step := 1
		if len(data) > 2048 {
			step = len(data) / 512
		}
		for n := 0; n < len(data); n += step {
			ph, perr := ParseRequestHead(data[:n])
			if perr == ErrIncomplete {
				continue
			}
			if ph != h || !sameError(perr, err) {
				t.Fatalf("first %d of %d bytes gave %+v, %v; all gave %+v, %v", n, len(data), ph, perr, h, err)
			}
		}
		if err != nil {
			return
		}
		if h.Len > len(data) || h.Len > MaxHeadSize || string(data[h.Len-4:h.Len]) != "\r\n\r\n" {
			t.Fatalf("Len %d does not end a head in %q", h.Len, data)
		}
		if h.Host != strings.ToLower(h.Host) || h.TargetHost != strings.ToLower(h.TargetHost) {
			t.Fatalf("names not lowercased: %+v", h)
		}
		if h.Chunked && h.ContentLength >= 0 {
			t.Fatalf("both chunked and Content-Length: %+v", h)
		}
		compareWithNetHTTP(t, data[:h.Len], h)
		// Removing the upgrade fields leaves a head that frames and
		// routes the same and asks for no switch.
		stripped := RemoveFields(data[:h.Len:h.Len], "Upgrade", "HTTP2-Settings")
		sh, serr := ParseRequestHead(stripped)
		if serr != nil || sh.Len != len(stripped) || sh.UpgradeTo != "" || sh.WebSocket || sh.Name() != h.Name() ||
			sh.ContentLength != h.ContentLength || sh.Chunked != h.Chunked || sh.Method != h.Method {
			t.Fatalf("without its upgrade fields %q became %q: %+v, %v", data[:h.Len], stripped, sh, serr)
		}
	})
}

// compareWithNetHTTP parses head with net/http's server-side reader and
// checks that it agrees on what matters to the proxy.
func compareWithNetHTTP(t *testing.T, head []byte, h RequestHead) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		if netHTTPStricter(err) {
			return
		}
		t.Fatalf("we accept %q, net/http does not: %v", head, err)
	}
	host := netHTTPHost(req)
	if name := h.Name(); name != host && !(strings.Contains(name, ":") && sameIPv6(name, host)) {
		t.Fatalf("%q: we read host %q, net/http %q", head, name, host)
	}
	if req.Method != h.Method {
		t.Fatalf("%q: method %q vs net/http %q", head, h.Method, req.Method)
	}
	if !h.Chunked && req.ContentLength != max(h.ContentLength, 0) {
		t.Fatalf("%q: Content-Length %d vs net/http %d", head, h.ContentLength, req.ContentLength)
	}
	if h.Chunked != (len(req.TransferEncoding) > 0) {
		t.Fatalf("%q: chunked %v vs net/http %v", head, h.Chunked, req.TransferEncoding)
	}
}

// netHTTPStricter reports whether net/http refused a request for a reason
// where it is stricter than RFC 9112 and this package.
// netHTTPHost is the host net/http's server reads a request as for (the
// target's host for absolute-form, else the Host header), normalized as
// RequestHead's names are.
func netHTTPHost(req *http.Request) string {
	host := req.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
}

func netHTTPStricter(err error) bool {
	for _, s := range []string{
		"unsupported transfer encoding", // net/http knows only "chunked"; we accept codings before it
	} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

func sameIPv6(a, b string) bool {
	pa, ea := parseAddr(a)
	pb, eb := parseAddr(b)
	return ea == nil && eb == nil && pa == pb
}

func parseAddr(s string) (string, error) {
	ip := net.ParseIP(s)
	if ip == nil {
		return "", errors.New("not an IP")
	}
	return ip.String(), nil
}

// FuzzRequestReader checks that RequestReader never panics, passes on
// exactly a prefix of the stream, frames it the same whatever the read
// sizes, and that Go's server reads every request it passed (bodies
// included) without error.
func FuzzRequestReader(f *testing.F) {
	f.Add([]byte(pipelinedStream))
	for _, r := range seedRequests {
		f.Add([]byte(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		results, passed, err := readAll(t, bytes.NewReader(data))
		if !strings.HasPrefix(string(data), passed) {
			t.Fatalf("passed on %q, which is not a prefix of the stream", passed)
		}
		results1, passed1, err1 := readAll(t, iotest.OneByteReader(bytes.NewReader(data)))
		if passed1 != passed || len(results1) != len(results) || !sameError(err, err1) {
			t.Fatalf("read a byte at a time: %d requests, %v; at once: %d requests, %v", len(results1), err1, len(results), err)
		}
		if after, errAfter := passRequestsAfter(bytes.NewReader(data)); after != passed || !sameError(errAfter, err) {
			t.Fatalf("with CopyBodyAfter: passed %q, %v; with CopyBody %q, %v", after, errAfter, passed, err)
		}
		// Go's server must read the requests we passed on, bodies and all,
		// for the hosts we checked, and nothing after them: a request it
		// found where we saw a body would reach the origin unchecked.
		br := bufio.NewReader(strings.NewReader(passed))
		all := true
		for i := range results {
			req, rerr := http.ReadRequest(br)
			if rerr != nil {
				all = false
				if i == len(results)-1 && err != nil && err != io.EOF {
					break // the last head passed, but its body failed
				}
				if netHTTPStricter(rerr) {
					break
				}
				t.Fatalf("request %d: net/http cannot read what we passed: %v\n%q", i, rerr, passed)
			}
			if host := netHTTPHost(req); host != results[i].name && !(strings.Contains(host, ":") && sameIPv6(host, results[i].name)) {
				t.Fatalf("request %d: we checked host %q, net/http reads %q\n%q", i, results[i].name, host, passed)
			}
			if _, berr := io.Copy(io.Discard, req.Body); berr != nil {
				all = false
				if !(i == len(results)-1 && err != nil && err != io.EOF) {
					t.Fatalf("request %d: net/http cannot read the body we passed: %v\n%q", i, berr, passed)
				}
				break
			}
		}
		if all {
			if req, rerr := http.ReadRequest(br); rerr != io.EOF {
				t.Fatalf("net/http reads more than the %d requests we passed: %v, %v\n%q", len(results), req, rerr, passed)
			}
		}
	})
}

// FuzzResponseReader checks that ResponseReader never panics, passes on
// exactly a prefix of the stream, frames it the same whatever the read
// sizes, that ParseResponseHead's answer for a prefix is final once it is
// not ErrIncomplete, and that Go's HTTP client reads every response passed
// (as an answer to the same method) with the same status and body. methods
// are the request methods the responses answer, separated by spaces.
func FuzzResponseReader(f *testing.F) {
	for _, s := range seedResponses {
		f.Add(s.methods, []byte(s.stream))
	}
	f.Fuzz(func(t *testing.T, methods string, data []byte) {
		h, err := ParseResponseHead(data)
		if err != nil && err != ErrIncomplete && !errors.Is(err, ErrMalformedResponse) {
			t.Fatalf("error %v is none of the documented kinds", err)
		}
		step := 1
		if len(data) > 2048 {
			step = len(data) / 512
		}
		for n := 0; n < len(data); n += step {
			ph, perr := ParseResponseHead(data[:n])
			if perr == ErrIncomplete {
				continue
			}
			if ph != h || !sameError(perr, err) {
				t.Fatalf("first %d of %d bytes gave %+v, %v; all gave %+v, %v", n, len(data), ph, perr, h, err)
			}
		}
		if err == nil && (h.Len > len(data) || h.Len > MaxHeadSize || string(data[h.Len-4:h.Len]) != "\r\n\r\n") {
			t.Fatalf("Len %d does not end a head in %q", h.Len, data)
		}

		ms := strings.Fields(methods)
		results, passed, err := readResponses(t, bytes.NewReader(data), ms)
		if !strings.HasPrefix(string(data), passed) {
			t.Fatalf("passed on %q, which is not a prefix of the stream", passed)
		}
		results1, passed1, err1 := readResponses(t, iotest.OneByteReader(bytes.NewReader(data)), ms)
		if passed1 != passed || !slices.Equal(results1, results) || !sameError(err, err1) {
			t.Fatalf("read a byte at a time: %d responses, %v; at once: %d responses, %v", len(results1), err1, len(results), err)
		}
		if after, errAfter := passResponsesAfter(iotest.HalfReader(bytes.NewReader(data)), ms); after != passed || !sameError(errAfter, err) {
			t.Fatalf("with CopyBodyAfter: passed %q, %v; with CopyBody %q, %v", after, errAfter, passed, err)
		}
		compareResponsesWithNetHTTP(t, passed, ms, results, err)
	})
}

// passRequestsAfter relays the requests in r as the proxy does, each head
// written with its body by CopyBodyAfter, and returns what it passed on.
func passRequestsAfter(r io.Reader) (string, error) {
	rr := NewRequestReader(r)
	var passed bytes.Buffer
	for {
		_, raw, err := rr.Next()
		if err != nil {
			return passed.String(), err
		}
		if _, err := rr.CopyBodyAfter(&passed, raw); err != nil {
			return passed.String(), err
		}
	}
}

// passResponsesAfter relays the responses in r, answering methods, as the
// proxy does: an interim response's head alone, a switch's head, any
// other head written with its body by CopyBodyAfter.
func passResponsesAfter(r io.Reader, methods []string) (string, error) {
	rr := NewResponseReader(r)
	var passed bytes.Buffer
	for i := 0; ; {
		method := "GET"
		if i < len(methods) {
			method = methods[i]
		}
		if err := rr.Wait(); err != nil {
			return passed.String(), err
		}
		h, raw, err := rr.Next(method)
		if err != nil {
			return passed.String(), err
		}
		if h.Interim() {
			passed.Write(raw)
			continue
		}
		if h.Framing(method) == FramingSwitch {
			passed.Write(raw)
			return passed.String(), ErrSwitched
		}
		if _, err := rr.CopyBodyAfter(&passed, raw); err != nil {
			return passed.String(), err
		}
		i++
	}
}

// compareResponsesWithNetHTTP reads the responses we passed on with
// net/http's client-side reader and checks that it frames them the same.
func compareResponsesWithNetHTTP(t *testing.T, passed string, methods []string, results []readResponse, err error) {
	br := bufio.NewReader(strings.NewReader(passed))
	i := 0 // index of the request answered
	for k, want := range results {
		last := k == len(results)-1
		method := "GET"
		if i < len(methods) {
			method = methods[i]
		}
		if want.framing == FramingSwitch {
			return // net/http leaves switched and tunnelled streams to its caller
		}
		resp, rerr := http.ReadResponse(br, &http.Request{Method: method})
		if rerr != nil {
			if last && err != nil && err != io.EOF && err != ErrSwitched || netHTTPStricterResponse(rerr) {
				return // the last head passed, but its body failed
			}
			t.Fatalf("response %d: net/http cannot read what we passed: %v\n%q", k, rerr, passed)
		}
		if resp.StatusCode != want.status {
			t.Fatalf("response %d: status %d, net/http %d\n%q", k, want.status, resp.StatusCode, passed)
		}
		body, berr := io.ReadAll(resp.Body)
		if berr != nil {
			if last && err != nil && err != io.EOF {
				return
			}
			t.Fatalf("response %d: net/http cannot read the body we passed: %v\n%q", k, berr, passed)
		}
		wantBody := want.body
		if want.framing == FramingChunked {
			decoded, derr := io.ReadAll(httputil.NewChunkedReader(strings.NewReader(want.body)))
			if derr != nil {
				t.Fatalf("response %d: the chunked body we passed does not decode: %v\n%q", k, derr, want.body)
			}
			wantBody = string(decoded)
		}
		if string(body) != wantBody {
			t.Fatalf("response %d: body %q, net/http read %q\n%q", k, wantBody, body, passed)
		}
		if !(resp.StatusCode < 200 && resp.StatusCode != 101) {
			i++
		}
	}
}

// netHTTPStricterResponse reports whether net/http refused a response for
// a reason where it is stricter than RFC 9112 and this package.
func netHTTPStricterResponse(err error) bool {
	// net/http knows only "chunked": a response with other codings runs
	// until the connection closes (RFC 9112 6.3), which it refuses.
	return strings.Contains(err.Error(), "unsupported transfer encoding")
}
