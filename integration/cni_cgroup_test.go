package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCNICgroupPath: an entry that declares the cgroupPath capability
// gets the runtime's value in runtimeConfig (libcni puts it there, as
// containerd's CRI does from the pod's cgroup parent), and doorman
// records it in the sandbox's state (cgroupParent) as it came, a
// cgroupfs path or the systemd cgroup driver's slice name, which show
// reports. A value that
// names no cgroup in either form (relative, or climbing out with ..)
// fails the ADD, naming the capability and the value, and leaves no
// state and no proxy.
func TestCNICgroupPath(t *testing.T) {
	e := newCNIEnv(t)
	list := e.conflist(map[string]any{"capabilities": map[string]bool{"cgroupPath": true}})
	for _, cgroup := range []string{"/kubepods/besteffort/pod0b1c2d3e", "kubepods-besteffort-pod0b1c_2d3e.slice"} {
		c := e.newContainer()
		c.rt.CapabilityArgs = map[string]any{"cgroupPath": cgroup}
		e.mustAdd(c, list)
		if s := e.state(c); s.CgroupParent != cgroup {
			t.Errorf("state of %s: cgroupParent %q, want the runtime's %q", c.key, s.CgroupParent, cgroup)
		}
		if r := e.mustCLI("show", c.key); !strings.Contains(r.stdout, "\ncgroup       "+cgroup+"\n") {
			t.Errorf("show %s has no row for its cgroup %s:\n%s", c.key, cgroup, r.stdout)
		}
	}
	for _, cgroup := range []string{"kubepods/besteffort/pod0b1c2d3e", "/kubepods/../../system.slice"} {
		c := e.newContainer()
		c.rt.CapabilityArgs = map[string]any{"cgroupPath": cgroup}
		_, err := e.add(c, list)
		if err == nil {
			e.del(c)
			t.Errorf("cgroupPath %q: ADD succeeded", cgroup)
			continue
		}
		if !strings.Contains(err.Error(), "runtimeConfig cgroupPath") || !strings.Contains(err.Error(), cgroup) {
			t.Errorf("cgroupPath %q: the ADD's error does not name the capability and the value: %v", cgroup, err)
		}
		if _, err := os.Stat(filepath.Join(e.stateDir, c.key)); !os.IsNotExist(err) {
			t.Errorf("cgroupPath %q: state left after the refused ADD: %v", cgroup, err)
		}
		if pids := proxiesFor(c.rt.ContainerID); len(pids) != 0 {
			t.Errorf("cgroupPath %q: proxy processes after the refused ADD: %v", cgroup, pids)
		}
		e.del(c) // the bridge's veth and address
	}
}
