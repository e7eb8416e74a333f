package hostlayer

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// This file keeps the bridge's port isolation (IFLA_BRPORT_ISOLATED,
// `bridge link set dev PORT isolated on`) on every sandbox's port: the
// bridge then forwards nothing from one isolated port to another, so a
// sandbox's broadcasts, multicasts and unicasts reach the host (the
// bridge itself) and the ports that are not sandboxes', never another
// sandbox. Table bridge doorman-host drops the same frames in its forward
// hook; either holds without the other.

// portIsolated reads whether bridge port l has isolation on.
func (n *runtimeNS) portIsolated(l netlink.Link) (bool, error) {
	var err error
	for range 3 {
		var pi netlink.Protinfo
		// A dump of every bridge port's protinfo: the kernel has no
		// request for one port's.
		pi, err = n.link.LinkGetProtinfo(l)
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			continue // a port changed meanwhile: read again
		}
		if err != nil {
			return false, err
		}
		return pi.Isolated, nil
	}
	return false, err
}

// claimIsolation marks the bridge ports of ifaces whose isolation the
// layer holds: those whose isolation is off now (Apply turns it on) and
// those that set isolated-ports of table bridge doorman-host (read into
// bridgeSets) names already, because an earlier Apply turned it on.
func claimIsolation(ifaces []hostIface, bridgeSets map[string][]element) {
	held := heldPorts(bridgeSets)
	for i := range ifaces {
		if ifaces[i].bridge != "" {
			ifaces[i].isolationOwned = !ifaces[i].isolated || held[uint32(ifaces[i].index)]
		}
	}
}

// heldPorts are the interface indexes in set isolated-ports.
func heldPorts(bridgeSets map[string][]element) map[uint32]bool {
	held := map[uint32]bool{}
	for _, e := range bridgeSets[setIsolated] {
		held[keyIndex(e.key)] = true
	}
	return held
}

// isolatePorts turns isolation on for the bridge ports of ifaces that do
// not have it, and checks that the kernel took it. It returns a function
// that turns it off again on those ports, for an Apply that fails after
// it. On error nothing it changed is left changed.
func (n *runtimeNS) isolatePorts(ifaces []hostIface) (undo func() error, err error) {
	var done []netlink.Link
	undo = func() error {
		var errs []error
		for _, l := range done {
			if err := n.link.LinkSetIsolated(l, false); err != nil && !linkNotFound(err) {
				errs = append(errs, fmt.Errorf("host interface %q: turn its port isolation off again: %w", l.Attrs().Name, err))
			}
		}
		return errors.Join(errs...)
	}
	for _, i := range ifaces {
		if i.bridge == "" || i.isolated {
			continue
		}
		l, err := n.link.LinkByIndex(i.index)
		if err == nil {
			err = n.link.LinkSetIsolated(l, true)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("host interface %q: turn on its port isolation on bridge %q: %w", i.name, i.bridge, err), undo())
		}
		done = append(done, l)
		on, err := n.portIsolated(l)
		if err == nil && !on {
			err = errors.New("the kernel does not keep it (bridge port isolation needs Linux 4.18 or later)")
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("host interface %q: port isolation on bridge %q: %w", i.name, i.bridge, err), undo())
		}
	}
	return undo, nil
}

// heldIsolation returns the indexes of the bridge ports of the sandbox of
// chain whose isolation the layer holds (set isolated-ports names them).
func (n *runtimeNS) heldIsolation(chain string) ([]int, error) {
	l := bridgeLayout()
	current, err := n.readSets(l)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l, err)
	}
	owned := ownedIfaces(l, current, chain, nil)
	var out []int
	for index := range heldPorts(current) {
		if owned[index] {
			out = append(out, int(index))
		}
	}
	return out, nil
}

// releaseIsolation turns isolation off on the ports with the given
// indexes that are still bridge ports; ports that are gone (with their
// sandbox's veth, as usual) need nothing.
func (n *runtimeNS) releaseIsolation(indexes []int) error {
	var errs []error
	for _, index := range indexes {
		l, err := n.link.LinkByIndex(index)
		if linkNotFound(err) {
			continue
		}
		if err == nil && l.Attrs().MasterIndex == 0 {
			continue // no longer a bridge port: nothing to turn off
		}
		if err == nil {
			err = n.link.LinkSetIsolated(l, false)
		}
		if err != nil && !linkNotFound(err) {
			errs = append(errs, fmt.Errorf("turn off the port isolation of interface index %d: %w", index, err))
		}
	}
	return errors.Join(errs...)
}
