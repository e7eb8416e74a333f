package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
)

// policyLog records the switches a bulkSched asks for.
type policyLog struct {
	mu    sync.Mutex
	calls [][2]uint32
	fail  bool
}

func (l *policyLog) set(from, to uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, [2]uint32{from, to})
	if l.fail {
		return errors.New("refused")
	}
	return nil
}

func (l *policyLog) snapshot() [][2]uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][2]uint32(nil), l.calls...)
}

func testBulkSched(l *policyLog, window, hold time.Duration) *bulkSched {
	b := &bulkSched{setPolicy: l.set, window: window, hold: hold}
	b.start.Store(time.Now().UnixNano())
	return b
}

var (
	toBatch = [2]uint32{unix.SCHED_NORMAL, unix.SCHED_BATCH}
	toOther = [2]uint32{unix.SCHED_BATCH, unix.SCHED_NORMAL}
)

func TestBulkSchedSwitches(t *testing.T) {
	var l policyLog
	// hold is long: the test runs check itself.
	b := testBulkSched(&l, time.Hour, time.Hour)
	for range bulkBytes/(64<<10) - 1 {
		b.add(64 << 10)
	}
	if got := l.snapshot(); len(got) != 0 || b.batch.Load() {
		t.Fatalf("switched before %d bytes: %v", bulkBytes, got)
	}
	b.add(64 << 10)
	if got := l.snapshot(); len(got) != 1 || got[0] != toBatch || !b.batch.Load() {
		t.Fatalf("after %d bytes within the window: switches %v, batch %v; want one to SCHED_BATCH", bulkBytes, got, b.batch.Load())
	}
	// More bulk: no new switch, and check keeps SCHED_BATCH.
	b.add(bulkBytes)
	b.check()
	if got := l.snapshot(); len(got) != 1 || !b.batch.Load() {
		t.Fatalf("bulk continued, yet switches %v, batch %v", got, b.batch.Load())
	}
	// A quiet period: check goes back.
	b.add(1 << 10)
	b.check()
	if got := l.snapshot(); len(got) != 2 || got[1] != toOther || b.batch.Load() {
		t.Fatalf("after a quiet period: switches %v, batch %v; want back to SCHED_OTHER", got, b.batch.Load())
	}
}

func TestBulkSchedIgnoresSlowTraffic(t *testing.T) {
	var l policyLog
	b := testBulkSched(&l, 20*time.Millisecond, time.Hour)
	for range 3 {
		b.add(bulkBytes / 2)
		time.Sleep(30 * time.Millisecond)
	}
	b.add(bulkBytes / 2)
	if got := l.snapshot(); len(got) != 0 || b.batch.Load() {
		t.Errorf("%d bytes spread over %v windows switched the policy: %v", 2*bulkBytes, 3, got)
	}
}

func TestBulkSchedCheckRearms(t *testing.T) {
	var l policyLog
	b := testBulkSched(&l, time.Hour, 30*time.Millisecond)
	b.add(bulkBytes)
	if !b.batch.Load() {
		t.Fatal("did not switch to SCHED_BATCH")
	}
	// Nothing more: the timer started by the switch goes back.
	deadline := time.Now().Add(5 * time.Second)
	for b.batch.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := l.snapshot(); b.batch.Load() || len(got) != 2 || got[1] != toOther {
		t.Errorf("after going quiet: switches %v, batch %v", got, b.batch.Load())
	}
}

func TestBulkSchedGivesUpAfterFailure(t *testing.T) {
	l := policyLog{fail: true}
	b := testBulkSched(&l, time.Hour, time.Hour)
	b.add(bulkBytes)
	b.add(bulkBytes)
	got := l.snapshot()
	// One attempt, then its undo; nothing after that.
	if len(got) != 2 || got[0] != toBatch || got[1] != toOther || b.batch.Load() {
		t.Errorf("switches %v, batch %v; want one attempt and its undo", got, b.batch.Load())
	}
	var nilSched *bulkSched
	nilSched.add(bulkBytes) // must not panic
}

// threadPolicies returns the scheduling policy of every thread of this
// process.
func threadPolicies(t *testing.T) map[int]uint32 {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]uint32{}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			t.Fatal(err)
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil {
			out[tid] = attr.Policy
		}
	}
	return out
}

