package inspect

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
)

// TestJudgedIsForwarded: what the rules read of a request is what the
// upstream reads. A field the client names in Connection is dropped
// before the rules read the request, not after (an allow rule that asks
// for a header would pass a request the upstream gets without it);
// request trailers, which no rule reads, are not forwarded; and the
// upstream reads the session's host in Host, in its canonical spelling.
func TestJudgedIsForwarded(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test allow GET header:x-dry-run=true\n"+
		"inspect api.example.test allow POST /upload\ninspect api.example.test deny header:x-debug\n", false)

	// Control: the header the allow rule asks for reaches the upstream.
	if got := rawH1(t, b, "GET /run HTTP/1.1\r\nHost: "+host+"\r\nX-Dry-Run: true\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("dry run: %q", got)
	}
	if h, _ := b.seen.last(); h == nil || h.Get("X-Dry-Run") != "true" {
		t.Fatalf("the upstream got %v", h)
	}
	n := len(b.seen.headers)
	got := rawH1(t, b, "GET /run HTTP/1.1\r\nHost: "+host+"\r\nX-Dry-Run: true\r\nConnection: keep-alive, X-Dry-Run\r\n\r\n")
	if len(b.seen.headers) > n {
		if h, _ := b.seen.last(); h.Get("X-Dry-Run") != "true" {
			t.Errorf("allowed for X-Dry-Run, forwarded without it (%q): the upstream got %v", got, h)
		}
	} else if !strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Errorf("Connection: X-Dry-Run: %q", got)
	}

	// Request trailers: over HTTP/1.1, declared and not.
	n = len(b.seen.headers)
	got = rawH1(t, b, "POST /upload HTTP/1.1\r\nHost: "+host+"\r\nTransfer-Encoding: chunked\r\nTrailer: X-Debug, X-Original-URL\r\n\r\n"+
		"2\r\nhi\r\n0\r\nX-Debug: 1\r\nX-Original-URL: /admin\r\nX-Other: 1\r\n\r\n")
	if len(b.seen.headers) == n {
		t.Fatalf("POST /upload did not reach the upstream: %q", got)
	} else {
		b.seen.mu.Lock()
		tr := b.seen.trailers[len(b.seen.trailers)-1]
		b.seen.mu.Unlock()
		if len(tr) != 0 {
			t.Errorf("HTTP/1.1 request trailers reached the upstream (%q): %v", got, tr)
		}
	}
	// ... and over HTTP/2.
	for _, h2 := range []bool{false, true} {
		cl := b.client(h2)
		req, _ := http.NewRequest("POST", "https://"+host+"/upload", nil)
		req.Trailer = http.Header{"X-Debug": nil}
		req.Body = io.NopCloser(&trailerSetter{r: strings.NewReader("hi"), set: func() { req.Trailer.Set("X-Debug", "1") }})
		n = len(b.seen.headers)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if len(b.seen.headers) == n {
			t.Fatalf("h2=%v: POST /upload did not reach the upstream: %d", h2, resp.StatusCode)
		} else {
			b.seen.mu.Lock()
			tr := b.seen.trailers[len(b.seen.trailers)-1]
			b.seen.mu.Unlock()
			if len(tr) != 0 {
				t.Errorf("h2=%v: request trailers reached the upstream (%d): %v", h2, resp.StatusCode, tr)
			}
		}
	}

	// Host: the session's host, whatever spelling of it the client sent.
	for spelling, want := range map[string]string{"API.Example.TEST": host, "api.example.test.": host, "API.EXAMPLE.TEST:443": host + ":443"} {
		got := rawH1(t, b, "GET /run HTTP/1.1\r\nHost: "+spelling+"\r\nX-Dry-Run: true\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200") {
			t.Fatalf("Host %s: %q", spelling, got)
		}
		b.seen.mu.Lock()
		sent := b.seen.hosts[len(b.seen.hosts)-1]
		b.seen.mu.Unlock()
		if sent != want {
			t.Errorf("Host %s: the upstream read Host %q, want %q", spelling, sent, want)
		}
	}
}

// trailerSetter sets a request's trailer once its body is read.
type trailerSetter struct {
	r   io.Reader
	set func()
}

func (ts *trailerSetter) Read(p []byte) (int, error) {
	n, err := ts.r.Read(p)
	if err == io.EOF {
		ts.set()
	}
	return n, err
}

