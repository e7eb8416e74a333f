package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WarmMigration starts, in the background, a move of this process into
// the cgroup it is already in, so that the proxy's move into its own
// cgroup a few milliseconds later (Group.Join, from the supervisor) does
// not wait on its own for an RCU grace period. Make the cgroup first: the
// move holds the kernel's cgroup mutex through its wait, and creating a
// cgroup (Layout.Create) takes that mutex, so it would wait too.
//
// Why: the kernel serialises every move between cgroups with one
// process-wide lock (cgroup_threadgroup_rwsem), a per-CPU rwsem whose
// writer, after the lock has been idle for a grace period, must first
// wait for one (synchronize_rcu: 10-15 ms on the test machines, the
// largest single part of a CNI ADD once each proxy got a cgroup). Writers
// that come while the lock is still in its writer mode pay nothing, and
// one that comes during another's wait shares it. A no-op move made as
// early as the front door knows a proxy is coming takes that wait off
// the ADD's critical path. (Kernels from 6.0 skip it on hierarchies
// mounted with favordynmods; cgroup v2's CLONE_INTO_CGROUP avoids the
// move, but not the v1 controllers of a hybrid host.)
//
// Errors are ignored: at worst the proxy's own move waits, as it would
// without this. The move is of this process into its own cgroup, so it
// changes nothing that can be observed.
func WarmMigration() { go warmMigration() }

// warmMigration is WarmMigration's move; it reports whether it made one.
func warmMigration() bool {
	layout, err := ReadLayout()
	if err != nil {
		return false
	}
	own, err := Of(os.Getpid())
	if err != nil {
		return false
	}
	for _, h := range layout.Hierarchies {
		path, ok := ownPath(own, h)
		if !ok {
			continue
		}
		dir, err := h.Dir(path)
		if err != nil {
			continue
		}
		// One move warms the lock for every hierarchy.
		if os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0) == nil {
			return true
		}
	}
	return false
}

// ownPath is the path, in h, of the cgroup that own (as Of returns it)
// names for h: the entry "" for the unified hierarchy, else the entry
// whose controllers include one of h's.
func ownPath(own map[string]string, h Hierarchy) (string, bool) {
	if h.V2 {
		p, ok := own[""]
		return p, ok
	}
	for key, p := range own {
		for c := range strings.SplitSeq(key, ",") {
			if c != "" && h.Holds(c) {
				return p, true
			}
		}
	}
	return "", false
}
