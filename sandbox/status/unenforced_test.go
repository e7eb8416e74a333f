package status

import (
	"errors"
	"reflect"
	"testing"

	"github.com/doorman-net/doorman/internal/netnslist"
	"github.com/doorman-net/doorman/sandbox"
)

// fakeHost is a Host of namespaces given by inode (device 1), with
// identities by path and doorman tables by /proc path.
type fakeHost struct {
	namespaces []netnslist.Namespace
	ids        map[string]uint64
	tables     map[string]bool
	gone       map[string]bool
}

func (h fakeHost) Namespaces() ([]netnslist.Namespace, error) { return h.namespaces, nil }

func (h fakeHost) Identity(path string) (uint64, uint64, error) {
	if ino, ok := h.ids[path]; ok {
		return 1, ino, nil
	}
	return 0, 0, errors.New("no such file")
}

func (h fakeHost) Enforced(path string) (bool, error) {
	if h.gone[path] {
		return false, errors.New("no such process")
	}
	return h.tables[path], nil
}

// Only the namespaces no sandbox, host or doorman table accounts for are
// listed; a state whose namespace is gone accounts for nothing.
func TestUnenforcedNamespaces(t *testing.T) {
	ns := func(ino uint64, pid int, comm string) netnslist.Namespace {
		return netnslist.Namespace{Dev: 1, Ino: ino, PID: pid, Comm: comm, Processes: 1}
	}
	h := fakeHost{
		namespaces: []netnslist.Namespace{
			ns(100, 1, "init"),      // the host's
			ns(101, 200, "pause"),   // a sandbox recorded by an older doorman (no inode)
			ns(102, 300, "sleep"),   // held by nothing
			ns(103, 400, "nginx"),   // a doorman table of another state directory
			ns(104, 500, "exited"),  // gone while listed
			ns(105, 600, "reused"),  // the inode a gone sandbox recorded, now another's
			ns(106, 700, "current"), // a sandbox recorded with its inode, still there
		},
		ids:    map[string]uint64{"/proc/1/ns/net": 100, "/proc/self/ns/net": 100, "/run/netns/old": 101},
		tables: map[string]bool{"/proc/400/ns/net": true},
		gone:   map[string]bool{"/proc/500/ns/net": true},
	}
	states := []*sandbox.State{
		{Key: "old-eth0", NetNS: "/run/netns/old"},
		{Key: "gone-eth0", NetNS: "/nonexistent/netns", NetNSDev: 1, NetNSIno: 105},
	}
	got, err := UnenforcedNamespaces(h, states)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, u := range got {
		pids = append(pids, u.PID)
		if u.Label != LabelUnenforced {
			t.Errorf("%+v: label %q", u, u.Label)
		}
	}
	// 700 is listed: its state is not among states.
	if want := []int{300, 600, 700}; !reflect.DeepEqual(pids, want) {
		t.Errorf("unenforced namespaces' first processes %v, want %v", pids, want)
	}
	if u := got[0]; u.ID != "/proc/300/ns/net" || u.Name() != "sleep[300]" || u.LabelColumn() != "unenforced" || u.NetNSInode != 102 {
		t.Errorf("row of pid 300: %+v (%s, %s)", u, u.Name(), u.LabelColumn())
	}
	u := Unenforced{Label: LabelUnenforced, PodUID: "0f3c"}
	if got := u.LabelColumn(); got != "unenforced (pod 0f3c)" {
		t.Errorf("label of a pod's namespace: %q", got)
	}
}
