package proxy

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
)

// handlerGoroutines counts the goroutines inside the connection handler.
func handlerGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "proxy.(*Proxy).handle(")
}

// An established TLS connection is carried by the relay loop: while it is
// open no handler goroutine is left for it, and when it ends its line has
// the bytes each way.
func TestEstablishedOnTheRelayLoop(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	const n = 50
	var conns []net.Conn
	for range n {
		c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
		tc, _, err := e.tlsClient(c, "api.test")
		if err != nil {
			t.Fatalf("allowed TLS failed: %v", err)
		}
		conns = append(conns, tc)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.p.relayLoop().Len() != n || handlerGoroutines() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("relay loop holds %d of %d connections, %d handler goroutines left", e.p.relayLoop().Len(), n, handlerGoroutines())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := e.p.decidedOnLoop.Load(); got != n {
		t.Fatalf("%d of %d connections decided on the loop", got, n)
	}
	// All but the first, whose name was not in the resolver's cache yet.
	if got := e.p.dialedOnLoop.Load(); got != n-1 {
		t.Fatalf("%d of %d connections dialed on the loop, want all but the first", got, n)
	}
	if st := e.p.Stats(); st.Active != n || st.Held != n {
		t.Fatalf("stats %+v, want %d active and held", st, n)
	}
	// The echo still works through the loop.
	tc := conns[0]
	tc.Write([]byte("ping\n"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(tc, got); err != nil || string(got) != "ping\n" {
		t.Fatalf("echo through the loop: %q, %v", got, err)
	}
	for _, c := range conns {
		c.Close()
	}
	r := e.waitRecord(recordFor("api.test", "allow"))
	if up, _ := r["bytes_up"].(float64); up <= 0 {
		t.Errorf("record %v: no bytes up", r)
	}
	deadline = time.Now().Add(5 * time.Second)
	for e.p.Stats().Held != 0 || e.p.relayLoop().Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after closing: stats %+v, loop %d", e.p.Stats(), e.p.relayLoop().Len())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A dial on the loop that fails is reported as the goroutine path reports
// it: a reset for the client, an error line naming the upstream.
func TestDialOnLoopRefused(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "nowhere.test"), Config{})
	for i := range 2 { // the second finds the name in the cache
		c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
		_, _, err := e.tlsClient(c, "nowhere.test")
		if err == nil {
			t.Fatal("a TLS session through an upstream that refuses")
		}
		c.Close()
		if i == 1 && e.p.dialedOnLoop.Load() != 1 {
			t.Fatalf("the second connection was not dialed on the loop")
		}
	}
	n := 0
	for _, r := range e.logs.lines() {
		if r["name"] == "nowhere.test" && r["verdict"] == "error" && strings.Contains(r["reason"].(string), "127.0.0.9") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d error lines naming the upstream, want 2:\n%v", n, e.logs.lines())
	}
}

// Without the loop (it cannot run, or the proxy is shutting down) the
// connection is relayed by its own goroutines, as before.
func TestRelayWithoutTheLoop(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{}, func(p *Proxy) { p.noLoop = true })
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	tc, _, err := e.tlsClient(c, "api.test")
	if err != nil {
		t.Fatalf("allowed TLS failed: %v", err)
	}
	tc.Write([]byte("ping\n"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(tc, got); err != nil || string(got) != "ping\n" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	if n := handlerGoroutines(); n != 1 {
		t.Fatalf("%d handler goroutines, want the one relaying", n)
	}
	tc.Close()
	e.waitRecord(recordFor("api.test", "allow"))
}

// gateWriter is a log writer whose writes wait while it is closed.
type gateWriter struct {
	mu   sync.Mutex
	shut chan struct{} // non-nil: writes wait until it is closed
}

func (g *gateWriter) Write(b []byte) (int, error) {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut != nil {
		<-shut
	}
	return len(b), nil
}

func (g *gateWriter) close() {
	g.mu.Lock()
	g.shut = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateWriter) open() {
	g.mu.Lock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
	g.mu.Unlock()
}

// A decision line whose write waits on the disk does not stop the relay
// loop: the other connections of the sandbox go on.
func TestLogStallDoesNotStopRelays(t *testing.T) {
	gate := &gateWriter{}
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{}, func(p *Proxy) {
		p.logger = slog.New(slog.NewJSONHandler(gate, nil))
	})
	t.Cleanup(gate.open)
	dst := netip.AddrPortFrom(apiAddr, e.tlsPort)
	b, _, err := e.tlsClient(e.dial(dst), "api.test")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	gate.close()
	// Connection a ends: its line's write blocks.
	a, _, err := e.tlsClient(e.dial(dst), "api.test")
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	time.Sleep(100 * time.Millisecond)
	b.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := b.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "ping\n" {
		t.Fatalf("an established connection while a line's write waits: %q, %v", got, err)
	}
}

// The sockets of a pair on the loop carry segments as soon as they come,
// as the runtime's own sockets do: TCP_NODELAY is on for the accepted
// client's (inherited from the listening socket) and the dialed
// upstream's.
func TestLoopSocketsNoDelay(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	for range 2 { // the second is dialed on the loop
		c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
		if _, _, err := e.tlsClient(c, "api.test"); err != nil {
			t.Fatalf("allowed TLS failed: %v", err)
		}
		defer c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.p.relayLoop().Len() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("relay loop holds %d of 2 connections", e.p.relayLoop().Len())
		}
		time.Sleep(10 * time.Millisecond)
	}
	proxyAddr := netip.MustParseAddrPort(e.ln.Addr().String())
	var clients, upstreams int
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fds {
		fd, err := strconv.Atoi(f.Name())
		if err != nil {
			continue
		}
		if acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || acc != 0 {
			continue // not a socket, or a listening one
		}
		local, err1 := unix.Getsockname(fd)
		peer, err2 := unix.Getpeername(fd)
		l4, ok1 := local.(*unix.SockaddrInet4)
		p4, ok2 := peer.(*unix.SockaddrInet4)
		if err1 != nil || err2 != nil || !ok1 || !ok2 {
			continue
		}
		var kind string
		switch {
		case netip.AddrPortFrom(netip.AddrFrom4(l4.Addr), uint16(l4.Port)) == proxyAddr:
			kind = "accepted client"
			clients++
		case p4.Port == int(e.tlsPort):
			kind = "upstream"
			upstreams++
		default:
			continue
		}
		if nd, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY); err != nil || nd == 0 {
			t.Errorf("%s socket %d (%v -> %v): TCP_NODELAY %d, %v", kind, fd, local, peer, nd, err)
		}
	}
	if clients != 2 || upstreams != 2 {
		t.Fatalf("found %d accepted client and %d upstream sockets of the proxy, want 2 of each", clients, upstreams)
	}
}

