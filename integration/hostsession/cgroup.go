package hostsession

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Mount is a mount at or below /sys/fs/cgroup (a line of
// /proc/self/mountinfo, the fields used here).
type Mount struct {
	Mountpoint string
	FSType     string // cgroup (v1), cgroup2 or tmpfs
	SuperOpts  string // for v1: the hierarchy's controllers among them
}

// CgroupMounts lists the mounts at and below /sys/fs/cgroup of this
// process's mount namespace, in mount order.
func CgroupMounts() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("list the cgroup mounts: %w", err)
	}
	var out []Mount
	for _, line := range strings.Split(string(data), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		if mp := f[4]; mp == "/sys/fs/cgroup" || strings.HasPrefix(mp, "/sys/fs/cgroup/") {
			out = append(out, Mount{Mountpoint: mp, FSType: g[0], SuperOpts: g[2]})
		}
	}
	return out, nil
}

// CgroupMountScript returns shell commands that mount, under a fresh
// /sys/fs/cgroup, the cgroup hierarchies this machine has: cgroup2 alone on
// a unified host; on a legacy or hybrid host a tmpfs with each v1 hierarchy
// (same controllers, so the same hierarchy) but not the v2 "unified" one:
// crun refuses hybrid mode as soon as cgroup2 holds a controller (here
// hugetlb), and runs fine on the v1 controllers alone.
func CgroupMountScript() (string, error) {
	mounts, err := CgroupMounts()
	if err != nil {
		return "", err
	}
	var root *Mount
	for i := range mounts {
		if mounts[i].Mountpoint == "/sys/fs/cgroup" {
			root = &mounts[i] // the last one mounted there is the visible one
		}
	}
	if root == nil {
		return "", errors.New("nothing is mounted at /sys/fs/cgroup: the OCI runtime needs a cgroup hierarchy")
	}
	var b strings.Builder
	switch root.FSType {
	case "cgroup2":
		b.WriteString("mount -t cgroup2 cgroup2 /sys/fs/cgroup\n")
	case "tmpfs":
		b.WriteString("mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup\n")
		for _, m := range mounts {
			if m.FSType != "cgroup" {
				continue
			}
			var opts []string
			for _, o := range strings.Split(m.SuperOpts, ",") {
				if o != "rw" && o != "ro" && !strings.HasPrefix(o, "release_agent=") {
					opts = append(opts, o)
				}
			}
			fmt.Fprintf(&b, "mkdir -p %s\nmount -t cgroup -o %s cgroup %s\n",
				ShellQuote(m.Mountpoint), ShellQuote(strings.Join(opts, ",")), ShellQuote(m.Mountpoint))
		}
	default:
		return "", fmt.Errorf("/sys/fs/cgroup is a %s, neither cgroup2 nor a tmpfs of v1 hierarchies", root.FSType)
	}
	return b.String(), nil
}

// CgroupDirs is cgroup path (such as /kubepods) in every hierarchy of
// this machine: one directory per v1 hierarchy, or the one of cgroup2.
func CgroupDirs(path string) ([]string, error) {
	mounts, err := CgroupMounts()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			dirs = append(dirs, filepath.Join(m.Mountpoint, path))
		}
	}
	return dirs, nil
}

// RemoveCgroupTree removes the cgroup dir and those below it, deepest
// first. Cgroup directories hold only virtual files, so rmdir is all it
// takes; a cgroup that still holds a process is an error.
func RemoveCgroupTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, d := range ents {
		if d.IsDir() {
			if err := RemoveCgroupTree(filepath.Join(dir, d.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// RemoveCgroupParent removes cgroup parent (and the empty cgroups below
// it) from every hierarchy of this machine, retrying for up to 5 s while
// the last processes in it exit.
func RemoveCgroupParent(parent string) error {
	dirs, err := CgroupDirs(parent)
	if err != nil {
		return err
	}
	var errs []error
	for _, top := range dirs {
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err = RemoveCgroupTree(top); err == nil || time.Now().After(deadline) {
				break
			}
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
