package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The proxy runs its threads under SCHED_BATCH rather than the default
// SCHED_OTHER. Its weight (nice value) and fair share of the CPU stay the
// same; what changes is that its wakeups do not preempt the task running on
// the CPU. A relay is woken by every segment that arrives: under the
// default policy each of those wakeups preempted the sender (on the same
// machine, the workload or the server whose softirq delivered the segment),
// moved a few kilobytes and slept again. Measured on a TLS stream relayed on
// 2 cores (docs/benchmarks.md): 12-19 k context switches of the proxy per
// GB against 3.6 k with SCHED_BATCH, 0.46-0.49 CPU-s per GB against
// 0.27-0.32, and the stream's throughput from 0.94-0.95x HAProxy's to
// 0.99-1.04x. The cost is latency when every CPU is busy: a woken proxy
// waits for the running task's slice to end instead of preempting it.

// runAsBatch moves every thread of this process that runs under
// SCHED_OTHER to SCHED_BATCH, keeping its nice value. A thread under any
// other policy (real-time, idle) was put there on purpose and is left
// alone. Threads the runtime creates later inherit the policy of the
// thread that creates them; one created meanwhile from a thread not yet
// moved is caught by going over the list again until it stops growing.
func runAsBatch() error {
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
			if err := batchThread(tid); err != nil {
				return err
			}
		}
		if !fresh {
			return nil
		}
	}
	return nil
}

// batchThread moves thread tid from SCHED_OTHER to SCHED_BATCH. A thread
// that has exited is not an error.
func batchThread(tid int) error {
	attr, err := unix.SchedGetAttr(tid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("thread %d: sched_getattr: %w", tid, err)
	}
	if attr.Policy != unix.SCHED_NORMAL {
		return nil
	}
	attr.Policy = unix.SCHED_BATCH
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("thread %d: sched_setattr SCHED_BATCH: %w", tid, err)
	}
	return nil
}
