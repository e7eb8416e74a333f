package testnet

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// Interface names of the link between host and the LAN namespace.
const (
	HostLANLink = "to-lan" // host's end
	lanUplink   = "eth0"   // the LAN's end
)

// The host↔LAN link's own addresses: link-local, so that they take nothing
// from the address plan.
var (
	hostLAN4 = netip.MustParsePrefix("169.254.77.1/30")
	lanHost4 = netip.MustParsePrefix("169.254.77.2/30")
	hostLAN6 = netip.MustParsePrefix("fe80::1/64")
	lanHost6 = netip.MustParsePrefix("fe80::2/64")
	cgnat    = netip.MustParsePrefix("100.64.0.0/10")
	// localUseNAT64 is RFC 8215's local-use NAT64 prefix: a LAN host's
	// address in it stands for a NAT64 on the host's path that delivers
	// to the LAN (see AddLANHost).
	localUseNAT64 = netip.MustParsePrefix("64:ff9b:1::/48")
)

// AddLANHost registers a virtual host on the host's LAN: a namespace
// "dm-lan-<id>" (made on the first call) wired to host, where addrs (private
// addresses: RFC 1918, CGNAT 100.64.0.0/10, which holds the metadata
// address 100.100.100.200, and IPv6 ULA fc00::/7, which holds fd00:ec2::254;
// or addresses of the local-use NAT64 prefix 64:ff9b:1::/48, which stand
// for a LAN address behind a NAT64 on the host's path: the host holds them
// itself, so that what is sent to them arrives as a translator would
// deliver it) are put on the loopback device and routed to from host. A Host's servers
// listen on each (see the package comment for the ports). DNS does not
// answer name; a test points names at these addresses with AddRecord,
// which is what a rebinding attacker does.
//
// Everything in host, and every sandbox routed through it, reaches these
// addresses: they stand for the machines of the LAN the runtime's host
// sits on, and its cloud's metadata service, which doorman must keep its
// sandboxes from. Another namespace routed to host (the root namespace of a
// Docker test) reaches them too once it routes LANAddrs there.
func (n *Net) AddLANHost(name string, addrs ...netip.Addr) *Host {
	t := n.t
	t.Helper()
	cname, err := checkHostName(name)
	if err != nil {
		t.Fatalf("testnet: AddLANHost: %v", err)
	}
	if len(addrs) == 0 {
		t.Fatalf("testnet: AddLANHost(%q): needs at least one address", name)
	}
	if err := n.claim(cname, addrs, checkLANAddr); err != nil {
		t.Fatalf("testnet: AddLANHost(%q): %v", name, err)
	}
	lan, err := n.lanNS()
	if err != nil {
		t.Fatalf("testnet: AddLANHost(%q): %v", name, err)
	}
	if err := lan.withLinks(func(h *netlink.Handle) error { return addLoopbackAddrs(h, addrs) }); err != nil {
		t.Fatalf("testnet: AddLANHost(%q): add addresses to %s: %v", name, lan.Name(), err)
	}
	err = n.host.withLinks(func(h *netlink.Handle) error {
		link, err := h.LinkByName(HostLANLink)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			gw := lanHost4.Addr()
			if a.Is6() {
				gw = lanHost6.Addr()
			}
			r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(a, a.BitLen())), Gw: gw.AsSlice()}
			if err := h.RouteAdd(r); err != nil {
				return fmt.Errorf("route %s to the LAN: %w", a, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testnet: AddLANHost(%q): %v", name, err)
	}
	n.mu.Lock()
	n.lanAddrs = append(n.lanAddrs, addrs...)
	n.mu.Unlock()
	return n.newHost(t, lan, cname, addrs)
}

// LANAddrs are the addresses AddLANHost has taken so far.
func (n *Net) LANAddrs() []netip.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.lanAddrs)
}

// LANNS is the LAN's namespace, made by the first AddLANHost (nil before).
func (n *Net) LANNS() *Netns {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lan
}

// checkLANAddr accepts the addresses a LAN host may take.
func checkLANAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("invalid (zero) address")
	case a.Zone() != "":
		return fmt.Errorf("address %s has a zone; use a plain address", a)
	case a.Is4In6():
		return fmt.Errorf("address %s is IPv4-mapped; use %s", a, a.Unmap())
	case !a.IsPrivate() && !cgnat.Contains(a) && !localUseNAT64.Contains(a):
		return fmt.Errorf("address %s is not private (RFC 1918, %s or ULA fc00::/7) nor in the local-use NAT64 prefix %s", a, cgnat, localUseNAT64)
	}
	return nil
}

// lanNS returns the LAN's namespace, making and wiring it on first use.
func (n *Net) lanNS() (*Netns, error) {
	n.mu.Lock()
	lan := n.lan
	n.mu.Unlock()
	if lan != nil {
		return lan, nil
	}
	lan = newNetns(n.t, n, "lan")
	err := n.host.withLinks(func(h *netlink.Handle) error {
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: HostLANLink},
			PeerName:      lanUplink,
			PeerNamespace: netlink.NsFd(int(lan.ns.Fd())),
		}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s/%s: %w", HostLANLink, lanUplink, err)
		}
		return configureLink(h, HostLANLink, hostLAN4, hostLAN6)
	})
	if err != nil {
		return nil, fmt.Errorf("wire %s in %s: %w", HostLANLink, n.host.Name(), err)
	}
	err = lan.withLinks(func(h *netlink.Handle) error {
		if err := configureLink(h, lanUplink, lanHost4, lanHost6); err != nil {
			return err
		}
		link, err := h.LinkByName(lanUplink)
		if err != nil {
			return err
		}
		return addRoutes(h,
			&netlink.Route{LinkIndex: link.Attrs().Index, Gw: hostLAN4.Addr().AsSlice()},
			&netlink.Route{LinkIndex: link.Attrs().Index, Gw: hostLAN6.Addr().AsSlice()},
		)
	})
	if err != nil {
		return nil, fmt.Errorf("wire %s: %w", lan.Name(), err)
	}
	if err := lan.waitLinkReady(lanUplink, lanHost6.Addr()); err != nil {
		return nil, err
	}
	if err := n.host.waitLinkReady(HostLANLink, hostLAN6.Addr()); err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.lan = lan
	n.mu.Unlock()
	return lan, nil
}
