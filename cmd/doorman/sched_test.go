package main

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

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
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue // exited meanwhile
		}
		out[tid] = attr.Policy
	}
	return out
}

func TestRunAsBatch(t *testing.T) {
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
	before := threadPolicies(t)
	if len(before) < 2 {
		t.Fatalf("expected several threads, found %d", len(before))
	}

	if err := runAsBatch(); err != nil {
		t.Fatal(err)
	}
	for tid, policy := range threadPolicies(t) {
		want := uint32(unix.SCHED_BATCH)
		if tid == idleTID {
			want = unix.SCHED_IDLE
		}
		if policy != want {
			t.Errorf("thread %d: policy %d after runAsBatch, want %d", tid, policy, want)
		}
	}

	// Threads started afterwards inherit the policy.
	fresh := make(chan uint32)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		attr, err := unix.SchedGetAttr(0, 0)
		if err != nil {
			t.Error(err)
			fresh <- 0
			return
		}
		fresh <- attr.Policy
	}()
	if p := <-fresh; p != unix.SCHED_BATCH {
		t.Errorf("a thread started later runs under policy %d, want SCHED_BATCH", p)
	}
}