// stackWriter records, for each line written, whether the writing
// goroutine was the relay loop's.
type stackWriter struct {
	mu     sync.Mutex
	onLoop []bool
}

func (w *stackWriter) Write(b []byte) (int, error) {
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.Contains(string(b), `"name":"api.test"`) {
		w.onLoop = append(w.onLoop, strings.Contains(string(buf), "relayloop.(*Loop).run"))
	}
	return len(b), nil
}

func (w *stackWriter) lines() []bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]bool(nil), w.onLoop...)
}

// The line of a connection the loop carried is written from the loop's
// goroutine while Config.LinesOnLoop says the log's writes are quick, and
// from a goroutine of its own when it says they are not.
func TestLinesOnLoop(t *testing.T) {
	for _, quick := range []bool{true, false} {
		t.Run("quick="+strconv.FormatBool(quick), func(t *testing.T) {
			w := &stackWriter{}
			var asked sync.WaitGroup
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{}, func(p *Proxy) {
				p.logger = slog.New(slog.NewJSONHandler(w, nil))
				p.linesOnLoop = func() bool { asked.Done(); return quick }
			})
			asked.Add(1)
			c, _, err := e.tlsClient(e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort)), "api.test")
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			asked.Wait()
			deadline := time.Now().Add(5 * time.Second)
			for len(w.lines()) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no line for the connection")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := w.lines(); len(got) != 1 || got[0] != quick {
				t.Fatalf("lines written on the loop: %v, want [%v]", got, quick)
			}
		})
	}
}