// TestBodyBufferFollowsTheBytes: a request that declares a large body
// and sends a few bytes of it holds no more memory than it sent, for a
// host's body rules and for a rule set alike.
func TestBodyBufferFollowsTheBytes(t *testing.T) {
	const declared = 32 << 20
	for name, read := range map[string]func(r *http.Request) error{
		"rules": func(r *http.Request) error { _, err := readBody(r, declared, nil); return err },
		"ruleset": func(r *http.Request) error {
			_, why, _ := readSetBody(r, declared, nil)
			if why != "" {
				return io.ErrUnexpectedEOF
			}
			return nil
		},
	} {
		r, _ := http.NewRequest("POST", "https://"+host+"/", strings.NewReader("only these bytes"))
		r.ContentLength = declared
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := read(r)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: a short body read as whole", name)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("%s: 16 bytes of a body that declared %d took %d bytes", name, declared, grew)
		}
	}
}

// TestCodingsAndTrace: a body rule reads no body that every
// Content-Encoding field does not leave as it is (the first field alone
// said identity), and a host doorman puts a credential in gets no TRACE,
// which an origin answers with the request, credential and all.
func TestCodingsAndTrace(t *testing.T) {
	b := newBed(t, policy, false)
	body := `{"tools":[]}`
	for _, ce := range []string{"Content-Encoding: identity\r\nContent-Encoding: gzip", "Content-Encoding: identity, br"} {
		got := rawH1(t, b, "POST /v1/messages HTTP/1.1\r\nHost: "+host+"\r\n"+ce+"\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		if !strings.HasPrefix(got, "HTTP/1.1 403") {
			t.Errorf("%q: %q", ce, got)
		}
	}
	for _, m := range []string{"TRACE", "trace", "TRACK"} {
		if got := rawH1(t, b, m+" / HTTP/1.1\r\nHost: "+host+"\r\nX-Api-Key: dm-placeholder\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 403") {
			t.Errorf("%s: %q", m, got)
		}
	}
	if h, _ := b.seen.last(); h != nil {
		b.seen.mu.Lock()
		defer b.seen.mu.Unlock()
		t.Fatalf("the upstream got %v", b.seen.targets)
	}
}

// TestRuleSetJudgementsShareABound: rule-set judgements in flight share
// one bound on what their bodies may cost (their objects and arrays): a
// request waits while the bound is taken, is judged and relayed once it
// is free, and one whose client gives up while waiting never reaches the
// upstream. A body over conf.MaxJSONContainers is refused outright.
func TestRuleSetJudgementsShareABound(t *testing.T) {
	b := newSetBed(t, "api.anthropic.com", "api.anthropic.com\nruleset closed-book\n")
	cl := b.client(true)
	full := int64(conf.MaxJSONContainers + 1)
	if err := b.srv.judging.Acquire(context.Background(), full); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", "https://api.anthropic.com/v1/messages", strings.NewReader(`{"model":"m","max_tokens":1,"messages":[]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		if err != nil {
			done <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case code := <-done:
		t.Fatalf("judged while the bound was taken: %d", code)
	case <-time.After(300 * time.Millisecond):
	}
	if got := b.received(); len(got) != 0 {
		t.Fatalf("the upstream got %q while the bound was taken", got)
	}
	b.srv.judging.Release(full)
	if code := <-done; code != 200 {
		t.Fatalf("once the bound is free: %d", code)
	}

	// A client that gives up while waiting.
	b.srv.judging.Acquire(context.Background(), full)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, "POST", "https://api.anthropic.com/v1/messages", strings.NewReader(`{"model":"m","max_tokens":1,"messages":[]}`))
	if resp, err := cl.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a request answered while the bound was taken: %d", resp.StatusCode)
	}
	cancel()
	time.Sleep(100 * time.Millisecond)
	b.srv.judging.Release(full)
	if got := b.received(); len(got) != 1 {
		t.Fatalf("the upstream got %d requests, want 1", len(got))
	}

	big := `{"model":"m","max_tokens":1,"messages":[],"tools":[` + strings.Repeat(`{},`, conf.MaxJSONContainers) + `{}]}`
	if resp, body := b.post(cl, "/v1/messages", big); resp.StatusCode != 403 || !strings.Contains(body, "objects and arrays") {
		t.Fatalf("a body over the bound: %d %s", resp.StatusCode, body)
	}
	if got := b.received(); len(got) != 1 {
		t.Fatalf("the upstream got %d requests, want 1", len(got))
	}
}

