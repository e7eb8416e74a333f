package cgroup

import (
	"reflect"
	"strings"
	"testing"
)

// A hybrid host's mounts, as on these machines (systemd's layout on
// older distributions): v1 controllers, one of them co-mounted, a named
// hierarchy, and the v2 unified hierarchy. A second mount of the memory
// hierarchy (same device) is the same hierarchy.
const hybridMountinfo = `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
90 22 0:32 /docker /mnt/my\040memory rw,relatime - cgroup cgroup rw,memory
`

func TestParseMountinfo(t *testing.T) {
	hs, err := parseMountinfo(strings.NewReader(hybridMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	want := []Hierarchy{
		{Mount: "/sys/fs/cgroup/cpu,cpuacct", Root: "/", Controllers: []string{"cpu", "cpuacct"}},
		{Mount: "/sys/fs/cgroup/memory", Root: "/", Controllers: []string{"memory"}},
		{Mount: "/sys/fs/cgroup/pids", Root: "/", Controllers: []string{"pids"}},
		{Mount: "/sys/fs/cgroup/systemd", Root: "/"},
		{Mount: "/sys/fs/cgroup/unified", Root: "/", V2: true},
	}
	if !reflect.DeepEqual(hs, want) {
		t.Fatalf("hierarchies:\n%+v\nwant\n%+v", hs, want)
	}
	l := &Layout{Hierarchies: hs}
	if h, ok := l.For("cpu"); !ok || h.Mount != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Errorf("For(cpu) = %+v, %v", h, ok)
	}
	got, missing := l.limited()
	if len(got) != 3 || len(missing) != 0 {
		t.Errorf("limited: %+v, missing %v", got, missing)
	}
	if d := l.Describe(); d != "hybrid: memory, pids, cpu in v1" {
		t.Errorf("Describe: %q", d)
	}

	// A v2 host: the controllers come from the root's cgroup.controllers.
	v2 := &Layout{Hierarchies: []Hierarchy{{Mount: "/sys/fs/cgroup", Root: "/", V2: true, Controllers: []string{"cpuset", "cpu", "io", "memory", "pids"}}}}
	if got, missing := v2.limited(); len(got) != 1 || !got[0].V2 || len(missing) != 0 {
		t.Errorf("v2 limited: %+v, missing %v", got, missing)
	}
	if d := v2.Describe(); d != "cgroup v2" {
		t.Errorf("Describe v2: %q", d)
	}
	// On a hybrid host whose v1 lacks pids but v2 offers it, pids is v2's.
	mixed := &Layout{Hierarchies: []Hierarchy{hs[1], {Mount: "/sys/fs/cgroup/unified", Root: "/", V2: true, Controllers: []string{"pids"}}}}
	got, missing = mixed.limited()
	if len(got) != 2 || !got[1].V2 || !reflect.DeepEqual(missing, []string{"cpu"}) {
		t.Errorf("mixed limited: %+v, missing %v", got, missing)
	}
}

func TestHierarchyDir(t *testing.T) {
	h := Hierarchy{Mount: "/sys/fs/cgroup/memory", Root: "/"}
	if d, err := h.Dir("/doorman/doorman-x"); err != nil || d != "/sys/fs/cgroup/memory/doorman/doorman-x" {
		t.Errorf("Dir: %q, %v", d, err)
	}
	if _, err := h.Dir("doorman"); err == nil {
		t.Error("a relative path: want an error")
	}
	sub := Hierarchy{Mount: "/mnt/m", Root: "/docker"}
	if d, err := sub.Dir("/docker/abc"); err != nil || d != "/mnt/m/abc" {
		t.Errorf("Dir below a mounted subtree: %q, %v", d, err)
	}
	if _, err := sub.Dir("/dockerx/abc"); err == nil {
		t.Error("a path outside the mounted subtree: want an error")
	}
}
