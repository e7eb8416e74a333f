package runner

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// bridgeAlias marks a bridge the run network created (the bridge plugin
// makes it on the first ADD). Only a bridge carrying it is ever removed: a
// bridge of the same name that was there before stays.
const bridgeAlias = "doorman run network"

// findBridge returns the bridge named name, or nil if there is none.
func findBridge(name string) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up bridge %s: %w", name, err)
	}
	return l, nil
}

// markBridge sets the alias that lets the last run remove the bridge.
func markBridge(name string) error {
	l, err := findBridge(name)
	if err != nil || l == nil {
		return err
	}
	if err := netlink.LinkSetAlias(l, bridgeAlias); err != nil {
		return fmt.Errorf("mark bridge %s: %w", name, err)
	}
	return nil
}

// removeIdleBridge deletes the bridge if the run network made it and no
// interface is attached to it any more. It reports whether it did.
func removeIdleBridge(name string) (bool, error) {
	br, err := findBridge(name)
	if err != nil || br == nil {
		return false, err
	}
	if br.Attrs().Alias != bridgeAlias {
		return false, nil
	}
	links, err := listLinks()
	if err != nil {
		return false, err
	}
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			return false, nil
		}
	}
	if err := netlink.LinkDel(br); err != nil {
		return false, fmt.Errorf("delete idle bridge %s: %w", name, err)
	}
	return true, nil
}

// listLinks lists the namespace's links, retrying a dump that changed
// while it was read.
func listLinks() ([]netlink.Link, error) {
	var err error
	for range 5 {
		var links []netlink.Link
		links, err = netlink.LinkList()
		if err == nil {
			return links, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return nil, fmt.Errorf("list links: %w", err)
}

// checkRoutes refuses a subnet that would shadow or collide with a route
// the host already has on another interface: a route to a range inside the
// subnet (or equal to it). A wider route (the default route, a covering
// /16) is no conflict: the bridge's more specific route wins.
func checkRoutes(bridge string, subnets []netip.Prefix) error {
	var brIndex int
	if br, err := findBridge(bridge); err != nil {
		return err
	} else if br != nil {
		brIndex = br.Attrs().Index
	}
	for _, p := range subnets {
		fam := netlink.FAMILY_V4
		if p.Addr().Is6() {
			fam = netlink.FAMILY_V6
		}
		routes, err := netlink.RouteList(nil, fam)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst == nil || (brIndex != 0 && r.LinkIndex == brIndex) {
				continue
			}
			dst, ok := netipPrefix(r.Dst)
			if !ok || dst.Bits() < p.Bits() || !dst.Overlaps(p) {
				continue
			}
			if r.Type == unix.RTN_UNREACHABLE || r.Type == unix.RTN_BLACKHOLE || r.Type == unix.RTN_PROHIBIT {
				continue
			}
			dev := "?"
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			return fmt.Errorf("subnet %s: the host already routes %s via %s; pick a free range with --subnet", p, dst, dev)
		}
	}
	return nil
}

// netipPrefix converts a route's destination.
func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	ones, bits := n.Mask.Size()
	if !ok || bits == 0 {
		return netip.Prefix{}, false
	}
	if a.Is4In6() && bits == 128 {
		ones -= 96
	}
	return netip.PrefixFrom(a.Unmap(), ones), true
}