// TestBodiesShareABound: the request bodies a Server holds to judge them
// share one bound: a body that would take them past it gets 503 (and
// reaches no upstream) instead of the proxy growing until its cgroup
// kills it; what a request held is given back when it is answered.
func TestBodiesShareABound(t *testing.T) {
	b := newSetBed(t, "api.anthropic.com", "api.anthropic.com\nruleset closed-book\n")
	b.srv.bodies = semaphore.NewWeighted(1 << 20)
	cl := b.client(true)
	big := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("x", 2<<20) + `"}]}`
	for _, h2 := range []bool{true, false} {
		cl := b.client(h2)
		resp, body := b.post(cl, "/v1/messages", big)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "bodies being judged") {
			t.Fatalf("h2=%v: a body over the bound: %d %s", h2, resp.StatusCode, body)
		}
	}
	if got := b.received(); len(got) != 0 {
		t.Fatalf("the upstream got %d requests", len(got))
	}
	// Gzip: the decoded body is held too.
	var zb strings.Builder
	zw := gzip.NewWriter(&zb)
	io.WriteString(zw, big)
	zw.Close()
	if resp, body := b.post(cl, "/v1/messages", zb.String(), "Content-Encoding", "gzip"); resp.StatusCode != 503 {
		t.Fatalf("a gzip body that decodes over the bound: %d %s", resp.StatusCode, body)
	}
	// Each request gave back what it held: three under the bound pass.
	small := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("x", 300<<10) + `"}]}`
	for range 3 {
		if resp, body := b.post(cl, "/v1/messages", small); resp.StatusCode != 200 {
			t.Fatalf("a body under the bound: %d %s", resp.StatusCode, body)
		}
	}

	// A host's own body rules.
	hb := newBed(t, policy, false)
	hb.srv.bodies = semaphore.NewWeighted(500)
	body := `{"tools":[],"pad":"` + strings.Repeat("x", 800) + `"}`
	if got := rawH1(t, hb, "POST /v1/messages HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); !strings.HasPrefix(got, "HTTP/1.1 503") {
		t.Fatalf("host rules, a body over the bound: %q", got)
	}
	if h, _ := hb.seen.last(); h != nil {
		t.Fatal("the upstream got the request")
	}
}

// TestStalledBodyTimesOut: a body read whole to be judged must keep
// coming: one that stalls gets 408 once bodyIdle passes without a byte
// (it held its buffer and its share of the bound for as long as the
// client liked), over HTTP/1.1 and HTTP/2, and gives back what it held.
// The deadline ends with the body: a response that streams for longer
// after it is not cut. (Seen failing without the deadline: the request
// hung until the test's own read deadline.)
func TestStalledBodyTimesOut(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test deny POST json:x=y\n", false)
	b.srv.bodyIdle = 300 * time.Millisecond
	start := time.Now()
	got := rawH1(t, b, "POST /v1/messages HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 100\r\n\r\n{\"a\":")
	if !strings.HasPrefix(got, "HTTP/1.1 408") || time.Since(start) > 5*time.Second {
		t.Fatalf("a stalled body: %q after %v", got, time.Since(start))
	}

	sb := newSetBed(t, "api.anthropic.com", "api.anthropic.com\nruleset closed-book\n")
	sb.srv.bodyIdle = 300 * time.Millisecond
	pr, pw := io.Pipe()
	defer pw.Close()
	go io.WriteString(pw, `{"model":"m","messages":[`)
	req, _ := http.NewRequest("POST", "https://api.anthropic.com/v1/messages", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := sb.client(true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 408 {
		t.Fatalf("h2, rule set, a stalled body: %d", resp.StatusCode)
	}
	for _, srv := range []*Server{b.srv, sb.srv} {
		if !srv.bodies.TryAcquire(maxHeldBodies) {
			t.Fatal("a stalled body did not give back what it held")
		}
		srv.bodies.Release(maxHeldBodies)
	}
	if len(sb.received()) != 0 || len(b.seen.headers) != 0 {
		t.Fatal("a stalled body reached the upstream")
	}

	// A judged body, then a response that streams past bodyIdle.
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("POST", "https://"+host+"/sse", strings.NewReader(`{"x":"z"}`))
		resp, err := b.client(h2).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
			t.Fatalf("h2=%v: first event %q %v", h2, line, err)
		}
		time.Sleep(3 * b.srv.bodyIdle)
		b.release <- struct{}{}
		rest, err := io.ReadAll(br)
		resp.Body.Close()
		if err != nil || !strings.Contains(string(rest), "data: last") {
			t.Fatalf("h2=%v: the stream after a judged body was cut: %q %v", h2, rest, err)
		}
	}
}

