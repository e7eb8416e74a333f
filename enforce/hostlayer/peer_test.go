package hostlayer

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFindHostPeers(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt, sbx, other, empty := newTestNS(t, "hprt"), newTestNS(t, "hpsbx"), newTestNS(t, "hpoth"), newTestNS(t, "hpemp")
	rt.ip(t, "link add h1 type veth peer name eth1 netns "+sbx.name)
	rt.ip(t, "link add h0 type veth peer name eth0 netns "+sbx.name)
	other.ip(t, "link add x0 type veth peer name eth2 netns "+sbx.name)
	sbx.ip(t, "link add i0 type veth peer name i1")
	rt.ip(t, "link add r0 type veth peer name r1")

	for _, tc := range []struct {
		sandbox, runtime *testNS
		want             []string
	}{
		{sbx, rt, []string{"h0", "h1"}},
		{sbx, other, []string{"x0"}},
		{other, rt, nil},
		{empty, rt, nil},
		{rt, rt, nil},
	} {
		got, err := FindHostPeers(tc.sandbox.path, tc.runtime.path)
		switch {
		case tc.want == nil && !errors.Is(err, ErrNoHostPeer):
			t.Errorf("FindHostPeers(%s, %s) = %v, %v; want ErrNoHostPeer", tc.sandbox.name, tc.runtime.name, got, err)
		case tc.want != nil && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("FindHostPeers(%s, %s) = %v, %v; want %v", tc.sandbox.name, tc.runtime.name, got, err, tc.want)
		}
	}
	if _, err := FindHostPeers("/nonexistent/netns", rt.path); err == nil || errors.Is(err, ErrNoHostPeer) {
		t.Errorf("FindHostPeers of a missing namespace: %v, want an error other than ErrNoHostPeer", err)
	}
}

func TestWaitHostPeers(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt, sbx := newTestNS(t, "hwrt"), newTestNS(t, "hwsbx")
	added := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // as a runtime that adds the interface after the hook ran
		added <- exec.Command("ip", "-n", rt.name, "link", "add", "h0", "type", "veth", "peer", "name", "eth0", "netns", sbx.name).Run()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := WaitHostPeers(ctx, sbx.path, rt.path)
	if err := <-added; err != nil {
		t.Fatalf("add the veth: %v", err)
	}
	if err != nil || !slices.Equal(got, []string{"h0"}) {
		t.Errorf("WaitHostPeers = %v, %v; want [h0]", got, err)
	}

	empty := newTestNS(t, "hwemp")
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	got, err = WaitHostPeers(ctx, empty.path, rt.path)
	if !errors.Is(err, ErrNoHostPeer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitHostPeers on a sandbox that gets no veth = %v, %v; want ErrNoHostPeer and DeadlineExceeded", got, err)
	}
}

// TestApplyFindsHostPeers applies a spec that names only the sandbox's
// namespace, with two bridge ports.
func TestApplyFindsHostPeers(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt, sbx := newTestNS(t, "hart"), newTestNS(t, "hasbx")
	rt.ip(t, "link add br0 type bridge")
	for _, p := range []string{"h0", "h1"} {
		rt.ip(t, "link add "+p+" type veth peer name e"+p+" netns "+sbx.name)
		rt.ip(t, "link set "+p+" master br0")
	}
	s := Spec{Key: "x", SandboxNetNS: sbx.path}
	if _, err := Apply(rt.path, s); err != nil {
		t.Fatal(err)
	}
	if err := Check(rt.path, s); err != nil {
		t.Error(err)
	}
	explicit := s
	explicit.HostIfaces = []string{"h1", "h0"}
	if err := Check(rt.path, explicit); err != nil {
		t.Errorf("Check naming the interfaces: %v", err)
	}
	explicit.HostIfaces = []string{"h0"}
	if err := Check(rt.path, explicit); err == nil {
		t.Errorf("Check naming one of the two interfaces: nil, want an error")
	}
}

