package cgroup

import (
	"path"
	"strings"
	"testing"
)

// FuzzParsePath: whatever a runtime names, ParsePath either refuses it
// or returns a clean absolute path without NUL or newline, which it
// returns unchanged when given back.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"/kubepods/burstable/pod1", "kubepods-burstable-pod1.slice", "system.slice:docker:3f2a",
		":crio:ab", "machine.slice:libpod:x.slice", "-.slice", "a--b.slice", "relative/x", "/a/../b", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePath(s)
		if err != nil {
			if !strings.Contains(err.Error(), "cgroup") {
				t.Fatalf("ParsePath(%q): error %q does not say what it is about", s, err)
			}
			return
		}
		if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, "\x00\n") {
			t.Fatalf("ParsePath(%q) = %q: not a clean absolute path", s, p)
		}
		if again, err := ParsePath(p); err != nil || again != p {
			t.Fatalf("ParsePath(%q) = %q, but ParsePath(%q) = %q, %v", s, p, p, again, err)
		}
	})
}

// FuzzParseMountinfo: any mountinfo text parses without a panic, and a
// hierarchy it finds is mounted somewhere, holds no named hierarchy's
// name or mount option as a controller, and is one per superblock.
func FuzzParseMountinfo(f *testing.F) {
	f.Add("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
		"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
		"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
	f.Add("29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")
	f.Add("50 40 0:40 /docker/3f2a /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n" +
		"51 40 0:40 /docker/3f2a /mnt/with\\040space rw - cgroup cgroup rw,pids\n")
	f.Fuzz(func(t *testing.T, s string) {
		hs, err := parseMountinfo(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, h := range hs {
			for _, c := range h.Controllers {
				if c == "" || strings.Contains(c, "=") || c == "rw" || c == "ro" {
					t.Fatalf("hierarchy %+v holds controller %q", h, c)
				}
			}
			if h.Mount == "" {
				t.Fatalf("hierarchy %+v has no mount point", h)
			}
		}
	})
}
