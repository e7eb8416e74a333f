// Package netnslist lists the network namespaces a host's processes are
// in, from /proc, with what identifies each: its first process (pid,
// name, cgroup, and the Kubernetes pod uid that cgroup names) and where a
// runtime bind-mounted it. The CLI's `doorman ls --all` uses it to show
// the namespaces doorman does not enforce, such as the pods a node ran
// before doorman joined its CNI configuration, which the runtime will not
// set up again until they are recreated.
//
// It reads each process's ns/net (stat: the namespace's nsfs device and
// inode), comm and cgroup, and this mount namespace's mountinfo for nsfs
// mounts, and nothing else: no namespace is entered. Processes that exit
// while it reads are skipped.
package netnslist

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Namespace is one network namespace and what identifies it.
type Namespace struct {
	// Dev and Ino are the namespace's nsfs device and inode: its
	// identity, as sandbox states record it.
	Dev, Ino uint64
	// PID is the lowest pid in the namespace, and Comm its name (a pod's
	// pause process, a container's init).
	PID  int
	Comm string
	// Cgroup is PID's cgroup: its cgroup v2 path, else the first
	// hierarchy's.
	Cgroup string
	// PodUID is the Kubernetes pod uid Cgroup names ("pod<uid>" under
	// the kubelet's cgroupfs driver, "pod<uid with _>.slice" under its
	// systemd driver), if any.
	PodUID string
	// Processes counts the processes in the namespace.
	Processes int
	// Mounts are where the namespace is bind-mounted in the caller's
	// mount namespace (/run/netns/NAME, a runtime's state directory).
	Mounts []string
}

// Path is a path that names the namespace: its first bind mount, else
// PID's /proc/PID/ns/net.
func (n Namespace) Path() string {
	if len(n.Mounts) > 0 {
		return n.Mounts[0]
	}
	return fmt.Sprintf("/proc/%d/ns/net", n.PID)
}

// List returns the network namespaces of the processes under proc (the
// host's: "/proc"), ordered by their first pid.
func List(proc string) ([]Namespace, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	type key struct{ dev, ino uint64 }
	byNS := map[key]*Namespace{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join(proc, e.Name(), "ns", "net"), &st) != nil {
			continue // exited, or a kernel thread's we cannot read
		}
		k := key{st.Dev, st.Ino}
		if n := byNS[k]; n != nil {
			n.Processes++
			if pid < n.PID {
				n.PID = pid
			}
			continue
		}
		byNS[k] = &Namespace{Dev: st.Dev, Ino: st.Ino, PID: pid, Processes: 1}
	}
	mounts := nsfsMounts(filepath.Join(proc, "self", "mountinfo"))
	out := make([]Namespace, 0, len(byNS))
	for _, n := range byNS {
		dir := filepath.Join(proc, strconv.Itoa(n.PID))
		if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
			n.Comm = strings.TrimSpace(string(comm))
		}
		if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
			n.Cgroup = cgroupPath(string(cg))
			n.PodUID = PodUID(n.Cgroup)
		}
		n.Mounts = mounts[n.Ino]
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// cgroupPath picks a process's cgroup from /proc/PID/cgroup, the most
// telling one where the hierarchies differ (a host with cgroup v1
// controllers beside an unused v2 hierarchy, whose path is "/"): the
// first path naming a pod, else the v2 path ("0::PATH") unless it is the
// root, else the first other path that is not the root, else the root.
func cgroupPath(data string) string {
	var v2, other string
	for _, line := range strings.Split(strings.TrimSpace(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		path := f[2]
		switch {
		case PodUID(path) != "":
			return path
		case f[0] == "0" && f[1] == "":
			v2 = path
		case other == "" && path != "/":
			other = path
		}
	}
	switch {
	case v2 != "" && v2 != "/":
		return v2
	case other != "":
		return other
	}
	return v2
}

// podUIDPattern is a pod uid in a cgroup path, dashes or (systemd
// driver) underscores between its groups.
var podUIDPattern = regexp.MustCompile(`pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})`)

// PodUID is the Kubernetes pod uid that a cgroup path names, "" if none:
// the kubelet puts each pod's containers below "pod<uid>" (cgroupfs) or
// "kubepods-<class>-pod<uid with _>.slice" (systemd).
func PodUID(cgroup string) string {
	m := podUIDPattern.FindAllStringSubmatch(cgroup, -1)
	if len(m) == 0 {
		return ""
	}
	return strings.ReplaceAll(m[len(m)-1][1], "_", "-")
}

// nsfsMounts maps the inodes of the network namespaces bind-mounted in
// the mount namespace whose mountinfo is at path to their mount points.
func nsfsMounts(path string) map[uint64][]string {
	out := map[uint64][]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPER
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "nsfs ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		ino, ok := strings.CutPrefix(f[3], "net:[")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64)
		if err != nil {
			continue
		}
		out[n] = append(out[n], unescape(f[4]))
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
