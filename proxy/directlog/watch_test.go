package directlog

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startWatcher opens a watcher on the sandbox namespace of p, logging to
// the returned sink, and runs it until the test ends (checking that Run
// stops cleanly on cancel).
func startWatcher(t *testing.T, p pair, readBuffer int, raw ...string) (*Watcher, *lines, func()) {
	t.Helper()
	f, err := os.Open(p.sandbox)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := &lines{}
	w, err := Open(Config{
		Sandbox: "sb-direct", Entries: entries(t, raw...), NetNS: int(f.Fd()),
		Logger: slog.New(slog.NewJSONHandler(out, nil)), ReadBuffer: readBuffer,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	run := func() { go func() { done <- w.Run(ctx) }() }
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return w, out, run
}

// connection lines for dst
func linesTo(out *lines, t *testing.T, dst, proto string) []map[string]any {
	var got []map[string]any
	for _, m := range out.all(t) {
		if m["msg"] == "connection" && m["dst"] == dst && m["proto"] == proto {
			got = append(got, m)
		}
	}
	return got
}

// A TCP connection and a UDP datagram to allowDirect destinations are
// logged with the proxy's fields; a non-matching address, a non-matching
// port, a flow redirected to a local listener (as to the proxy) and a
// connection into the sandbox's own address are not.
func TestLogsAllowDirectFlows(t *testing.T) {
	t.Parallel()
	p := newPair(t)

	// The peer's services.
	var udpSrv *net.UDPConn
	in(t, p.peer, func() error {
		for _, port := range []int{5432, 6000} {
			ln, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
			if err != nil {
				return err
			}
			serveTCP(t, ln)
		}
		var err error
		udpSrv, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 5432})
		return err
	})
	t.Cleanup(func() { udpSrv.Close() })

	// The sandbox: a "proxy" listener that port 6000 is redirected to,
	// and a service of its own.
	var proxyLn net.Listener
	in(t, p.sandbox, func() error {
		var err error
		if proxyLn, err = net.Listen("tcp4", "0.0.0.0:0"); err != nil {
			return err
		}
		serveTCP(t, proxyLn)
		ln, err := net.Listen("tcp4", "0.0.0.0:8000")
		if err != nil {
			return err
		}
		serveTCP(t, ln)
		return nil
	})
	redirectTCP(t, p.sandbox, 6000, port(proxyLn.Addr()))

	_, out, run := startWatcher(t, p, 0, peerAddr+":5432", peerAddr+":6000", "198.51.100.0/30:8000", "example.com")
	run()

	dial := func(network, addr string) net.Conn {
		t.Helper()
		var c net.Conn
		in(t, p.sandbox, func() error {
			var err error
			c, err = net.DialTimeout(network, addr, 2*time.Second)
			if err == nil && network == "udp4" {
				_, err = c.Write([]byte("x"))
			}
			return err
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	tcpOK := dial("tcp4", peerAddr+":5432")
	udpOK := dial("udp4", peerAddr+":5432")
	dial("tcp4", peerAddr2+":5432") // address matches no entry
	dial("udp4", peerAddr+":9999")  // port matches no entry
	dial("tcp4", peerAddr+":6000")  // redirected to the "proxy"
	in(t, p.peer, func() error {    // into the sandbox's own address
		c, err := net.DialTimeout("tcp4", sandboxAddr+":8000", 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	// Events arrive in order: once this one is logged, all the flows
	// above have been seen.
	marker := dial("udp4", peerAddr+":5432")
	out.waitFor(t, "the marker flow", func(m map[string]any) bool {
		return m["client"] == marker.LocalAddr().String()
	})

	tcpLines := linesTo(out, t, peerAddr+":5432", "tcp")
	if len(tcpLines) != 1 {
		t.Fatalf("want 1 tcp line to %s:5432, got %d; log:\n%s", peerAddr, len(tcpLines), out)
	}
	want := map[string]any{
		"level": "INFO", "msg": "connection", "sandbox": "sb-direct", "client": tcpOK.LocalAddr().String(),
		"dst": peerAddr + ":5432", "proto": "tcp", "name": "", "rule": peerAddr + ":5432",
		"verdict": "allow", "reason": "allowDirect", "bytes_up": 0.0, "bytes_down": 0.0, "duration_ms": 0.0,
	}
	for k, v := range want {
		if tcpLines[0][k] != v {
			t.Errorf("tcp line: %s = %v, want %v", k, tcpLines[0][k], v)
		}
	}
	if _, ok := tcpLines[0]["upstream"]; ok {
		t.Errorf("tcp line has an upstream: %v", tcpLines[0])
	}
	udpLines := linesTo(out, t, peerAddr+":5432", "udp")
	clients := []string{}
	for _, m := range udpLines {
		clients = append(clients, m["client"].(string))
	}
	if !slices.Equal(clients, []string{udpOK.LocalAddr().String(), marker.LocalAddr().String()}) {
		t.Errorf("udp lines from %v, want from %v and %v; log:\n%s", clients, udpOK.LocalAddr(), marker.LocalAddr(), out)
	}
	if n := len(out.all(t)); n != 3 {
		t.Errorf("want exactly 3 lines, got %d:\n%s", n, out)
	}
}

// Events that did not fit in the socket's buffer are counted and reported
// once; the watcher goes on logging new flows.
func TestSurvivesOverrun(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	redirectTCP(t, p.sandbox, 6000, 6001) // conntrack on; redirects nothing used here
	w, out, run := startWatcher(t, p, 1, peerAddr+":5432")
	// Not running yet: the events pile up in the smallest buffer there is.
	for i := range 500 {
		in(t, p.sandbox, func() error {
			c, err := net.Dial("udp4", peerAddr+":5432")
			if err != nil {
				return err
			}
			_, err = c.Write([]byte{byte(i)})
			c.Close()
			return err
		})
	}
	run()
	// TCP: a UDP socket could get the source port of one of the flows
	// above, whose conntrack entry still lives, and make no new entry.
	in(t, p.peer, func() error {
		ln, err := net.Listen("tcp4", "0.0.0.0:5432")
		if err == nil {
			serveTCP(t, ln)
		}
		return err
	})
	// A new flow is logged once the watcher has drained its queue (a
	// flow started before that may be lost too: try a few).
	logged := false
	for try := 0; try < 10 && !logged; try++ {
		var c net.Conn
		in(t, p.sandbox, func() error {
			var err error
			c, err = net.DialTimeout("tcp4", peerAddr+":5432", 2*time.Second)
			return err
		})
		deadline := time.Now().Add(500 * time.Millisecond)
		for !logged && time.Now().Before(deadline) {
			logged = len(linesTo(out, t, peerAddr+":5432", "tcp")) > 0
			time.Sleep(10 * time.Millisecond)
		}
		c.Close()
	}
	if !logged {
		t.Fatalf("no line for a flow after the overrun; log:\n%s", out)
	}
	st := w.Stats()
	if st.Overruns == 0 {
		t.Error("no overrun counted")
	}
	if st.Logged == 0 || st.Logged >= 500 {
		t.Errorf("logged = %d, want some but not all of the flows", st.Logged)
	}
	var warns int
	for _, m := range out.all(t) {
		if m["msg"] == "allowDirect events lost" {
			warns++
			if m["level"] != "WARN" || m["sandbox"] != "sb-direct" {
				t.Errorf("overrun line: %v", m)
			}
		}
	}
	if warns != 1 {
		t.Errorf("want one overrun line (%d overruns), got %d:\n%s", st.Overruns, warns, out)
	}
}

// NetNSOf names the namespace a socket was made in.
func TestNetNSOf(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	var ln net.Listener
	in(t, p.sandbox, func() error {
		var err error
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	})
	defer ln.Close()
	f, err := NetNSOf(ln.(*net.TCPListener))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got, want unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &got); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(p.sandbox, &want); err != nil {
		t.Fatal(err)
	}
	if got.Ino != want.Ino || got.Dev != want.Dev {
		t.Errorf("namespace inode %d:%d, want the sandbox's %d:%d", got.Dev, got.Ino, want.Dev, want.Ino)
	}
}
