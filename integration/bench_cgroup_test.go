package integration

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/spec"
)

// benchCgroups numbers the cgroups benchCgroup makes.
var benchCgroups atomic.Int64

// benchCgroup makes a cgroup of its own for a relay the benchmarks start
// beside doorman (HAProxy, Squid, mitmproxy, the bare relay), at the top
// of the tree with a doorman proxy's CPU weight and no other limit. A
// doorman proxy runs in a cgroup of its own in doorman.slice, so on a
// busy machine all its threads compete for the CPUs as one group; a peer
// in this process's cgroup would compete thread by thread (HAProxy runs
// two), and get up to twice the CPU time in the same rounds. Make it
// before the relay starts and join it after (benchJoin), so that its
// removal, a cleanup, runs after the relay has stopped. It returns nil,
// with a log line, where no cgroup can be made.
func benchCgroup(b *testing.B, name string) *cgroup.Group {
	b.Helper()
	layout, err := cgroup.ReadLayout()
	if err != nil {
		b.Logf("%s runs in this process's cgroup: %v", name, err)
		return nil
	}
	g, _, err := layout.Create("/", fmt.Sprintf("dm-bench-%s-%d-%d", name, os.Getpid(), benchCgroups.Add(1)),
		cgroup.Limits{CPUWeight: spec.DefaultProxyCPUWeight}, cgroup.CreateOptions{})
	if err != nil {
		b.Logf("%s runs in this process's cgroup: %v", name, err)
		return nil
	}
	b.Cleanup(func() {
		if err := g.Remove(10 * time.Second); err != nil {
			b.Errorf("%s's cgroup: %v", name, err)
		}
	})
	return g
}

// benchJoin moves pid into g (see benchCgroup); a nil g does nothing.
func benchJoin(b *testing.B, g *cgroup.Group, pid int) {
	b.Helper()
	if g == nil {
		return
	}
	if err := g.Join(pid); err != nil {
		b.Fatalf("move %d into %s: %v", pid, g.Path, err)
	}
}
