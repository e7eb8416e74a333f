package hostlayer

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/doorman-net/doorman/enforce/nft"
)

// Check returns nil if the runtime's namespace at nsPath holds what
// Apply(nsPath, spec) would install for sandbox spec.Key now, and
// otherwise an error describing the first difference: a missing or
// dormant table, a missing or altered base chain, set or sandbox chain, a
// missing, extra or altered rule, an interface that is gone, recreated or
// moved, a missing or misdirected element, a missing or extra pin of an
// address, a stale element still pointing at the sandbox's chain, a
// sandbox whose MAC changed since Apply pinned it, a bridge port whose
// isolation is off, or br_netfilter switched on or off for its bridge. spec.Pins are the pins Apply
// returned; an interface without one is compared with what the sandbox's
// end holds now. Other sandboxes' rules are not looked at.
//
// Rules are compared as package nft compares them: expression by
// expression as netlink attributes, each expression read back from the
// kernel marshalled again by google/nftables and compared with the one
// Apply would send. Attributes the library does not model are thereby
// ignored on both sides; rule handles and comments are not compared.
func Check(nsPath string, spec Spec) error {
	if err := check(nsPath, spec); err != nil {
		return fmt.Errorf("hostlayer: check sandbox %s in %s: %w", spec.Key, nsPath, err)
	}
	return nil
}

func check(nsPath string, spec Spec) error {
	s, err := spec.normalized()
	if err != nil {
		return err
	}
	n, err := openRuntimeNS(nsPath, false)
	if err != nil {
		return err
	}
	defer n.Close()
	ifaces, err := n.resolveIfaces(s)
	if err != nil {
		return err
	}
	for _, i := range ifaces {
		if i.peerMAC != nil && !bytes.Equal(i.peerMAC, i.mac) {
			return fmt.Errorf("host interface %q: the sandbox's end has mac %s now, the layer pins %s", i.name, i.peerMAC, i.mac)
		}
		if i.bridge != "" && !i.isolated {
			return fmt.Errorf("host interface %q: its port isolation on bridge %q is off: the sandbox's frames would reach the other sandboxes on the bridge", i.name, i.bridge)
		}
	}
	bridgeSets, err := n.readSets(bridgeLayout())
	if err != nil {
		return fmt.Errorf("%s: %w", bridgeLayout(), err)
	}
	inetSets, err := n.readSets(inetLayout())
	if err != nil {
		return fmt.Errorf("%s: %w", inetLayout(), err)
	}
	g, ok := ownLogGroup(s.Key, inetSets[setLogGroups])
	if !ok {
		return fmt.Errorf("%s: set %q has no nflog group for the sandbox", inetLayout(), setLogGroups)
	}
	s.logGroup = g
	held := heldPorts(bridgeSets)
	for i := range ifaces {
		ifaces[i].isolationOwned = ifaces[i].bridge != "" && held[uint32(ifaces[i].index)]
	}
	for _, l := range layouts() {
		if err := n.checkTable(l, s, ifaces); err != nil {
			return fmt.Errorf("%s: %w", l, err)
		}
	}
	return nil
}

