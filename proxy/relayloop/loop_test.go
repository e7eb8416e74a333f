package relayloop

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// bed is a client and a server on loopback with a relay pair between
// them: client <-> a (the pair's side 0), b (side 1) <-> server.
type bed struct {
	client, server *net.TCPConn
	a, b           int // the pair's descriptors
}

// newBed connects client to a listener whose accepted end becomes side a,
// and side b to a listener whose accepted end is the server.
func newBed(t testing.TB) *bed {
	t.Helper()
	connect := func() (dialed, accepted *net.TCPConn) {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		return d, c
	}
	client, a := connect()
	b, server := connect()
	bd := &bed{client: client, server: server}
	var err error
	if bd.a, err = Detach(a); err != nil {
		t.Fatal(err)
	}
	if bd.b, err = Detach(b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return bd
}

func newLoop(t testing.TB) *Loop {
	t.Helper()
	l, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// add adds the bed's pair and returns a channel that gets its result.
func (bd *bed) add(t testing.TB, l *Loop) (*Pair, chan Result) {
	t.Helper()
	res := make(chan Result, 2)
	p, err := l.Add(bd.a, bd.b, func(r Result) { res <- r })
	if err != nil {
		t.Fatal(err)
	}
	return p, res
}

func waitResult(t *testing.T, res chan Result) Result {
	t.Helper()
	select {
	case r := <-res:
		select {
		case <-res:
			t.Fatal("done ran twice")
		case <-time.After(50 * time.Millisecond):
		}
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the pair did not end")
	}
	return Result{}
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// exchange has both ends send their bytes at once, half-close, and read
// everything the other sent.
func exchange(t *testing.T, bd *bed, up, down []byte) (gotUp, gotDown []byte) {
	t.Helper()
	var wg sync.WaitGroup
	var errUp, errDown error
	wg.Add(4)
	go func() { defer wg.Done(); bd.client.Write(up); bd.client.CloseWrite() }()
	go func() { defer wg.Done(); bd.server.Write(down); bd.server.CloseWrite() }()
	go func() { defer wg.Done(); gotUp, errUp = io.ReadAll(bd.server) }()
	go func() { defer wg.Done(); gotDown, errDown = io.ReadAll(bd.client) }()
	wg.Wait()
	if errUp != nil || errDown != nil {
		t.Fatalf("reading: %v, %v", errUp, errDown)
	}
	return gotUp, gotDown
}

func TestRelayBothWays(t *testing.T) {
	l := newLoop(t)
	for _, sz := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {3 << 20, 5 << 20}, {70000, 131073}} {
		bd := newBed(t)
		_, res := bd.add(t, l)
		up, down := randomBytes(t, sz[0]), randomBytes(t, sz[1])
		gotUp, gotDown := exchange(t, bd, up, down)
		if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
			t.Fatalf("sizes %v: got %d/%d bytes, not what was sent", sz, len(gotUp), len(gotDown))
		}
		r := waitResult(t, res)
		if r.AToB != int64(len(up)) || r.BToA != int64(len(down)) || r.Aborted {
			t.Fatalf("sizes %v: result %+v", sz, r)
		}
	}
	if n := l.Len(); n != 0 {
		t.Fatalf("loop holds %d pairs after they all ended", n)
	}
}

// Bytes that arrived before Add are relayed first, in order.
func TestBytesBeforeAdd(t *testing.T) {
	l := newLoop(t)
	bd := newBed(t)
	early := randomBytes(t, 10000)
	bd.client.Write(early)
	bd.server.Write([]byte("hello"))
	time.Sleep(50 * time.Millisecond) // both queued on a and b
	_, res := bd.add(t, l)
	late := randomBytes(t, 5000)
	gotUp, gotDown := exchange(t, bd, late, nil)
	if want := append(append([]byte(nil), early...), late...); !bytes.Equal(gotUp, want) {
		t.Fatalf("upstream got %d bytes, want the %d sent before and after Add, in order", len(gotUp), len(want))
	}
	if string(gotDown) != "hello" {
		t.Fatalf("client got %q, want hello", gotDown)
	}
	waitResult(t, res)
}

// One side's FIN reaches the other while the opposite direction keeps
// flowing, and the pair records who ended first.
func TestHalfClose(t *testing.T) {
	l := newLoop(t)
	bd := newBed(t)
	_, res := bd.add(t, l)
	bd.server.CloseWrite()
	bd.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := bd.client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client read %d, %v after the server's FIN; want EOF", n, err)
	}
	// The client can still talk to the server.
	bd.client.Write([]byte("still here"))
	bd.client.CloseWrite()
	got, err := io.ReadAll(bd.server)
	if err != nil || string(got) != "still here" {
		t.Fatalf("server got %q, %v", got, err)
	}
	r := waitResult(t, res)
	if !r.BEndedFirst || r.AToB != 10 {
		t.Fatalf("result %+v, want b ended first and 10 bytes a to b", r)
	}
}

