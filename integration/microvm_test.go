package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/internal/runtimekind"
)

// TestMicroVMRedirect is a microVM sandbox (Kata Containers in its
// tcfilter mode, Firecracker behind the tc-redirect-tap CNI plugin) as
// its networking works, without KVM: the CNI chain wires the pod's
// namespace (its veth eth0), then the "VM" comes in the way those
// runtimes plug theirs: a tap-like link in the pod's namespace whose
// other end is the guest (here a namespace of its own, playing the guest
// kernel), with the container's MAC and address moved to the guest, and
// tc filters that mirror every frame between the tap and eth0 (`tc filter
// add dev eth0 ingress ... action mirred egress redirect dev tap0`, and
// back). The guest's frames never pass the IP hooks of the pod's
// namespace; the host-side layer on eth0's peer redirects its TCP and DNS
// as it does a runc workload's, and doorman tells the kind (microvm).
func TestMicroVMRedirect(t *testing.T) {
	skipUnlessRoot(t)
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("tc is not installed (iproute2)")
	}
	probe, err := buildRuncProbe()
	if err != nil {
		t.Fatal(err)
	}
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"allowedHosts": []string{apiName}}))
	guest := e.net.NewNetns(t, "guest")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(x *testnet.Netns, args ...string) {
		t.Helper()
		if out, err := x.Command(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// The container's identity, which the runtime gives the guest's NIC.
	var mac, addr, gw string
	if err := c.ns.Links(func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		mac = l.Attrs().HardwareAddr.String()
		as, err := h.AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(as) == 0 {
			return err
		}
		addr = as[0].IPNet.String()
		rs, err := h.RouteList(l, netlink.FAMILY_V4)
		for _, r := range rs {
			if r.Gw != nil {
				gw = r.Gw.String()
			}
		}
		return err
	}); err != nil || addr == "" || gw == "" {
		t.Fatalf("the container's eth0: %s %s via %s: %v", mac, addr, gw, err)
	}
	run(c.ns, "ip", "link", "add", "tap0", "type", "veth", "peer", "name", "geth0", "netns", guest.Name())
	run(c.ns, "ip", "addr", "flush", "dev", "eth0")
	run(c.ns, "ip", "link", "set", "tap0", "up")
	for _, dev := range [][2]string{{"eth0", "tap0"}, {"tap0", "eth0"}} {
		run(c.ns, "tc", "qdisc", "add", "dev", dev[0], "ingress")
		run(c.ns, "tc", "filter", "add", "dev", dev[0], "parent", "ffff:", "protocol", "all", "u32", "match", "u8", "0", "0",
			"action", "mirred", "egress", "redirect", "dev", dev[1])
	}
	run(guest, "ip", "link", "set", "geth0", "address", mac)
	run(guest, "ip", "addr", "add", addr, "dev", "geth0")
	run(guest, "ip", "link", "set", "geth0", "up")
	run(guest, "ip", "route", "add", "default", "via", gw)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, caFile, e.net.CAPEM)

	probeIn := func(args ...string) (int, string) {
		out, err := guest.Command(ctx, probe, args...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	if code, out := probeIn("get", "https://"+apiName+"/", "--ca", caFile, "--timeout", "10s"); code != 0 || !strings.HasPrefix(out, "status: 200") {
		t.Fatalf("allowed HTTPS from the guest: exit %d: %s", code, out)
	}
	e.waitDecision(c, decided(apiName, "allow"))
	if code, out := probeIn("get", "https://"+evilName+"/", "--ca", caFile, "--timeout", "5s"); code != 1 || !strings.Contains(out, "lookup "+evilName) {
		t.Errorf("denied name from the guest: want it not to resolve, got exit %d: %s", code, out)
	}
	if code, out := probeIn("get", "https://"+evilName+"/", "--ca", caFile, "--resolve="+evilName+":"+evilAddr4.String(), "--timeout", "5s"); code != 3 {
		t.Errorf("denied HTTPS by address from the guest: want the TLS alert (exit 3), got exit %d: %s", code, out)
	}
	before := e.evil.UDPDatagrams(testnet.PortUDPEcho)
	probeIn("udp", evilAddr4.String()+":"+itoa(testnet.PortUDPEcho), "--send", "x", "--timeout", "2s")
	if n := e.evil.UDPDatagrams(testnet.PortUDPEcho) - before; n != 0 {
		t.Errorf("UDP from the guest reached the fake internet (%d datagrams)", n)
	}
	st := e.state(c)
	st.DetectRuntimeKind()
	if st.RuntimeKind != string(runtimekind.MicroVM) || st.Label != "full" {
		t.Errorf("kind %q, label %q: want microvm, full", st.RuntimeKind, st.Label)
	}
}
