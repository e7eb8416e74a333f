package integration

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/integration/testnet"
)

// The root namespace's way into a test's fake internet. dockerd lives in
// the root namespace, and so do the proxies its runtime hook starts: their
// upstream connections, and the DNS and ICMP that containers send, must
// reach the fake internet, and nothing else. A veth joins the root
// namespace to testnet's host namespace (which routes on to inet), and the
// root namespace gets routes for exactly the fake internet's two ranges.
//
//	root netns                                 testnet host netns           inet
//	┌─────────────────────────────────┐      ┌──────────────────────┐     ┌────────┐
//	│ dockerd, containerd, proxies    │      │ dmr<id>h             │     │servers │
//	│ dmr<id> 198.51.100.130/30       ├──────┤   198.51.100.129/30  ├─────┤203.0.  │
//	│         2001:db8:3::2/64        │ veth │   2001:db8:3::1/64   │     │113.0/24│
//	│ 203.0.113.0/24 via .129         │      │ routes to the docker │     └────────┘
//	│ 2001:db8:100::/64 via 3::1      │      │ subnets via .130     │
//	│ bridges: containers' subnets    │      └──────────────────────┘
//	└─────────────────────────────────┘
//
// Containers' addresses are not translated (dockerd runs with
// --iptables=false and leaves the root namespace's firewall alone), so
// host routes their subnets back to the root namespace. All of it sits in
// 198.51.100.128/25, the part of testnet's address plan kept free for the
// caller; inet already routes 198.51.100.0/24 to host.
var (
	rootLinkHost4  = netip.MustParsePrefix("198.51.100.129/30")
	rootLinkRoot4  = netip.MustParsePrefix("198.51.100.130/30")
	rootLinkHost6  = netip.MustParsePrefix("2001:db8:3::1/64")
	rootLinkRoot6  = netip.MustParsePrefix("2001:db8:3::2/64")
	fakeInternet4  = netip.MustParsePrefix("203.0.113.0/24")
	fakeInternet6  = netip.MustParsePrefix("2001:db8:100::/64")
	dockerBridge4  = netip.MustParsePrefix("198.51.100.161/27") // dockerd's default bridge, its gateway
	dockerUserNet4 = netip.MustParsePrefix("198.51.100.192/27") // a user-defined network
	dockerUserGw4  = netip.MustParseAddr("198.51.100.193")
)

// linkRootToNet wires the root namespace to n as drawn above, routing
// containerNets (the subnets of bridges in the root namespace) back from
// host. It enables IPv4 forwarding in the root namespace if it is off (the
// containers' DNS is forwarded there) and restores it at cleanup, where the
// link and with it every route through it go away. It fails if the root
// namespace already routes the fake internet's ranges (a Docker test running
// in parallel, or one that crashed): two tests cannot share them.
func linkRootToNet(t *testing.T, n *testnet.Net, id string, containerNets ...netip.Prefix) {
	t.Helper()
	for _, p := range []netip.Prefix{fakeInternet4, fakeInternet6} {
		if dev, ok := rootRouteTo(p); ok {
			t.Fatalf("the root namespace already routes %s (dev %s): another Docker test is running, or one left it behind (ip route del %s)", p, dev, p)
		}
	}
	name := "dmr" + id // the root end; the host end is name+"h"
	acceptRootForwarding(t, name)
	hostNS, err := netns.GetFromPath(n.HostPath())
	if err != nil {
		t.Fatalf("open %s: %v", n.HostPath(), err)
	}
	defer hostNS.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: name},
		PeerName:      name + "h",
		PeerNamespace: netlink.NsFd(int(hostNS)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s in the root namespace: %v", name, err)
	}
	t.Cleanup(func() {
		if link, err := netlink.LinkByName(name); err == nil {
			if err := netlink.LinkDel(link); err != nil {
				t.Errorf("cleanup: delete %s: %v", name, err)
			}
		}
		for _, p := range []netip.Prefix{fakeInternet4, fakeInternet6} {
			if dev, ok := rootRouteTo(p); ok {
				t.Errorf("cleanup: the root namespace still routes %s (dev %s)", p, dev)
			}
		}
	})

	host, err := netlink.NewHandleAt(hostNS)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", n.HostPath(), err)
	}
	defer host.Close()
	if err := setUpLink(host, name+"h", rootLinkHost4, rootLinkHost6); err != nil {
		t.Fatalf("host end of %s: %v", name, err)
	}
	for _, p := range containerNets {
		if err := host.RouteAdd(&netlink.Route{Dst: ipNet(p.Masked()), Gw: rootLinkRoot4.Addr().AsSlice()}); err != nil {
			t.Fatalf("route %s to the root namespace in %s: %v", p, n.HostPath(), err)
		}
	}

	root, err := netlink.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := setUpLink(root, name, rootLinkRoot4, rootLinkRoot6); err != nil {
		t.Fatalf("root end of %s: %v", name, err)
	}
	for _, r := range []*netlink.Route{
		{Dst: ipNet(fakeInternet4), Gw: rootLinkHost4.Addr().AsSlice()},
		{Dst: ipNet(fakeInternet6), Gw: rootLinkHost6.Addr().AsSlice()},
	} {
		if err := root.RouteAdd(r); err != nil {
			t.Fatalf("route %s in the root namespace: %v", r.Dst, err)
		}
	}
	enableRootForwarding(t)
}