// A slow reader holds the relay back (nothing is lost, nothing piles up
// in the proxy) and the fast writer keeps its bytes.
func TestSlowReader(t *testing.T) {
	l := newLoop(t)
	bd := newBed(t)
	_, res := bd.add(t, l)
	down := randomBytes(t, 24<<20)
	go func() { bd.server.Write(down); bd.server.Close() }()
	var got []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := bd.client.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(got)%(1<<20) < 32<<10 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !bytes.Equal(got, down) {
		t.Fatalf("client got %d bytes, not the %d sent", len(got), len(down))
	}
	bd.client.Close()
	if r := waitResult(t, res); r.BToA != int64(len(down)) {
		t.Fatalf("result %+v", r)
	}
}

// Abort resets the client's side and closes the server's.
func TestAbort(t *testing.T) {
	l := newLoop(t)
	bd := newBed(t)
	p, res := bd.add(t, l)
	bd.client.Write([]byte("x"))
	if _, err := io.ReadFull(bd.server, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	p.Abort()
	r := waitResult(t, res)
	if !r.Aborted {
		t.Fatalf("result %+v, want aborted", r)
	}
	bd.client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bd.client.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read: %v, want a reset", err)
	}
	bd.server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := bd.server.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("server read %d, %v; want the end of the stream", n, err)
	}
	if d := p.IdleFor(); d != 0 {
		t.Fatalf("IdleFor after the end = %v, want 0", d)
	}
}

// Close ends the pair gracefully: both ends see EOF.
func TestPairClose(t *testing.T) {
	l := newLoop(t)
	bd := newBed(t)
	p, res := bd.add(t, l)
	p.Close()
	if r := waitResult(t, res); !r.Aborted {
		t.Fatalf("result %+v", r)
	}
	for _, c := range []*net.TCPConn{bd.client, bd.server} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("read %d, %v; want EOF", n, err)
		}
	}
}

func TestIdleFor(t *testing.T) {
	l := newLoop(t)
	bd := newBed(t)
	p, _ := bd.add(t, l)
	bd.client.Write([]byte("x"))
	io.ReadFull(bd.server, make([]byte, 1))
	time.Sleep(300 * time.Millisecond)
	if d := p.IdleFor(); d < 250*time.Millisecond {
		t.Fatalf("IdleFor = %v after 300 ms of silence", d)
	}
	bd.client.Write([]byte("y"))
	io.ReadFull(bd.server, make([]byte, 1))
	if d := p.IdleFor(); d > 200*time.Millisecond {
		t.Fatalf("IdleFor = %v right after a byte", d)
	}
}

