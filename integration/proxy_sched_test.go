package integration

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/integration/testnet"
)

// threadPolicies returns the scheduling policy of each thread of pid.
func threadPolicies(t *testing.T, pid int) map[int]uint32 {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	out := map[int]uint32{}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil {
			out[tid] = attr.Policy
		}
	}
	return out
}

// allUnder reports whether every thread in policies runs under policy.
func allUnder(policies map[int]uint32, policy uint32) bool {
	for _, p := range policies {
		if p != policy {
			return false
		}
	}
	return len(policies) > 0
}

// TestProxyBatchWhileBulk checks that a real proxy runs its threads under
// SCHED_BATCH while it relays bulk data, and goes back to SCHED_OTHER once
// the transfer is over (proxy/sched.go).
func TestProxyBatchWhileBulk(t *testing.T) {
	// The proxy inherits the plugin's policy, which is this test's; only
	// SCHED_OTHER threads are switched.
	attr, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatalf("sched_getattr: %v", err)
	}
	if attr.Policy != unix.SCHED_NORMAL {
		t.Skipf("the test runs under scheduling policy %d, not SCHED_OTHER (%d): its proxy would not switch", attr.Policy, unix.SCHED_NORMAL)
	}
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"allowedHosts": []string{apiName, otherAddr.String()}}))
	pid := e.state(c).PID
	if p := threadPolicies(t, pid); !allUnder(p, unix.SCHED_NORMAL) {
		t.Fatalf("an idle proxy's threads: %v, want all SCHED_OTHER (%d)", p, unix.SCHED_NORMAL)
	}

	conn, err := c.ns.DialTCP(netip.AddrPortFrom(otherAddr, testnet.PortRecorder).String())
	if err != nil {
		t.Fatalf("dial the recorder through the proxy: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	chunk := make([]byte, 1<<20)
	const total = 256 << 20
	for sent := 0; sent < total; sent += len(chunk) {
		if _, err := conn.Write(chunk); err != nil {
			t.Fatalf("upload through the proxy after %d bytes: %v", sent, err)
		}
	}
	// The proxy stays under SCHED_BATCH for at least a second after the
	// switch; the upload has just ended.
	if p := threadPolicies(t, pid); !allUnder(p, unix.SCHED_BATCH) {
		t.Errorf("after relaying %d MiB: thread policies %v, want all SCHED_BATCH (%d)", total>>20, p, unix.SCHED_BATCH)
	}
	conn.Close()

	deadline := time.Now().Add(5 * time.Second)
	for {
		p := threadPolicies(t, pid)
		if allUnder(p, unix.SCHED_NORMAL) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the transfer: thread policies %v, want all SCHED_OTHER (%d)", p, unix.SCHED_NORMAL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for e.other.Received(testnet.PortRecorder) < total && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := e.other.Received(testnet.PortRecorder); n != total {
		t.Errorf("the recorder received %d bytes, want %d", n, total)
	}
}