// TestApplyTakesOverABridgePort moves a bridge port from one sandbox's
// rules to another's while br_netfilter is switched on in between, so
// that the old owner's element in unfiltered-ip must go too.
func TestApplyTakesOverABridgePort(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt, sbx := newTestNS(t, "hbrt"), newTestNS(t, "hbsbx")
	rt.ip(t, "link add br0 type bridge")
	rt.ip(t, "link add h0 type veth peer name eth0 netns "+sbx.name)
	rt.ip(t, "link set h0 master br0")
	rt.sysctl(t, "net.bridge.bridge-nf-call-iptables", "0")
	x := Spec{Key: "x", SandboxNetNS: sbx.path}
	if _, err := Apply(rt.path, x); err != nil {
		t.Fatal(err)
	}
	if dump := ruleset(t, rt.path); !strings.Contains(dump, "set unfiltered-ip: [{") || strings.Contains(dump, "set unfiltered-ip6: [{") {
		t.Errorf("with br_netfilter off for IPv4 only, want the port in unfiltered-ip only:\n%s", dump)
	}
	rt.sysctl(t, "net.bridge.bridge-nf-call-iptables", "1")
	y := Spec{Key: "y", SandboxNetNS: sbx.path}
	if _, err := Apply(rt.path, y); err != nil {
		t.Fatal(err)
	}
	if err := Check(rt.path, y); err != nil {
		t.Errorf("y, which took the port over: %v", err)
	}
	if err := Check(rt.path, x); err == nil {
		t.Errorf("Check of x, whose port y took over: nil, want an error")
	}
	if err := Remove(rt.path, "x"); err != nil {
		t.Fatal(err)
	}
	if err := Check(rt.path, y); err != nil {
		t.Errorf("y after removing x: %v", err)
	}
	if err := Remove(rt.path, "y"); err != nil {
		t.Fatal(err)
	}
	if tables := tableNames(t, rt.path); len(tables) != 0 {
		t.Errorf("tables left after removing every sandbox: %v", tables)
	}
}

// TestBridgeNetfilterOfOneBridge: br_netfilter off for the namespace but
// on for the sandbox's bridge, through the bridge's own options.
func TestBridgeNetfilterOfOneBridge(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt, sbx := newTestNS(t, "hnrt"), newTestNS(t, "hnsbx")
	rt.sysctl(t, "net.bridge.bridge-nf-call-iptables", "0")
	rt.sysctl(t, "net.bridge.bridge-nf-call-ip6tables", "0")
	rt.ip(t, "link add br0 type bridge nf_call_iptables 1 nf_call_ip6tables 1")
	rt.ip(t, "link add h0 type veth peer name eth0 netns "+sbx.name)
	rt.ip(t, "link set h0 master br0")
	s := Spec{Key: "x", SandboxNetNS: sbx.path}
	if _, err := Apply(rt.path, s); err != nil {
		t.Fatal(err)
	}
	if dump := ruleset(t, rt.path); !strings.Contains(dump, "set unfiltered-ip: []") || !strings.Contains(dump, "set unfiltered-ip6: []") {
		t.Errorf("with br_netfilter on for the bridge, want no unfiltered port:\n%s", dump)
	}
	rt.ip(t, "link set br0 type bridge nf_call_ip6tables 0")
	if err := Check(rt.path, s); err == nil || !strings.Contains(err.Error(), "unfiltered-ip6") {
		t.Errorf("Check after br_netfilter was switched off for IPv6: %v, want an error about unfiltered-ip6", err)
	}
}

// TestApplyRefusesALiveNeighboursMAC: a sandbox that took its neighbour's
// MAC before its layer was applied must not take the neighbour's rules
// over; once the neighbour's port is gone, its element is a leftover.
func TestApplyRefusesALiveNeighboursMAC(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt, s1, s2 := newTestNS(t, "hmrt"), newTestNS(t, "hms1"), newTestNS(t, "hms2")
	rt.ip(t, "link add br0 type bridge")
	for _, p := range []struct {
		port string
		sbx  *testNS
	}{{"h1", s1}, {"h2", s2}} {
		rt.ip(t, "link add "+p.port+" type veth peer name eth0 netns "+p.sbx.name)
		rt.ip(t, "link set "+p.port+" master br0")
	}
	x := Spec{Key: "x", SandboxNetNS: s1.path}
	if _, err := Apply(rt.path, x); err != nil {
		t.Fatal(err)
	}
	s2.ip(t, "link set eth0 address "+s1.link(t, "eth0").HardwareAddr.String())
	y := Spec{Key: "y", SandboxNetNS: s2.path}
	if _, err := Apply(rt.path, y); err == nil || !strings.Contains(err.Error(), `already pinned on bridge "br0" for the sandbox of chain "sbx-x", whose port "h1" still exists`) {
		t.Errorf("Apply with the MAC of a live neighbour: %v, want a refusal", err)
	}
	if err := Check(rt.path, x); err != nil {
		t.Errorf("x after the refused Apply: %v", err)
	}
	rt.ip(t, "link del h1")
	if _, err := Apply(rt.path, y); err != nil {
		t.Errorf("Apply with the MAC of a neighbour that is gone: %v", err)
	}
	if err := Check(rt.path, y); err != nil {
		t.Error(err)
	}
}
