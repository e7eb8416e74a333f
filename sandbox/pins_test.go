package sandbox

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/spec"
)

func ip(t *testing.T, nsPath string, args ...string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"-n", filepath.Base(nsPath)}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func macOf(t *testing.T, nsPath, dev string) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		ifc, err := net.InterfaceByName(dev)
		if err == nil {
			mac = ifc.HardwareAddr
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// TestPinsAreRecorded: the first Enforce records the identity the
// host-side layer pins (the IPAM addresses, not others the interface
// has); a second Enforce (a CNI ADD again) after the workload changed its
// MAC and addresses pins the recorded one, and Check reports the change.
// A state of a release before pins gets them at its next Enforce.
func TestPinsAreRecorded(t *testing.T) {
	rt, sbx := newNetNS(t, "pinrt"), newNetNS(t, "pinsbx")
	ip(t, rt, "link", "add", "br0", "type", "bridge")
	ip(t, rt, "link", "add", "h0", "type", "veth", "peer", "name", "eth0", "netns", filepath.Base(sbx))
	ip(t, rt, "link", "set", "h0", "master", "br0")
	ip(t, rt, "link", "set", "h0", "up")
	ip(t, sbx, "addr", "add", "198.51.100.10/24", "dev", "eth0")
	ip(t, sbx, "addr", "add", "198.51.100.13/24", "dev", "eth0") // not IPAM's
	ip(t, sbx, "addr", "add", "2001:db8:2::10/64", "dev", "eth0", "nodad")
	mac := macOf(t, sbx, "eth0")
	ipam := []netip.Addr{netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("2001:db8:2::10")}
	p, err := conf.NewPolicy(conf.ModeNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	r := Request{Attachment: Attachment{Key: "ctr1-eth0", ID: "ctr1", Runtime: "cni", IfName: "eth0", NetNS: sbx, Addrs: ipam},
		Spec: spec.Spec{Policy: p, LogDir: t.TempDir(), HostLayer: true}, StateDir: stateDir}
	// The runtime's namespace is the calling thread's.
	inRuntime := func(f func() error) {
		t.Helper()
		if err := ns.WithNetNSPath(rt, func(ns.NetNS) error { return f() }); err != nil {
			t.Fatal(err)
		}
	}
	var s *State
	inRuntime(func() (err error) { s, err = Enforce(r); return err })
	t.Cleanup(func() { ns.WithNetNSPath(rt, func(ns.NetNS) error { return Teardown(stateDir, r.Key) }) })
	if len(s.Pins) != 1 {
		t.Fatalf("pins = %+v, want one", s.Pins)
	}
	first := s.Pins[0]
	if first.HostIface != "h0" || first.SandboxIface != "eth0" || first.MAC != mac.String() {
		t.Errorf("pin = %+v, want h0 / eth0 with mac %s", first, mac)
	}
	for _, a := range ipam {
		if !slices.Contains(first.Addrs, a) {
			t.Errorf("pinned addresses %v lack IPAM's %s", first.Addrs, a)
		}
	}
	if slices.Contains(first.Addrs, netip.MustParseAddr("198.51.100.13")) {
		t.Errorf("pinned addresses %v hold 198.51.100.13, which IPAM did not assign", first.Addrs)
	}

	ip(t, sbx, "link", "set", "eth0", "address", "02:00:00:00:00:77")
	ip(t, sbx, "addr", "add", "198.51.100.14/24", "dev", "eth0")
	inRuntime(func() (err error) { s, err = Enforce(r); return err })
	if len(s.Pins) != 1 || !pinEqual(s.Pins[0], first) {
		t.Errorf("pins after the second Enforce: %+v, want the first %+v", s.Pins, first)
	}
	if loaded, err := Load(stateDir, r.Key); err != nil || len(loaded.Pins) != 1 || !pinEqual(loaded.Pins[0], first) {
		t.Errorf("recorded pins: %+v (%v), want %+v", loaded, err, first)
	}
	inRuntime(func() error {
		if err := Check(stateDir, r.Key); err == nil || !strings.Contains(err.Error(), "the layer pins "+mac.String()) {
			t.Errorf("Check after the workload changed its mac: %v, want an error about the pinned mac", err)
		}
		return nil
	})

	// A state from before pins were recorded: read as it was, it gets
	// the interface's identity at the next Enforce.
	ip(t, sbx, "link", "set", "eth0", "address", mac.String())
	path := filepath.Join(stateDir, r.Key, stateFile)
	var raw map[string]any
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &raw)
	}
	if err != nil {
		t.Fatal(err)
	}
	delete(raw, "pins")
	if data, err = json.Marshal(raw); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	inRuntime(func() (err error) { s, err = Enforce(r); return err })
	if len(s.Pins) != 1 || s.Pins[0].MAC != mac.String() {
		t.Errorf("pins of an old state after Enforce: %+v, want them read from h0's peer", s.Pins)
	}
	inRuntime(func() error { return Check(stateDir, r.Key) })
}

func pinEqual(a, b Pin) bool {
	return a.HostIface == b.HostIface && a.HostIndex == b.HostIndex && a.SandboxIface == b.SandboxIface &&
		a.MAC == b.MAC && slices.Equal(a.Addrs, b.Addrs)
}