// sweepStaleDockerLinks deletes the root namespace's links that a Docker
// test of a process that died left behind (its root end dmr<id> with the
// routes to the fake internet, its bridge dmdk<id>). Called with the
// Docker tests' lock held: every test that makes such links holds that lock
// until its cleanup has removed them, so any found now belong to no one.
func sweepStaleDockerLinks(t *testing.T) {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatalf("list the root namespace's links: %v", err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if !strings.HasPrefix(name, "dmr") && !strings.HasPrefix(name, "dmdk") {
			continue
		}
		err := netlink.LinkDel(l)
		if errors.Is(err, unix.ENODEV) {
			continue // the peer of a veth deleted a moment ago
		}
		if err != nil {
			t.Fatalf("delete %s, left behind by a Docker test that did not finish: %v", name, err)
		}
		t.Logf("deleted %s, left behind by a Docker test that did not finish", name)
	}
}

// acceptRootForwarding lets the packets the root namespace forwards to
// and from link (the test's way into its fake internet) through the base
// chains on its forward hook whose policy is drop, and takes that back at
// cleanup. A system dockerd running with its default --iptables sets the
// policy of table ip filter, chain FORWARD, to drop (through iptables-nft,
// Debian's iptables) and keeps its DOCKER-USER chain for rules like these:
// they go there, through the same iptables binary dockerd uses, so the
// machine's Docker keeps working as before, and they name only the test's
// own link. A dropping chain of another kind (a firewall of nft's own)
// fails the test with what to do, rather than being changed.
func acceptRootForwarding(t *testing.T, link string) {
	t.Helper()
	var c nftables.Conn
	families := map[nftables.TableFamily]string{nftables.TableFamilyIPv4: "iptables", nftables.TableFamilyIPv6: "ip6tables", nftables.TableFamilyINet: ""}
	for family, tool := range families {
		chains, err := c.ListChainsOfTableFamily(family)
		if err != nil {
			continue
		}
		for _, ch := range chains {
			if ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookForward || ch.Policy == nil || *ch.Policy != nftables.ChainPolicyDrop {
				continue
			}
			if tool == "" || ch.Table.Name != "filter" || ch.Name != "FORWARD" {
				t.Fatalf("the root namespace's table %s chain %s drops forwarded packets: the test containers' DNS would be dropped there; "+
					"accept what is forwarded to and from %s* in it, or run the test on a machine without that firewall", ch.Table.Name, ch.Name, link[:3])
			}
			insertIptablesAccept(t, tool, link)
		}
	}
}