func TestSetThreadsPolicy(t *testing.T) {
	// One thread under SCHED_IDLE, set on purpose: it must stay there.
	idle := make(chan int)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		tid := unix.Gettid()
		attr, err := unix.SchedGetAttr(tid, 0)
		if err == nil {
			attr.Policy = unix.SCHED_IDLE
			err = unix.SchedSetAttr(tid, attr, 0)
		}
		if err != nil {
			t.Errorf("set SCHED_IDLE: %v", err)
			tid = 0
		}
		idle <- tid
		<-release
	}()
	idleTID := <-idle
	defer close(release)
	defer setThreadsPolicy(unix.SCHED_BATCH, unix.SCHED_NORMAL)

	for _, step := range []struct {
		from, to uint32
	}{{unix.SCHED_NORMAL, unix.SCHED_BATCH}, {unix.SCHED_BATCH, unix.SCHED_NORMAL}} {
		before := threadPolicies(t)
		if err := setThreadsPolicy(step.from, step.to); err != nil {
			t.Fatal(err)
		}
		policies := threadPolicies(t)
		if len(policies) < 2 {
			t.Fatalf("expected several threads, found %d", len(policies))
		}
		if policies[idleTID] != unix.SCHED_IDLE {
			t.Errorf("the SCHED_IDLE thread %d: policy %d after switching %d -> %d", idleTID, policies[idleTID], step.from, step.to)
		}
		for tid, policy := range policies {
			want := step.to
			if was, ok := before[tid]; ok && was != step.from && was != step.to {
				want = was // another policy, set on purpose (the idle thread)
			}
			if policy != want {
				t.Errorf("thread %d: policy %d after switching %d -> %d, want %d", tid, policy, step.from, step.to, want)
			}
		}
	}
}

// TestRelayCountsBulk checks that the relay's splice loop feeds the
// counter: a bulk transfer through relay switches the policy, and the
// quiet after it switches back.
func TestRelayCountsBulk(t *testing.T) {
	var l policyLog
	b := testBulkSched(&l, time.Second, 200*time.Millisecond)
	app, proxyClient := tcpPair(t)
	proxyUp, server := tcpPair(t)
	done := make(chan struct{})
	go func() {
		relay(proxyClient, proxyUp, b)
		close(done)
	}()
	go io.Copy(io.Discard, app)
	chunk := make([]byte, 1<<20)
	for range 4 * bulkBytes / len(chunk) {
		if _, err := server.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.snapshot(); len(got) == 0 || got[0] != toBatch {
		t.Fatalf("after %d bytes relayed: switches %v, want one to SCHED_BATCH", 4*bulkBytes, got)
	}
	server.Close()
	app.Close()
	<-done
	deadline := time.Now().Add(5 * time.Second)
	for b.batch.Load() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := l.snapshot(); b.batch.Load() || got[len(got)-1] != toOther {
		t.Errorf("after the transfer: switches %v, batch %v; want back to SCHED_OTHER", got, b.batch.Load())
	}
}

// TestHTTPRelayCountsBulk checks the same for plaintext HTTP, whose
// responses relayHTTP frames and copies with its own writer (bulkWriter)
// rather than the splice loop.
func TestHTTPRelayCountsBulk(t *testing.T) {
	var l policyLog
	p := New(Config{Policy: mustPolicy(t, conf.ModeAllowlist, "api.test")})
	p.bulk = testBulkSched(&l, time.Second, time.Hour)
	app, proxyClient := tcpPair(t)
	proxyUp, server := tcpPair(t)
	dst := netip.AddrPortFrom(apiAddr, 80)
	done := make(chan httpResult, 1)
	go func() { done <- p.relayHTTP(&tracked{client: proxyClient, upstream: proxyUp, dst: dst}) }()

	const body = 4 * bulkBytes
	go func() {
		// The server reads the request head, then answers with a large body.
		buf := make([]byte, 4096)
		server.Read(buf)
		fmt.Fprintf(server, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", body)
		chunk := make([]byte, 1<<20)
		for sent := 0; sent < body; sent += len(chunk) {
			if _, err := server.Write(chunk); err != nil {
				return
			}
		}
		server.CloseWrite()
	}()
	if _, err := app.Write([]byte("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(app, body))
	if err != nil || n != body {
		t.Fatalf("read %d bytes of the response body (%v), want at least %d", n, err, body)
	}
	if got := l.snapshot(); len(got) == 0 || got[0] != toBatch {
		t.Errorf("after a %d-byte HTTP response: switches %v, want one to SCHED_BATCH", body, got)
	}
	app.CloseWrite()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("relayHTTP still running")
	}
}
