package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// waitLimit waits for a limit line of the cap limit.
func (e *testEnv) waitLimit(limit string) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range e.logs.lines() {
			if l["msg"] == decisionlog.KindLimit && l["limit"] == limit {
				return l
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no limit line for %s; have:\n%s", limit, e.logs.b.String())
	return nil
}

// openTLS opens a relayed TLS connection for name and reads the server's
// first line.
func (e *testEnv) openTLS(name string) net.Conn {
	e.t.Helper()
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	tc, line, err := e.tlsClient(c, name)
	if err != nil || !strings.HasPrefix(line, "server ") {
		e.t.Fatalf("relayed TLS for %s: %q, %v", name, line, err)
	}
	return tc
}

// isInternalError says a TLS handshake ended with the server's fatal
// internal_error alert: what a client over a cap gets.
func isInternalError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "internal error")
}

// Past the connection cap a new connection is refused in its protocol: a
// TLS alert, a 503 for HTTP; it is a limit line, not a decision; once a
// connection ends there is room again.
func TestConnectionCap(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{MaxConns: 3})
	var held []net.Conn
	for range 3 {
		held = append(held, e.openTLS("api.test"))
	}
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	if _, _, err := e.tlsClient(c, "api.test"); !isInternalError(err) {
		t.Fatalf("TLS over the cap: %v, want an internal_error alert", err)
	}
	hc := e.dial(netip.AddrPortFrom(apiAddr, 80))
	hc.Write([]byte("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(hc), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("HTTP over the cap: %v, %v, want a 503", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "limit of 3 (connections)") {
		t.Errorf("503 body %q", body)
	}
	l := e.waitLimit(decisionlog.LimitConnections)
	if l["max"] != 3.0 || l["count"] != 1.0 {
		t.Errorf("limit line %v", l)
	}
	if st := e.p.Stats(); st.Limited != 2 || st.Denied != 0 {
		t.Errorf("stats %+v, want 2 limited and no denial", st)
	}
	held[0].Close()
	// The proxy sees the end a moment later.
	deadline := time.Now().Add(5 * time.Second)
	for e.p.Stats().Held >= 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	e.openTLS("api.test").Close()
}

// Past the cap of connections not decided yet, a new one is refused as
// soon as its first bytes say its protocol.
func TestPendingCap(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{MaxPending: 2})
	for range 2 {
		e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort)) // silent: pending until the sniff deadline
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.p.Stats().Pending < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	if _, _, err := e.tlsClient(c, "api.test"); !isInternalError(err) {
		t.Fatalf("TLS past the pending cap: %v, want an internal_error alert", err)
	}
	e.waitLimit(decisionlog.LimitPending)
}

// The bytes connections not decided yet hold are capped together: a
// ClientHello in 1-byte records needs a larger buffer than the budget
// leaves, and is refused with an alert.
func TestPendingBytesCap(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{MaxPendingBytes: 8 << 10})
	split := splitRecords(captureHello(t, "api.test"), 1)
	if len(split) <= 8<<10 {
		t.Fatalf("a %d-byte hello fits the budget", len(split))
	}
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	c.Write(split)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(got), string(tlsInternalError)) {
		t.Fatalf("over the budget: got %q, want an internal_error alert", got)
	}
	e.waitLimit(decisionlog.LimitPendingBytes)
	if st := e.p.Stats(); st.PendingBytes != 0 {
		t.Errorf("%d bytes still charged", st.PendingBytes)
	}
	// A hello in one record is well within it.
	e.openTLS("api.test").Close()
}

// A ClientHello trickled one byte per record, a record per segment, is
// parsed a few dozen times, not once per segment (1-byte records: the
// peeks wait for sniff.HelloNeeds bytes), and still relayed.
func TestTrickledHelloParsedFewTimes(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	rec := e.startRecorder(netip.AddrPortFrom(apiAddr, 0))
	split := splitRecords(captureHello(t, "api.test"), 1)
	c := e.dial(netip.AddrPortFrom(apiAddr, rec.Port()))
	c.SetNoDelay(true)
	segments := 0
	for i := 0; i < len(split); i += 6 {
		c.Write(split[i:min(i+6, len(split))])
		segments++
		time.Sleep(100 * time.Microsecond) // each segment a wakeup of its own
	}
	got := make([]byte, len(split))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo of the trickled hello: %v", err)
	}
	c.Close()
	e.waitRecord(recordFor("api.test", "allow"))
	if n := e.p.parses.Load(); n > 100 {
		t.Errorf("%d segments parsed %d times", segments, n)
	} else {
		t.Logf("%d segments, %d parses", segments, n)
	}
}

