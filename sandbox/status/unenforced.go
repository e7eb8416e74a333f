package status

import (
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/internal/netnslist"
	"github.com/doorman-net/doorman/sandbox"
)

// LabelUnenforced is the label ls --all gives a network namespace no
// sandbox accounts for.
const LabelUnenforced = "unenforced"

// Unenforced is a network namespace of this host that doorman does not
// enforce, as ls --all reports it; -o json writes it as is, after the
// sandboxes (it has no "key").
type Unenforced struct {
	// ID is a path naming the namespace: a runtime's bind mount of it
	// (/run/netns/cni-...), else its first process's /proc/PID/ns/net.
	ID         string `json:"id"`
	Label      string `json:"label"` // LabelUnenforced
	NetNSInode uint64 `json:"netnsInode"`
	PID        int    `json:"pid"`     // its first process
	Process    string `json:"process"` // that process's name (a pod's pause)
	Processes  int    `json:"processes"`
	Cgroup     string `json:"cgroup,omitempty"`
	PodUID     string `json:"podUID,omitempty"` // the Kubernetes pod the cgroup names
}

// Name is the NAME column of n's row: its first process and pid.
func (n Unenforced) Name() string { return n.Process + "[" + strconv.Itoa(n.PID) + "]" }

// LabelColumn is the LABEL column of n's row, with the pod it belongs to.
func (n Unenforced) LabelColumn() string {
	if n.PodUID != "" {
		return n.Label + " (pod " + n.PodUID + ")"
	}
	return n.Label
}

// Host is what UnenforcedNamespaces asks of the host it runs on: the
// kernel's side, behind an interface so that the decision is tested
// without root (LiveHost is the real one).
type Host interface {
	// Namespaces lists the network namespaces of the host's processes.
	Namespaces() ([]netnslist.Namespace, error)
	// Identity is the nsfs device and inode of the namespace at path.
	Identity(path string) (dev, ino uint64, err error)
	// Enforced reports whether the namespace at path holds doorman's
	// table.
	Enforced(path string) (bool, error)
}

// LiveHost is the Host this process runs on: /proc, stat(2) and nftables.
type LiveHost struct{}

// Namespaces lists the network namespaces of /proc's processes.
func (LiveHost) Namespaces() ([]netnslist.Namespace, error) { return netnslist.List("/proc") }

// Identity stats path.
func (LiveHost) Identity(path string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Dev, st.Ino, nil
}

// Enforced looks for doorman's table in the namespace (enforce.Present).
func (LiveHost) Enforced(path string) (bool, error) { return enforce.Present(path) }

// UnenforcedNamespaces lists the network namespaces of h's processes that
// doorman does not enforce: no sandbox among states is recorded on them
// (a pod passed through is accounted for, and so is a sandbox whose
// workload flushed its table), they hold no doorman table (a sandbox of
// another state directory's), and they are not the host's, which is
// init's and this process's own.
func UnenforcedNamespaces(h Host, states []*sandbox.State) ([]Unenforced, error) {
	type id struct{ dev, ino uint64 }
	known := map[id]bool{}
	for _, path := range []string{"/proc/1/ns/net", "/proc/self/ns/net"} {
		if dev, ino, err := h.Identity(path); err == nil {
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
			dev, ino, _ = h.Identity(s.NetNS)
		}
		known[id{dev, ino}] = true
	}
	all, err := h.Namespaces()
	if err != nil {
		return nil, err
	}
	var out []Unenforced
	for _, n := range all {
		if known[id{n.Dev, n.Ino}] {
			continue
		}
		procPath := fmt.Sprintf("/proc/%d/ns/net", n.PID)
		if present, err := h.Enforced(procPath); err != nil || present {
			continue // gone meanwhile, or enforced from elsewhere
		}
		out = append(out, Unenforced{
			ID: n.Path(), Label: LabelUnenforced, NetNSInode: n.Ino, PID: n.PID, Process: n.Comm,
			Processes: n.Processes, Cgroup: n.Cgroup, PodUID: n.PodUID,
		})
	}
	return out, nil
}