// insertIptablesAccept puts "-i link -j ACCEPT" and "-o link -j ACCEPT"
// first in DOCKER-USER (or in FORWARD where there is no DOCKER-USER) with
// tool (iptables or ip6tables), and deletes them at cleanup.
func insertIptablesAccept(t *testing.T, tool, link string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Fatalf("the root namespace's %s FORWARD chain drops forwarded packets, and %s, which would let the test's through, is not installed", tool, tool)
	}
	chain := "DOCKER-USER"
	if exec.Command(tool, "-w", "-n", "-L", chain).Run() != nil {
		chain = "FORWARD"
	}
	for _, dir := range []string{"-i", "-o"} {
		rule := []string{chain, dir, link, "-j", "ACCEPT"}
		if out, err := exec.Command(tool, append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
			t.Fatalf("%s -I %s: %v: %s", tool, strings.Join(rule, " "), err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command(tool, append([]string{"-w", "-D"}, rule...)...).CombinedOutput(); err != nil {
				t.Errorf("cleanup: %s -D %s: %v: %s", tool, strings.Join(rule, " "), err, out)
			}
		})
	}
}

// setUpLink gives a link its addresses (IPv6 without duplicate address
// detection, so usable at once) and sets it up.
func setUpLink(h *netlink.Handle, name string, addrs ...netip.Prefix) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	for _, p := range addrs {
		a := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, a); err != nil {
			return fmt.Errorf("add %s to %s: %w", p, name, err)
		}
	}
	return h.LinkSetUp(link)
}

// ipNet converts p, keeping its address bits, to a *net.IPNet.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// rootRouteTo reports whether the root namespace's main table has a route
// for exactly p, and through which device.
func rootRouteTo(p netip.Prefix) (string, bool) {
	family := netlink.FAMILY_V4
	if p.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	routes, err := netlink.RouteListFiltered(family, &netlink.Route{Dst: ipNet(p)}, netlink.RT_FILTER_DST)
	if err != nil || len(routes) == 0 {
		return "", false
	}
	dev := "?"
	if link, err := netlink.LinkByIndex(routes[0].LinkIndex); err == nil {
		dev = link.Attrs().Name
	}
	return dev, true
}

// ipForwardSysctl is the root namespace's IPv4 forwarding switch.
const ipForwardSysctl = "/proc/sys/net/ipv4/ip_forward"

// enableRootForwarding turns IPv4 forwarding on in the root namespace, as
// dockerd would itself (it runs with --ip-forward=false here so that the
// test, not dockerd, owns the change), and turns it off again at cleanup if
// it was off.
func enableRootForwarding(t *testing.T) {
	t.Helper()
	old, err := os.ReadFile(ipForwardSysctl)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(old)) == "1" {
		return
	}
	if err := os.WriteFile(ipForwardSysctl, []byte("1"), 0o644); err != nil {
		t.Fatalf("enable IPv4 forwarding: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(ipForwardSysctl, old, 0o644); err != nil {
			t.Errorf("cleanup: restore %s: %v", ipForwardSysctl, err)
		}
	})
}

// addRootBridge creates a bridge in the root namespace with address gw
// (whose prefix is the bridge's subnet) for dockerd's --bridge, and
// deletes it at cleanup.
func addRootBridge(t *testing.T, name string, gw netip.Prefix) {
	t.Helper()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatalf("add bridge %s: %v", name, err)
	}
	t.Cleanup(func() { deleteRootLink(t, name) })
	h, err := netlink.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := setUpLink(h, name, gw); err != nil {
		t.Fatalf("bridge %s: %v", name, err)
	}
}

// deleteRootLink deletes a link of the root namespace if it is there.
func deleteRootLink(t *testing.T, name string) {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return
	}
	if err == nil {
		err = netlink.LinkDel(link)
	}
	if err != nil {
		t.Errorf("cleanup: delete %s: %v", name, err)
	}
}