// A client that sent a malformed record header and waits is refused for
// what it sent, on the peek's timer, not at the sniff deadline.
func TestMalformedHelloDecidedBeforeDeadline(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{SniffTimeout: 30 * time.Second})
	hello := captureHello(t, "api.test")
	split := splitRecords(hello, 1)
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	c.Write(split[:60])
	// Once the proxy waits for the rest of the hello, a record header
	// it refuses (longer than 2^14), and nothing more.
	deadline := time.Now().Add(5 * time.Second)
	for e.p.parses.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	c.Write([]byte{0x16, 0x03, 0x01, 0xff, 0xff})
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(got), string(tlsAccessDenied)) {
		t.Fatalf("got %q, want an access_denied alert", got)
	}
	r := e.waitRecord(recordFor("", "deny"))
	if reason := r["reason"].(string); !strings.Contains(reason, "more than 16384") {
		t.Errorf("reason %q, want the malformed record", reason)
	}
}

// A relayed connection that carries nothing for the idle timeout is
// closed, and logged as allowed with the reason; one that carries data
// is not.
func TestIdleTimeout(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{IdleTimeout: time.Second})
	idle := e.openTLS("api.test")
	busy := e.openTLS("api.test")
	done := make(chan error, 1)
	go func() {
		idle.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := idle.Read(make([]byte, 1))
		done <- err
	}()
	br := bufio.NewReader(busy)
	for i := 0; ; i++ {
		select {
		case err := <-done:
			if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("idle connection: %v, want it closed", err)
			}
			if _, err := busy.Write([]byte("ping\n")); err != nil {
				t.Fatalf("busy connection closed: %v", err)
			}
			if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
				t.Fatalf("busy connection: %q, %v", line, err)
			}
			r := e.waitRecord(func(m map[string]any) bool {
				return m["name"] == "api.test" && strings.HasPrefix(m["reason"].(string), decisionlog.ReasonIdle)
			})
			if r["verdict"] != "allow" || r["reason"] != "idle for 1s" {
				t.Errorf("record %v", r)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		busy.Write([]byte("ping\n"))
		if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("busy connection after %d pings: %q, %v", i, line, err)
		}
	}
}

// Past the cap of connections to one upstream address and port, the
// proxy does not dial it and refuses the client; a connection the proxy
// closed first keeps its slot (its source port is in TIME_WAIT for a
// minute). Another upstream has slots of its own.
func TestPerUpstreamCap(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, apiAddr.String(), "evil.test"), Config{MaxPerUpstream: 2})
	rec := e.startRecorder(netip.AddrPortFrom(apiAddr, 0))
	echoes := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return false
		}
		var b [1]byte
		n, _ := c.Read(b[:])
		return n == 1
	}
	// relayed says whether a new connection to rec is relayed (the
	// refusal of one that is not may come before connect returns).
	relayed := func() bool {
		c, err := e.tryDial(rec)
		return err == nil && echoes(c)
	}
	a, b := e.dial(rec), e.dial(rec)
	if !echoes(a) || !echoes(b) {
		t.Fatal("two connections under the cap are not relayed")
	}
	if relayed() {
		t.Fatal("a third connection to the upstream was relayed past the cap of 2")
	}
	if l := e.waitLimit(decisionlog.LimitPerUpstream); l["max"] != 2.0 {
		t.Errorf("limit line %v", l)
	}
	// The client closes first, so the proxy closes its upstream first.
	a.Close()
	e.waitRecord(func(m map[string]any) bool { return m["verdict"] == "allow" && m["bytes_up"] == 1.0 })
	if relayed() {
		t.Fatal("a connection was relayed while a closed one's port waits")
	}
	c := e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
	if _, line, err := e.tlsClient(c, "evil.test"); err != nil || !strings.Contains(line, evilAddr.String()) {
		t.Fatalf("another upstream: %q, %v", line, err)
	}
	b.Close()
}

// The slots of upstreamSlots: open connections count until released; a
// close by the proxy counts for a minute, one by the upstream not at all.
func TestUpstreamSlots(t *testing.T) {
	s := upstreamSlots{max: 2}
	ap := netip.MustParseAddrPort("203.0.113.7:443")
	t0 := time.Unix(1_000_000, 0)
	if !s.acquire(ap, t0) || !s.acquire(ap, t0) || s.acquire(ap, t0) {
		t.Fatal("want two slots")
	}
	s.release(ap, false, t0) // the upstream closed first
	if !s.acquire(ap, t0) {
		t.Fatal("a slot the upstream freed is taken")
	}
	s.release(ap, true, t0) // the proxy closed first
	if s.acquire(ap, t0.Add(40*time.Second)) {
		t.Fatal("a slot in TIME_WAIT is free after 40 s")
	}
	if !s.acquire(ap, t0.Add(timeWait+10*time.Second)) {
		t.Fatal("a slot in TIME_WAIT is still taken after 70 s")
	}
	if !s.acquire(netip.MustParseAddrPort("203.0.113.7:80"), t0) {
		t.Fatal("another port shares the cap")
	}
	s.release(ap, false, t0)
	s.release(ap, false, t0)
	s.sweep(t0.Add(2 * timeWait))
	if _, ok := s.dsts[ap]; ok {
		t.Error("sweep kept an upstream with nothing open")
	}
}
