package proxy

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// While the proxy relays bulk data it runs its threads under SCHED_BATCH,
// and under the default SCHED_OTHER the rest of the time.
//
// A relay is woken by every segment that arrives. Under SCHED_OTHER each
// wakeup preempts the task running on that CPU, typically the sender whose
// softirq delivered the segment, moves a few kilobytes and sleeps again; on
// a TLS stream relayed on 2 cores that was 11-19 k context switches of the
// proxy per GB against HAProxy's 2-3 k, and the sender spent ~30% more CPU
// per GB. SCHED_BATCH keeps the proxy's weight and fair share but its
// wakeups no longer preempt: it runs a little later and moves more each
// time. Run all the time, that cost latency whenever the CPUs were busy
// (with two CPU hogs on the machine, 2.5-3 ms more at the p99 of new
// connections), so the proxy switches only while its own traffic is bulk:
// a sandbox pulling data at full speed waits a little longer for its other
// connections when the CPUs are busy, and a sandbox that is not is not
// slowed by its neighbours' load. Side by side (docs/benchmarks.md), the
// TLS stream went from 0.86x and 0.83x HAProxy's throughput to 1.01x and
// 1.06x, at 4.1-4.5 k context switches per GB.
const (
	// bulkBytes relayed within bulkWindow switch the proxy to SCHED_BATCH
	// (80 MB/s and more).
	bulkBytes  = 8 << 20
	bulkWindow = 100 * time.Millisecond
	// bulkHold is how often a proxy under SCHED_BATCH checks that it
	// still relays at least bulkBytes per bulkHold; if not, it goes back
	// to SCHED_OTHER.
	bulkHold = time.Second
)

// bulkSched counts relayed bytes and switches the process's scheduling
// policy (see above). A nil *bulkSched does nothing.
type bulkSched struct {
	// bytes counts what was relayed since start under SCHED_OTHER, and
	// since the last check under SCHED_BATCH.
	bytes atomic.Int64
	start atomic.Int64 // the current window's start, in Unix nanoseconds
	batch atomic.Bool  // the threads run under SCHED_BATCH
	// setPolicy moves every thread under policy from to policy to.
	setPolicy func(from, to uint32) error
	window    time.Duration // bulkWindow
	hold      time.Duration // bulkHold

	mu     sync.Mutex
	failed bool // switching failed once: the proxy stays as it is
}

func newBulkSched() *bulkSched {
	b := &bulkSched{setPolicy: setThreadsPolicy, window: bulkWindow, hold: bulkHold}
	b.start.Store(time.Now().UnixNano())
	return b
}

// add counts n bytes relayed. It is called for every write of the splice
// loop and of relayHTTP's responses, so it reads the clock only when the
// count crosses bulkBytes.
func (b *bulkSched) add(n int64) {
	if b == nil {
		return
	}
	if b.bytes.Add(n) < bulkBytes || b.batch.Load() {
		return
	}
	now := time.Now().UnixNano()
	if now-b.start.Load() > int64(b.window) {
		// Too slow to be bulk: start a new window.
		b.start.Store(now)
		b.bytes.Store(0)
		return
	}
	b.enter()
}

// enter switches the threads to SCHED_BATCH and starts checking that the
// traffic stays bulk.
func (b *bulkSched) enter() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.batch.Load() || b.failed {
		return
	}
	if err := b.setPolicy(unix.SCHED_NORMAL, unix.SCHED_BATCH); err != nil {
		// Try to undo what was switched, and leave it at that: the
		// policy only changes what relaying costs.
		b.setPolicy(unix.SCHED_BATCH, unix.SCHED_NORMAL)
		b.failed = true
		return
	}
	b.batch.Store(true)
	b.bytes.Store(0)
	time.AfterFunc(b.hold, b.check)
}

// check runs every bulkHold under SCHED_BATCH: it goes back to SCHED_OTHER
// once the last period carried less than bulkBytes.
func (b *bulkSched) check() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bytes.Swap(0) >= bulkBytes {
		time.AfterFunc(b.hold, b.check)
		return
	}
	if err := b.setPolicy(unix.SCHED_BATCH, unix.SCHED_NORMAL); err != nil {
		b.failed = true
	}
	// A new window starts now.
	b.start.Store(time.Now().UnixNano())
	b.batch.Store(false)
}

// setThreadsPolicy moves every thread of this process that runs under
// policy from to policy to, keeping its nice value. Threads under any other
// policy (real-time, idle, set on purpose) are left alone. Threads the
// runtime creates later inherit the policy of the thread that creates them;
// one created meanwhile from a thread not yet moved is caught by reading the
// list again until it stops growing.
func setThreadsPolicy(from, to uint32) error {
	seen := map[int]bool{}
	for range 5 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		fresh := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || seen[tid] {
				continue
			}
			seen[tid], fresh = true, true
			if err := setThreadPolicy(tid, from, to); err != nil {
				return err
			}
		}
		if !fresh {
			return nil
		}
	}
	return nil
}

// setThreadPolicy moves thread tid from policy from to policy to. A thread
// that has exited is not an error.
func setThreadPolicy(tid int, from, to uint32) error {
	attr, err := unix.SchedGetAttr(tid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("thread %d: sched_getattr: %w", tid, err)
	}
	if attr.Policy != from {
		return nil
	}
	attr.Policy = to
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("thread %d: sched_setattr policy %d: %w", tid, to, err)
	}
	return nil
}