func (n *runtimeNS) checkTable(l layout, s Spec, ifaces []hostIface) error {
	if err := nft.CheckTable(n.Conn, l.table); err != nil {
		return err
	}

	for _, b := range l.bases {
		ch, err := n.chain(l, b.name)
		if err != nil {
			return err
		}
		if err := l.compareShared(b, ch); err != nil {
			return err
		}
		if err := nft.CompareRules(n.Conn, ch, b.rules, "layer"); err != nil {
			return err
		}
	}

	sets, err := n.Conn.GetSets(l.table)
	if err != nil {
		return fmt.Errorf("list sets: %w", err)
	}
	for _, ss := range l.sets {
		i := slices.IndexFunc(sets, func(set *nftables.Set) bool { return set.Name == ss.name })
		switch {
		case i < 0:
			return fmt.Errorf("set %q is missing", ss.name)
		case sets[i].IsMap != ss.verdicts:
			// Only the map flag is compared: google/nftables v0.3.0 reads
			// the verdict data type of a map into KeyType. The keys of the
			// elements are checked to have the right length below.
			return fmt.Errorf("set %q is a map: %v, want %v", ss.name, sets[i].IsMap, ss.verdicts)
		}
	}

	name := chainName(s.Key)
	ch, err := n.chain(l, name)
	if err != nil {
		return err
	}
	if ch.Hooknum != nil {
		return fmt.Errorf("chain %q is a base chain, want a regular one", name)
	}
	if err := nft.CompareRules(n.Conn, ch, l.sandboxRules(s, ifaces), "layer"); err != nil {
		return err
	}
	if l.logs(s, ifaces) {
		lc, err := n.chain(l, logChainName(s.Key))
		if err != nil {
			return err
		}
		if lc.Hooknum != nil {
			return fmt.Errorf("chain %q is a base chain, want a regular one", lc.Name)
		}
		if err := nft.CompareRules(n.Conn, lc, l.logRules(s.logGroup), "layer"); err != nil {
			return err
		}
	}

	current, err := n.readSets(l)
	if err != nil {
		return err
	}
	return compareElements(l, current, name, l.elements(name, s, ifaces))
}

// compareElements returns an error unless the sandbox's elements in
// current (see stageElements) are exactly want.
func compareElements(l layout, current map[string][]element, chain string, want map[string][]element) error {
	owned := ownedIfaces(l, current, chain, want)
	for _, ss := range l.sets {
		got := map[string]string{}
		for _, e := range current[ss.name] {
			got[string(e.key)] = e.chain
		}
		wanted := map[string]bool{}
		for _, w := range want[ss.name] {
			wanted[string(w.key)] = true
			target, ok := got[string(w.key)]
			switch {
			case !ok:
				return fmt.Errorf("set %q lacks the element %s", ss.name, keyString(w.key))
			case ss.verdicts && target != w.chain:
				return fmt.Errorf("set %q sends %s to %s, want chain %q", ss.name, keyString(w.key), chainOrVerdict(target), w.chain)
			}
		}
		for _, e := range current[ss.name] {
			mine := e.chain == chain || e.chain == logChainOf(chain) || (!ss.verdicts && owned[keyIndex(e.key)])
			if mine && !wanted[string(e.key)] {
				return fmt.Errorf("set %q has the element %s for the sandbox, which it should not have", ss.name, keyString(e.key))
			}
		}
	}
	return nil
}

// keyString renders an element's key: an interface index, alone or
// followed by an address (IPv4, MAC padded to 8 bytes, IPv6).
func keyString(k []byte) string {
	switch len(k) {
	case 4:
		return fmt.Sprintf("interface index %d", keyIndex(k))
	case 4 + 4, 4 + 16:
		a, _ := netip.AddrFromSlice(k[4:])
		return fmt.Sprintf("interface index %d . %s", keyIndex(k), a)
	case 4 + 8:
		return fmt.Sprintf("interface index %d . %s", keyIndex(k), net.HardwareAddr(k[4:10]))
	}
	return fmt.Sprintf("%x", k)
}

// chain returns chain name of l's table, or an error saying it is missing.
// (google/nftables does not wrap the error of ListChain, so ENOENT cannot
// be told from other errors there: look at the list instead.)
func (n *runtimeNS) chain(l layout, name string) (*nftables.Chain, error) {
	chains, err := nft.Chains(n.Conn, l.table)
	if err != nil {
		return nil, err
	}
	for _, c := range chains {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("chain %q is missing", name)
}

func chainOrVerdict(chain string) string {
	if chain == "" {
		return "a verdict other than a jump"
	}
	return fmt.Sprintf("chain %q", chain)
}
