package cgroup

import (
	"maps"
	"os"
	"testing"
)

// The warming move is of this process into its own cgroups: it is made,
// and it changes none of them.
func TestWarmMigrationMovesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	before, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !warmMigration() {
		t.Fatal("no warming move was made")
	}
	after, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(before, after) {
		t.Errorf("cgroups changed: %v, were %v", after, before)
	}
}

// ownPath finds a v1 hierarchy's entry by any of its controllers, and
// the unified hierarchy's by "".
func TestOwnPath(t *testing.T) {
	own := map[string]string{"cpu,cpuacct": "/a", "memory": "/b", "": "/c", "name=systemd": "/d"}
	for _, tc := range []struct {
		h    Hierarchy
		want string
		ok   bool
	}{
		{Hierarchy{Controllers: []string{"cpuacct", "cpu"}}, "/a", true},
		{Hierarchy{Controllers: []string{"memory"}}, "/b", true},
		{Hierarchy{V2: true}, "/c", true},
		{Hierarchy{Controllers: []string{"pids"}}, "", false},
	} {
		if got, ok := ownPath(own, tc.h); got != tc.want || ok != tc.ok {
			t.Errorf("ownPath(%v) = %q, %v; want %q, %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
}