// The loop's Close aborts what is left, running every done function, and
// Add fails afterwards.
func TestLoopClose(t *testing.T) {
	l, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var results []chan Result
	for range 5 {
		bd := newBed(t)
		_, res := bd.add(t, l)
		results = append(results, res)
	}
	l.Close()
	for _, res := range results {
		if r := waitResult(t, res); !r.Aborted {
			t.Fatalf("result %+v", r)
		}
	}
	bd := newBed(t)
	if _, err := l.Add(bd.a, bd.b, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
}

// Written sees every byte delivered.
func TestWritten(t *testing.T) {
	var mu sync.Mutex
	var total int64
	l, err := New(Options{Written: func(n int64) { mu.Lock(); total += n; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bd := newBed(t)
	_, res := bd.add(t, l)
	exchange(t, bd, randomBytes(t, 100000), randomBytes(t, 200000))
	waitResult(t, res)
	mu.Lock()
	defer mu.Unlock()
	if total != 300000 {
		t.Fatalf("Written saw %d bytes, want 300000", total)
	}
}

// With fewer pipes than directions that move bytes, directions wait for
// one and every stream still arrives whole.
func TestPipeBudget(t *testing.T) {
	l, err := New(Options{MaxPipes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Sample, on the loop, the pipes in use and the directions waiting.
	var peakInUse, peakWaiting int
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
			done := make(chan struct{})
			l.Run(func() {
				peakInUse = max(peakInUse, l.inUse)
				peakWaiting = max(peakWaiting, len(l.waiting))
				close(done)
			})
			<-done
		}
	}()
	var wg sync.WaitGroup
	for range 4 {
		bd := newBed(t)
		// Small buffers, so that a slow reader fills them.
		bd.client.SetReadBuffer(16 << 10)
		bd.server.SetReadBuffer(16 << 10)
		for _, fd := range []int{bd.a, bd.b} {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 16<<10)
		}
		_, res := bd.add(t, l)
		up, down := randomBytes(t, 2<<20), randomBytes(t, 3<<20)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w sync.WaitGroup
			var gotUp, gotDown []byte
			w.Add(4)
			go func() { defer w.Done(); bd.client.Write(up); bd.client.CloseWrite() }()
			go func() { defer w.Done(); bd.server.Write(down); bd.server.CloseWrite() }()
			// Slow readers: each direction's destination fills, so
			// it holds its pipe while the others wait for one.
			go func() { defer w.Done(); gotUp = slowReadAll(bd.server) }()
			go func() { defer w.Done(); gotDown = slowReadAll(bd.client) }()
			w.Wait()
			if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
				t.Errorf("got %d/%d bytes, not what was sent", len(gotUp), len(gotDown))
			}
			select {
			case r := <-res:
				if r.Aborted || r.AToB != int64(len(up)) || r.BToA != int64(len(down)) {
					t.Errorf("result %+v", r)
				}
			case <-time.After(20 * time.Second):
				t.Error("the pair did not end")
			}
		}()
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	if peakInUse > 1 || peakWaiting == 0 {
		t.Fatalf("at most %d pipes in use, at most %d directions waiting; want 1 pipe and some waiting", peakInUse, peakWaiting)
	}
}

// Watched sockets handed to AddWatched relay like added ones, the bytes
// that arrived while they were watched included, and their watchers'
// functions are not called again.
func TestAddWatched(t *testing.T) {
	l := newLoop(t)
	bd := newBed(t)
	calls := make(chan struct{}, 100)
	fn := func(*Watcher, uint32) { calls <- struct{}{} }
	wa, err := l.Watch(bd.a, PairEvents, fn)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := l.Watch(bd.b, PairEvents, fn)
	if err != nil {
		t.Fatal(err)
	}
	early := randomBytes(t, 3000)
	bd.client.Write(early)
	time.Sleep(50 * time.Millisecond)
	res := make(chan Result, 2)
	added := make(chan error, 1)
	l.Run(func() {
		_, err := l.AddWatched(wa, wb, func(r Result) { res <- r })
		added <- err
	})
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	for len(calls) > 0 {
		<-calls
	}
	late := randomBytes(t, 100000)
	gotUp, gotDown := exchange(t, bd, late, []byte("answer"))
	if want := append(append([]byte(nil), early...), late...); !bytes.Equal(gotUp, want) || string(gotDown) != "answer" {
		t.Fatalf("got %d/%q, want %d/answer", len(gotUp), gotDown[:min(len(gotDown), 10)], len(want))
	}
	if r := waitResult(t, res); r.AToB != int64(len(early)+len(late)) {
		t.Fatalf("result %+v", r)
	}
	if len(calls) != 0 {
		t.Fatalf("the watchers' functions ran %d times after AddWatched", len(calls))
	}
	if n := l.Len(); n != 0 {
		t.Fatalf("loop holds %d pairs", n)
	}
}

// slowReadAll reads c to its end, 16 KiB a millisecond.
func slowReadAll(c net.Conn) []byte {
	var out []byte
	buf := make([]byte, 16<<10)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out
		}
		time.Sleep(time.Millisecond)
	}
}

// A level-triggered watcher is called again while its descriptor stays
// ready, though nothing new arrives: the loop looks at its set once more
// before it parks (it parks without a last look after edge-triggered
// events only). Each call here takes one byte of ten written at once.
func TestLevelTriggeredWatcher(t *testing.T) {
	l := newLoop(t)
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	got := make(chan byte, 16)
	w, err := l.Watch(fds[0], unix.EPOLLIN, func(_ *Watcher, _ uint32) {
		var b [1]byte
		if n, _ := unix.Read(fds[0], b[:]); n == 1 {
			got <- b[0]
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Run(w.Stop)
	if _, err := unix.Write(fds[1], []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	var all []byte
	timeout := time.After(5 * time.Second)
	for len(all) < 10 {
		select {
		case b := <-got:
			all = append(all, b)
		case <-timeout:
			t.Fatalf("the watcher took %q of 10 bytes left ready", all)
		}
	}
	if string(all) != "0123456789" {
		t.Fatalf("read %q", all)
	}
}

// An edge-triggered event that arrives while the loop handles a batch
// wakes it once it has parked: a chain of watchers, each of which makes
// the next one's descriptor ready from inside the loop, runs to its end.
func TestEventsDuringABatch(t *testing.T) {
	l := newLoop(t)
	const n = 200
	fds := make([][2]int, n)
	for i := range fds {
		if err := unix.Pipe2(fds[i][:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fds[i][0])
		defer unix.Close(fds[i][1])
	}
	done := make(chan int, n)
	for i := range fds {
		w, err := l.Watch(fds[i][0], unix.EPOLLIN|unix.EPOLLET, func(_ *Watcher, _ uint32) {
			var b [8]byte
			for {
				if k, _ := unix.Read(fds[i][0], b[:]); k <= 0 {
					break
				}
			}
			done <- i
			if i+1 < n {
				unix.Write(fds[i+1][1], []byte{1})
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Run(w.Stop)
	}
	unix.Write(fds[0][1], []byte{1})
	timeout := time.After(10 * time.Second)
	for want := range n {
		select {
		case i := <-done:
			if i != want {
				t.Fatalf("watcher %d ran, want %d", i, want)
			}
		case <-timeout:
			t.Fatalf("the chain stopped at %d of %d", want, n)
		}
	}
}
