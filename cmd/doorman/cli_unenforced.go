package main

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/internal/netnslist"
	"github.com/doorman-net/doorman/sandbox"
)

// labelUnenforced is the label ls --all gives a network namespace no
// sandbox accounts for.
const labelUnenforced = "unenforced"

// unenforcedInfo is a network namespace of this host that doorman does
// not enforce, as ls --all reports it; -o json writes it as is, after the
// sandboxes (it has no "key").
type unenforcedInfo struct {
	// ID is a path naming the namespace: a runtime's bind mount of it
	// (/run/netns/cni-...), else its first process's /proc/PID/ns/net.
	ID         string `json:"id"`
	Label      string `json:"label"` // labelUnenforced
	NetNSInode uint64 `json:"netnsInode"`
	PID        int    `json:"pid"`     // its first process
	Process    string `json:"process"` // that process's name (a pod's pause)
	Processes  int    `json:"processes"`
	Cgroup     string `json:"cgroup,omitempty"`
	PodUID     string `json:"podUID,omitempty"` // the Kubernetes pod the cgroup names
}

// name is the NAME column of n's row: its first process and pid.
func (n unenforcedInfo) name() string { return n.Process + "[" + strconv.Itoa(n.PID) + "]" }

// label is the LABEL column of n's row, with the pod it belongs to.
func (n unenforcedInfo) label() string {
	if n.PodUID != "" {
		return n.Label + " (pod " + n.PodUID + ")"
	}
	return n.Label
}

// unenforcedNamespaces lists the network namespaces of this host's
// processes that doorman does not enforce: no sandbox among states is
// recorded on them (a pod passed through is accounted for, and so is a
// sandbox whose workload flushed its table), they hold no doorman table
// (a sandbox of another state directory's), and they are not the host's,
// which is init's and this process's own.
func unenforcedNamespaces(states []*sandbox.State) ([]unenforcedInfo, error) {
	type id struct{ dev, ino uint64 }
	known := map[id]bool{}
	for _, path := range []string{"/proc/1/ns/net", "/proc/self/ns/net"} {
		if dev, ino, err := nsIdentity(path); err == nil {
			known[id{dev, ino}] = true
		}
	}
	for _, s := range states {
		// Only while its path still names it: a namespace that is gone
		// may have left its inode to a new one.
		if !s.NetNSCurrent() {
			continue
		}
		dev, ino := s.NetNSDev, s.NetNSIno
		if ino == 0 { // recorded by an older doorman: as its path names now
			dev, ino, _ = nsIdentity(s.NetNS)
		}
		known[id{dev, ino}] = true
	}
	all, err := netnslist.List("/proc")
	if err != nil {
		return nil, err
	}
	var out []unenforcedInfo
	for _, n := range all {
		if known[id{n.Dev, n.Ino}] {
			continue
		}
		procPath := fmt.Sprintf("/proc/%d/ns/net", n.PID)
		if present, err := enforce.Present(procPath); err != nil || present {
			continue // gone meanwhile, or enforced from elsewhere
		}
		out = append(out, unenforcedInfo{
			ID: n.Path(), Label: labelUnenforced, NetNSInode: n.Ino, PID: n.PID, Process: n.Comm,
			Processes: n.Processes, Cgroup: n.Cgroup, PodUID: n.PodUID,
		})
	}
	return out, nil
}

// nsIdentity is the nsfs device and inode of the namespace at path.
func nsIdentity(path string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Dev, st.Ino, nil
}
