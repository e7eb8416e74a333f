package runner

import (
	"net"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// inNetns runs fn on a thread in n (netlink and nftables calls made there
// act on n).
func inNetns(t *testing.T, n ns.NetNS, fn func() error) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return fn() }); err != nil {
		t.Fatal(err)
	}
}

func addLink(t *testing.T, l netlink.Link) netlink.Link {
	t.Helper()
	if err := netlink.LinkAdd(l); err != nil {
		t.Fatalf("add %s: %v", l.Attrs().Name, err)
	}
	names := []string{l.Attrs().Name}
	if v, ok := l.(*netlink.Veth); ok {
		names = append(names, v.PeerName)
	}
	for _, name := range names {
		link, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
	}
	got, err := netlink.LinkByName(l.Attrs().Name)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// veth is a veth pair (the kernel here has no dummy links).
func veth(name string) *netlink.Veth {
	return &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
}

func TestRemoveIdleBridge(t *testing.T) {
	_, n := testNetns(t)
	inNetns(t, n, func() error {
		// Not made by a run (no alias): never removed.
		addLink(t, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-user"}})
		if removed, err := removeIdleBridge("br-user"); removed || err != nil {
			t.Errorf("a bridge without the run network's mark: removed %v, %v", removed, err)
		}
		// Made by a run, with a port: kept; without: removed.
		addLink(t, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-run"}})
		if err := markBridge("br-run"); err != nil {
			t.Fatal(err)
		}
		port := addLink(t, veth("port0"))
		br, _ := netlink.LinkByName("br-run")
		if err := netlink.LinkSetMaster(port, br); err != nil {
			t.Fatal(err)
		}
		if removed, err := removeIdleBridge("br-run"); removed || err != nil {
			t.Errorf("a marked bridge with a port: removed %v, %v", removed, err)
		}
		netlink.LinkDel(port)
		if removed, err := removeIdleBridge("br-run"); !removed || err != nil {
			t.Errorf("an idle marked bridge: removed %v, %v", removed, err)
		}
		if _, err := netlink.LinkByName("br-run"); err == nil {
			t.Error("br-run still there")
		}
		if removed, err := removeIdleBridge("br-run"); removed || err != nil {
			t.Errorf("a missing bridge: removed %v, %v", removed, err)
		}
		return nil
	})
}

func TestCheckRoutes(t *testing.T) {
	_, n := testNetns(t)
	inNetns(t, n, func() error {
		eth := addLink(t, veth("uplink0"))
		route := func(cidr string) {
			_, dst, _ := net.ParseCIDR(cidr)
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: dst}); err != nil {
				t.Fatalf("route %s: %v", cidr, err)
			}
		}
		route("10.0.0.0/8")   // wider than the subnet: no conflict
		route("0.0.0.0/0")    // the default route: no conflict
		route("10.50.0.0/25") // inside 10.50.0.0/24: conflict
		if err := checkRoutes("br-none", prefixes("10.213.253.0/24")); err != nil {
			t.Errorf("a subnet only covered by wider routes: %v", err)
		}
		err := checkRoutes("br-none", prefixes("10.50.0.0/24"))
		if err == nil || !strings.Contains(err.Error(), "10.50.0.0/25 via uplink0") {
			t.Errorf("a subnet holding another link's route: want an error naming it, got %v", err)
		}
		// The run bridge's own route is no conflict.
		br := addLink(t, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-run"}})
		_, own, _ := net.ParseCIDR("10.60.0.0/24")
		if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.60.0.1"), Mask: own.Mask}}); err != nil {
			t.Fatal(err)
		}
		if err := checkRoutes("br-run", prefixes("10.60.0.0/24")); err != nil {
			t.Errorf("the bridge's own subnet: %v", err)
		}
		if err := checkRoutes("br-other", prefixes("10.60.0.0/24")); err == nil {
			t.Error("another bridge's subnet: want an error")
		}
		return nil
	})
}

func TestMasq(t *testing.T) {
	_, n := testNetns(t)
	inNetns(t, n, func() error {
		subnets := prefixes("10.213.253.0/24", "fd00:213::/64")
		for range 2 { // replacing is idempotent
			if err := applyMasq("br-run", subnets); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := masqPresent("br-run"); !ok || err != nil {
			t.Fatalf("masquerade table after applyMasq: present %v, %v", ok, err)
		}
		for range 2 {
			if err := removeMasq("br-run"); err != nil {
				t.Fatalf("removeMasq: %v", err)
			}
		}
		if ok, err := masqPresent("br-run"); ok || err != nil {
			t.Fatalf("masquerade table after removeMasq: present %v, %v", ok, err)
		}
		return nil
	})
}
