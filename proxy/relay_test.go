package proxy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// relayRig is a relayed connection on loopback: app is the application's
// end, server the upstream's, and relay runs between proxyClient and
// proxyUp.
type relayRig struct {
	app, proxyClient, proxyUp, server *net.TCPConn
	done                              chan [2]int64 // up, down once relay returns
}

// tcpPair returns both ends of a fresh loopback TCP connection.
func tcpPair(t *testing.T) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.AcceptTCP()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); a.Close() })
	return c, a
}

func newRelayRig(t *testing.T) *relayRig {
	t.Helper()
	r := &relayRig{done: make(chan [2]int64, 1)}
	r.app, r.proxyClient = tcpPair(t)
	r.proxyUp, r.server = tcpPair(t)
	go func() {
		up, down, _ := relay(r.proxyClient, r.proxyUp, nil)
		r.done <- [2]int64{up, down}
	}()
	return r
}

// wait returns the byte counts relay reported, failing after d.
func (r *relayRig) wait(t *testing.T, d time.Duration) (up, down int64) {
	t.Helper()
	select {
	case n := <-r.done:
		return n[0], n[1]
	case <-time.After(d):
		t.Fatalf("relay still running after %v", d)
		return 0, 0
	}
}

// randomBytes returns n bytes from a seeded generator.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestRelayCountsBytesBothWays(t *testing.T) {
	r := newRelayRig(t)
	upData, downData := randomBytes(100<<10, 1), randomBytes(3<<20, 2)
	deadline := time.Now().Add(10 * time.Second)
	r.app.SetDeadline(deadline)
	r.server.SetDeadline(deadline)

	gotUp := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r.server)
		gotUp <- b
		r.server.Write(downData)
		r.server.Close()
	}()
	if _, err := r.app.Write(upData); err != nil {
		t.Fatal(err)
	}
	r.app.CloseWrite()
	gotDown, err := io.ReadAll(r.app)
	if err != nil {
		t.Fatalf("reading downstream: %v", err)
	}
	if b := <-gotUp; !bytes.Equal(b, upData) {
		t.Errorf("upstream got %d bytes, not the %d sent (or different ones)", len(b), len(upData))
	}
	if !bytes.Equal(gotDown, downData) {
		t.Errorf("client got %d bytes, not the %d sent (or different ones)", len(gotDown), len(downData))
	}
	up, down := r.wait(t, 5*time.Second)
	if up != int64(len(upData)) || down != int64(len(downData)) {
		t.Errorf("relay reported %d up, %d down; want %d, %d", up, down, len(upData), len(downData))
	}
}

// The client's FIN reaches upstream while the answer still flows back.
func TestRelayHalfClose(t *testing.T) {
	r := newRelayRig(t)
	deadline := time.Now().Add(10 * time.Second)
	r.app.SetDeadline(deadline)
	r.server.SetDeadline(deadline)
	if _, err := r.app.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if err := r.app.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	req, err := io.ReadAll(r.server) // ends only at the client's FIN
	if err != nil || string(req) != "ping" {
		t.Fatalf("upstream read %q, %v; want \"ping\" then EOF", req, err)
	}
	if _, err := r.server.Write([]byte("pong")); err != nil {
		t.Fatalf("upstream cannot answer after the client's FIN: %v", err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(r.app, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("client read %q, %v; want \"pong\"", buf, err)
	}
	select {
	case <-r.done:
		t.Fatal("relay returned while upstream's direction was still open")
	default:
	}
	r.server.CloseWrite()
	if n, err := r.app.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("client read %d bytes, %v after upstream's FIN; want EOF", n, err)
	}
	if up, down := r.wait(t, 5*time.Second); up != 4 || down != 4 {
		t.Errorf("relay reported %d up, %d down; want 4, 4", up, down)
	}
}

// A slow reader holds the relay's destination full, which raises the
// source's SO_RCVLOWAT; every byte must still arrive, and a small message
// after the bulk must arrive at once (a mark left raised would hold it
// back forever).
func TestSpliceSlowReaderThenSmallMessage(t *testing.T) {
	r := newRelayRig(t)
	// Small buffers on the reader's side make the relay wait for it.
	r.app.SetReadBuffer(64 << 10)
	const size = 24 << 20
	data := randomBytes(size, 3)
	deadline := time.Now().Add(60 * time.Second)
	r.app.SetDeadline(deadline)
	r.server.SetDeadline(deadline)
	go r.server.Write(data)

	raised := make(chan bool, 1)
	stop := make(chan struct{})
	go func() {
		rc, _ := r.proxyUp.SyscallConn()
		seen := false
		for !seen {
			select {
			case <-stop:
				raised <- false
				return
			case <-time.After(time.Millisecond):
			}
			rc.Control(func(fd uintptr) {
				v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT)
				seen = err == nil && v > 1
			})
		}
		raised <- true
	}()

	h := sha256.New()
	buf := make([]byte, 16<<10)
	var got int
	for got < size {
		n, err := r.app.Read(buf[:min(len(buf), size-got)])
		h.Write(buf[:n])
		got += n
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", got, size, err)
		}
		if got%(1<<20) < n {
			time.Sleep(2 * time.Millisecond)
		}
	}
	close(stop)
	if !<-raised {
		t.Error("the relay never raised the source's SO_RCVLOWAT while the reader was slow")
	}
	if sum := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), sum[:]) {
		t.Fatal("the client got different bytes than upstream sent")
	}

	time.Sleep(50 * time.Millisecond) // the relay waits for upstream again
	if _, err := r.server.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	r.app.SetReadDeadline(time.Now().Add(2 * time.Second))
	tail := make([]byte, 4)
	if _, err := io.ReadFull(r.app, tail); err != nil || string(tail) != "tail" {
		t.Fatalf("small message after the bulk: got %q, %v", tail, err)
	}
	r.app.Close()
	r.server.Close()
	if _, down := r.wait(t, 5*time.Second); down != size+4 {
		t.Errorf("relay reported %d bytes down; want %d", down, size+4)
	}
}

// Closing both of the proxy's ends (as a policy change does) ends a relay
// that is blocked on a reader that never reads.
func TestRelayClosedWhileBlocked(t *testing.T) {
	r := newRelayRig(t)
	chunk := randomBytes(1<<20, 4)
	go func() {
		for {
			if _, err := r.server.Write(chunk); err != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond) // the client never reads: buffers fill up
	select {
	case <-r.done:
		t.Fatal("relay returned before its connections were closed")
	default:
	}
	r.proxyClient.Close()
	r.proxyUp.Close()
	r.wait(t, 5*time.Second)
}

// spliceCopy itself handles bare TCP connections: io.Copy is only the
// fallback.
func TestSpliceCopyHandlesTCP(t *testing.T) {
	src, far := tcpPair(t)
	dst, sink := tcpPair(t)
	data := randomBytes(1<<20, 5)
	go func() {
		far.Write(data)
		far.Close()
	}()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(sink)
		got <- b
	}()
	n, err := spliceCopy(dst, src, nil)
	if errors.Is(err, errNoSplice) {
		t.Fatal("spliceCopy fell back for two bare TCP connections")
	}
	if err != nil || n != int64(len(data)) {
		t.Fatalf("spliceCopy = %d, %v; want %d, nil", n, err, len(data))
	}
	dst.CloseWrite()
	select {
	case b := <-got:
		if !bytes.Equal(b, data) {
			t.Fatalf("got %d bytes, not the %d sent (or different ones)", len(b), len(data))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the far end never saw EOF")
	}
}