// TestSmugglingProbes sends framings a front end and a back end may read
// differently, each hiding a request the rules deny (DELETE /thing) where
// a lax reader would find it: the upstream must never read that request.
// net/http's server reads each framing once and doorman re-frames what
// it forwards, so the hidden request is either a body's bytes, refused
// as it stands, or never read; this is the evidence.
func TestSmugglingProbes(t *testing.T) {
	b := newBed(t, policy, false)
	hidden := "DELETE /thing HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	hl := strconv.Itoa(len(hidden))
	h := "Host: " + host + "\r\n"
	probes := []string{
		// Content-Length beside an obfuscated Transfer-Encoding.
		"POST /a HTTP/1.1\r\n" + h + "Content-Length: 5\r\nTransfer-Encoding: chunked \r\n\r\n0\r\n\r\n" + hidden,
		"POST /a HTTP/1.1\r\n" + h + "Content-Length: 5\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n" + hidden,
		"POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + hidden,
		"POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\nContent-Length: " + hl + "\r\n\r\n" + hidden,
		"POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: xchunked\r\nContent-Length: " + hl + "\r\n\r\n" + hidden,
		"POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding:\x0bchunked\r\nContent-Length: " + hl + "\r\n\r\n" + hidden,
		"POST /a HTTP/1.1\r\n" + h + "Content-Length: " + hl + "\r\nContent-Length: 0\r\n\r\n" + hidden,
		"POST /a HTTP/1.1\r\n" + h + "Content-Length: +" + hl + "\r\n\r\n" + hidden,
		// Chunk sizes and extensions.
		"POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0000000000000000000" + strconv.FormatInt(int64(len(hidden)), 16) + "\r\n" + hidden + "\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n" + hidden + "\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n2;x=\"a\r\n0\r\n\r\n" + hidden + "\"\r\nhi\r\n0\r\n\r\n",
		"POST /a HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n2\nhi\n0\n\n" + hidden,
		// Bare LF in the head.
		"POST /a HTTP/1.1\n" + h + "Content-Length: " + hl + "\n\n" + hidden,
		// 100-continue: a refused request whose body is sent anyway.
		"DELETE /x HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: " + hl + "\r\n\r\n" + hidden,
		// An upgrade the upstream does not take: the connection goes on
		// as HTTP, judged.
		"GET /a HTTP/1.1\r\n" + h + "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" + hidden,
		// Pipelined behind an allowed request, and behind a refused one.
		"GET /a HTTP/1.1\r\n" + h + "\r\n" + hidden,
		"DELETE /x HTTP/1.1\r\n" + h + "\r\nGET /a HTTP/1.1\r\n" + h + "\r\n",
	}
	for _, p := range probes {
		data, _ := ca.CertPEM(b.caDir)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(data)
		c := tls.Client(b.session(host), &tls.Config{ServerName: host, RootCAs: pool, NextProtos: []string{"http/1.1"}})
		io.WriteString(c, p)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, c) // every answer, until the server closes or the deadline
		c.Close()
	}
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	for _, target := range b.seen.targets {
		if strings.HasPrefix(target, "DELETE") {
			t.Errorf("the upstream read %q: %v", target, b.seen.targets)
		}
	}
	t.Logf("the upstream read: %q", b.seen.targets)
	if !strings.Contains(strings.Join(b.seen.targets, " "), "GET /a") {
		t.Errorf("no probe reached the upstream: the probes tested nothing (%v)", b.seen.targets)
	}
}

// TestH2HostMustAgree: an HTTP/2 request's Host field, when it has one
// beside :authority, names the session's host too (RFC 9113 8.3.1: a
// server should treat a disagreement as malformed); net/http takes
// :authority and keeps Host among the fields, where a rule would read
// another host than the one forwarded.
func TestH2HostMustAgree(t *testing.T) {
	b := newBed(t, "api.example.test\ninspect api.example.test allow *\n", false)
	if got := rawH2(t, b, reqSpelling{"GET", "/a", [][2]string{{"host", "other.example.test"}}}); got != "403" && got != "reset" {
		t.Errorf("Host of another host beside :authority: %s", got)
	}
	if len(b.seen.headers) != 0 {
		t.Fatalf("the upstream got %v", b.seen.hosts)
	}
	if got := rawH2(t, b, reqSpelling{"GET", "/a", [][2]string{{"host", "API.example.test"}}}); got != "200" {
		t.Errorf("Host of the session's host beside :authority: %s", got)
	}
	if h, _ := b.seen.last(); h == nil || h.Get("Host") != "" {
		t.Errorf("the upstream got the fields %v", h)
	}
}
