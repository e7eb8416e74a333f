package runner

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestOCISpec(t *testing.T) {
	uid := uint32(65534)
	s, err := ociSpec(initSpec{Path: "/usr/bin/curl", Args: []string{"curl", "-s", "x"}, Env: []string{"A=1"}, Dir: "/tmp",
		UID: &uid, GID: 65534, Groups: []uint32{7}, Runtime: []string{"/bin/runsc"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Process.Args, []string{"/usr/bin/curl", "-s", "x"}) || s.Process.Cwd != "/tmp" || s.Root.Path != "/" || s.Root.Readonly {
		t.Errorf("process %+v, root %+v: want the resolved command in /tmp on a writable /", s.Process, s.Root)
	}
	if s.Process.User.UID != 65534 || s.Process.User.GID != 65534 || !slices.Equal(s.Process.User.AdditionalGids, []uint32{7}) {
		t.Errorf("user %+v", s.Process.User)
	}
	c := s.Process.Capabilities
	if len(c.Bounding) != len(keptCaps) || len(c.Effective) != 0 || slices.Contains(c.Bounding, "CAP_SYS_ADMIN") || slices.Contains(c.Bounding, "CAP_NET_ADMIN") {
		t.Errorf("an unprivileged user's capabilities %+v: want keptCaps bounding only", c)
	}
	var net specs.LinuxNamespace
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			net = n
		}
	}
	if net.Path != "/proc/1/ns/net" {
		t.Errorf("network namespace %+v: want the init's", net)
	}
	if !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == ociDir && m.Type == "tmpfs" }) {
		t.Errorf("mounts %+v: %s is not covered inside the container", s.Mounts, ociDir)
	}
	root, err := ociSpec(initSpec{Path: "/bin/sh", Args: []string{"sh"}, Runtime: []string{"/bin/runsc"}})
	if err != nil {
		t.Fatal(err)
	}
	if c := root.Process.Capabilities; len(c.Effective) != len(keptCaps) || len(c.Permitted) != len(keptCaps) {
		t.Errorf("root's capabilities %+v: want keptCaps effective and permitted", c)
	}
	if _, err := ociSpec(initSpec{Runtime: []string{"/bin/runsc"}}); err == nil {
		t.Error("a spec with no command")
	}
}
