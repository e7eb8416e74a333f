package hostlayer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// Apply installs or replaces the rules of sandbox spec.Key in the runtime's
// network namespace at nsPath ("/proc/self/ns/net" for the caller's own):
// its chain in tables inet and bridge doorman-host, the elements that
// send its interfaces there and those that pin its addresses. It returns
// the pins it installed, one per host interface in the order of their
// names: spec.Pins where they hold, the others read from the sandbox's
// end of its veths (see Pin). A caller records them and passes them as
// spec.Pins to every later Apply and Check of the sandbox. Both tables change in one netlink batch, so
// the namespace holds the sandbox's old rules or its new ones, never a mix
// and never none; re-applying is idempotent. Other sandboxes' chains and
// elements are left alone, except an element with one of this sandbox's
// keys (its interface index, or its bridge and MAC) that still points at
// another sandbox: a leftover of a sandbox that was never removed, which
// this one replaces. Other tables are never touched. Apply also turns on
// the isolation of each bridge port (see Neighbours in the package doc)
// before it sends the batch, and turns it off again if the batch fails.
//
// Apply fails, changing nothing, if an interface does not exist, is not a
// sandbox's own (loopback, a bridge), is enslaved to anything but a Linux
// bridge, or is a bridge port whose peer is not a veth in
// spec.SandboxNetNS (whose MAC the layer pins), whose sandbox MAC is
// already pinned on that bridge for another sandbox that still has a port
// there, or whose isolation the kernel does not keep (before Linux 4.18).
func Apply(nsPath string, spec Spec) ([]Pin, error) {
	pins, err := apply(nsPath, spec)
	if err != nil {
		return nil, fmt.Errorf("hostlayer: apply sandbox %s in %s: %w", spec.Key, nsPath, err)
	}
	return pins, nil
}

func apply(nsPath string, spec Spec) ([]Pin, error) {
	s, err := spec.normalized()
	if err != nil {
		return nil, err
	}
	n, err := openRuntimeNS(nsPath, true)
	if err != nil {
		return nil, err
	}
	defer n.Close()
	ifaces, err := n.resolveIfaces(s)
	if err != nil {
		return nil, err
	}
	inet, bridge := inetLayout(), bridgeLayout()
	inetSets, err := n.readSets(inet)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", inet, err)
	}
	bridgeSets, err := n.readSets(bridge)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bridge, err)
	}
	if err := n.checkMACConflicts(s, ifaces, inetSets, bridgeSets); err != nil {
		return nil, err
	}
	if s.logGroup, err = pickLogGroup(s.Key, inetSets[setLogGroups]); err != nil {
		return nil, err
	}
	claimIsolation(ifaces, bridgeSets)
	if err := n.stageApply(inet, s, ifaces, inetSets); err != nil {
		return nil, fmt.Errorf("%s: %w", inet, err)
	}
	if err := n.stageApply(bridge, s, ifaces, bridgeSets); err != nil {
		return nil, fmt.Errorf("%s: %w", bridge, err)
	}
	for _, l := range []layout{redirectLayout(), listenLayout()} {
		current, err := n.readSets(l)
		if err == nil {
			err = n.stageApply(l, s, ifaces, current)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l, err)
		}
	}
	// Isolation before the rules: a failure of either leaves neither.
	undo, err := n.isolatePorts(ifaces)
	if err != nil {
		return nil, err
	}
	if err := n.Conn.Flush(); err != nil {
		return nil, errors.Join(err, undo())
	}
	pins := make([]Pin, 0, len(ifaces))
	for _, i := range ifaces {
		pins = append(pins, i.pin)
	}
	return pins, nil
}

// checkMACConflicts refuses a bridge port whose sandbox MAC is already
// pinned on the same bridge for another sandbox that still has a port
// there: a workload that set its MAC to a live neighbour's before Apply
// ran would otherwise take the neighbour's element over, and the
// neighbour's traffic would be judged by its rules. An owner whose ports
// are all gone is a leftover, which Apply replaces.
// inet and bridge are the elements of the two tables' sets (see readSets).
func (n *runtimeNS) checkMACConflicts(s Spec, ifaces []hostIface, inet, bridge map[string][]element) error {
	own := chainName(s.Key)
	for _, i := range ifaces {
		if i.bridge == "" {
			continue
		}
		key := ifaceMACKey(i.bridgeIndex, i.mac)
		for _, e := range inet[setMACs] {
			if !bytes.Equal(e.key, key) || e.chain == own || e.chain == "" {
				continue
			}
			for _, p := range bridge[setIfaces] {
				index := int(binaryutil.NativeEndian.Uint32(p.key))
				if p.chain != e.chain || index == i.index {
					continue
				}
				port, err := n.link.LinkByIndex(index)
				if linkNotFound(err) {
					continue
				}
				if err != nil {
					return fmt.Errorf("look up interface index %d: %w", index, err)
				}
				return fmt.Errorf("host interface %q: the sandbox's MAC %s is already pinned on bridge %q for the sandbox of chain %q, whose port %q still exists",
					i.name, i.mac, i.bridge, e.chain, port.Attrs().Name)
			}
		}
	}
	return nil
}

// stageApply queues, in the connection's batch, everything Apply changes in
// one table; current are the elements of its sets (see readSets). The
// table, its sets, base chains and their rules are shared by all
// sandboxes. When they are all there as Apply installs them, they are
// left out of the batch; otherwise they are added again (a no-op for
// those that exist), and each base chain is flushed before its rules are
// added, which repairs it if it was altered. (Flushing an intact chain
// would be harmless, but a batch that deletes anything makes closing the
// netlink socket wait for the kernel to free it after an RCU grace
// period, about 10 ms.)
func (n *runtimeNS) stageApply(l layout, s Spec, ifaces []hostIface, current map[string][]element) error {
	intact, err := n.skeletonIntact(l)
	if err != nil {
		return err
	}
	c := n.Conn
	sets := map[string]*nftables.Set{}
	if intact {
		for _, ss := range l.sets {
			sets[ss.name] = l.set(ss)
		}
	} else {
		c.AddTable(l.table)
		for i, ss := range l.sets {
			set := l.set(ss)
			// The batch-local id, given here: google/nftables would draw
			// it from a package counter that it does not guard against
			// concurrent use.
			set.ID = l.setIDs | uint32(i+1)
			if err := c.AddSet(set, nil); err != nil {
				return fmt.Errorf("set %s: %w", ss.name, err)
			}
			sets[ss.name] = set
		}
		for _, b := range l.bases {
			ch := c.AddChain(l.baseChain(b))
			c.FlushChain(ch)
			for _, r := range b.rules {
				nft.AddRule(c, ch, r)
			}
		}
	}
	if l.logs(s, ifaces) {
		// Before the sandbox chain, whose drops go to it.
		lc := c.AddChain(l.logChain(s.Key))
		c.FlushChain(lc)
		for _, r := range l.logRules(s.logGroup) {
			nft.AddRule(c, lc, r)
		}
	}
	ch := c.AddChain(l.sandboxChain(s.Key))
	c.FlushChain(ch)
	for _, r := range l.sandboxRules(s, ifaces) {
		nft.AddRule(c, ch, r)
	}
	return n.stageElements(l, sets, current, ch.Name, l.elements(ch.Name, s, ifaces))
}

// skeletonIntact reports whether l's table holds its shared skeleton as
// Apply installs it: the table, without flags (not dormant); its sets,
// with the right map flag; its base chains, with the right type, hook,
// priority and policy, holding exactly their rules. It compares as Check
// does.
func (n *runtimeNS) skeletonIntact(l layout) (bool, error) {
	t, err := n.Conn.ListTableOfFamily(l.table.Name, l.table.Family)
	if nft.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up the table: %w", err)
	}
	if t.Flags != 0 {
		return false, nil // dormant, or owned by a process: re-adding it says no flags
	}
	sets, err := n.Conn.GetSets(l.table)
	if err != nil {
		return false, fmt.Errorf("list sets: %w", err)
	}
	for _, ss := range l.sets {
		i := slices.IndexFunc(sets, func(set *nftables.Set) bool { return set.Name == ss.name })
		if i < 0 || sets[i].IsMap != ss.verdicts {
			return false, nil
		}
	}
	// Each base chain is looked up by name: listing the table's chains
	// would read every sandbox's chain too, a cost that grows with them.
	for _, b := range l.bases {
		// A failed look-up (google/nftables does not keep ENOENT in
		// the error it returns) counts as a missing chain: the skeleton
		// is added again, and a real failure shows when the batch is
		// sent.
		ch, err := n.Conn.ListChain(l.table, b.name)
		if err != nil {
			return false, nil
		}
		ch.Table = l.table
		if l.compareShared(b, ch) != nil {
			return false, nil
		}
		// CompareRules fails on a difference and on a failed read alike:
		// either way the chain is rebuilt, as Apply always did.
		if nft.CompareRules(n.Conn, ch, b.rules, "layer") != nil {
			return false, nil
		}
	}
	return true, nil
}

// stageElements queues the replacement of the sandbox's elements in every
// set of l by want. The sandbox's current elements are those that jump to
// its chain and, in the plain sets (keyed by an interface index, alone or
// followed by an address), those of the interfaces its map elements name;
// an element with a wanted key that belongs to another sandbox is
// replaced too (see Apply).
func (n *runtimeNS) stageElements(l layout, sets map[string]*nftables.Set, current map[string][]element, chain string, want map[string][]element) error {
	owned := ownedIfaces(l, current, chain, want)
	for _, ss := range l.sets {
		wanted := map[string]bool{}
		for _, e := range want[ss.name] {
			wanted[string(e.key)] = true
		}
		var del []nftables.SetElement
		for _, e := range current[ss.name] {
			mine := e.chain == chain || e.chain == logChainOf(chain) || (!ss.verdicts && owned[keyIndex(e.key)])
			if mine || wanted[string(e.key)] {
				del = append(del, nftables.SetElement{Key: e.key})
			}
		}
		if len(del) > 0 {
			if err := n.Conn.SetDeleteElements(sets[ss.name], del); err != nil {
				return fmt.Errorf("set %s: %w", ss.name, err)
			}
		}
		var add []nftables.SetElement
		for _, e := range want[ss.name] {
			el := nftables.SetElement{Key: e.key}
			if ss.verdicts {
				el.VerdictData = &expr.Verdict{Kind: expr.VerdictJump, Chain: e.chain}
			}
			add = append(add, el)
		}
		if len(add) > 0 {
			if err := n.Conn.SetAddElements(sets[ss.name], add); err != nil {
				return fmt.Errorf("set %s: %w", ss.name, err)
			}
		}
	}
	return nil
}

// ownedIfaces returns the interface indexes that are the sandbox's in l:
// those its elements in the maps keyed by interface index jump to its
// chain from, now (current) or after the change (want). The elements of
// the plain sets of interface indexes follow them.
func ownedIfaces(l layout, current map[string][]element, chain string, want map[string][]element) map[uint32]bool {
	owned := map[uint32]bool{}
	for _, ss := range l.sets {
		if !ss.verdicts || ss.keyType.Bytes != 4 {
			continue
		}
		for _, e := range current[ss.name] {
			if e.chain == chain {
				owned[binaryutil.NativeEndian.Uint32(e.key)] = true
			}
		}
		for _, e := range want[ss.name] {
			owned[binaryutil.NativeEndian.Uint32(e.key)] = true
		}
	}
	return owned
}

// keyIndex is the interface index a key of the layer's sets starts with.
func keyIndex(key []byte) uint32 {
	if len(key) < 4 {
		return 0
	}
	return binaryutil.NativeEndian.Uint32(key)
}

// Remove deletes the rules of sandbox key from the runtime's namespace at
// nsPath: its map elements and its chain in both tables, and the tables
// themselves when no other sandbox is left in them, in one batch; then it
// turns off the isolation Apply turned on for its bridge ports that still
// exist (isolation another tool set stays). It is no
// error if the sandbox has no rules there or the namespace is gone, so
// Remove can be repeated. Other sandboxes' rules and other tables are left
// alone.
func Remove(nsPath string, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("hostlayer: remove from %s: %w", nsPath, err)
	}
	if err := remove(nsPath, key); err != nil {
		return fmt.Errorf("hostlayer: remove sandbox %s from %s: %w", key, nsPath, err)
	}
	return nil
}

func remove(nsPath string, key string) error {
	n, err := openRuntimeNS(nsPath, true)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, nft.ErrNotNetNS) {
		return nil // the namespace is gone, and its rules with it
	}
	if err != nil {
		return err
	}
	defer n.Close()
	held, err := n.heldIsolation(chainName(key))
	if err != nil {
		return err
	}
	changed := false
	for _, l := range layouts() {
		ok, err := n.stageRemove(l, key)
		if err != nil {
			return fmt.Errorf("%s: %w", l, err)
		}
		changed = changed || ok
	}
	if !changed {
		return nil
	}
	if err := n.Conn.Flush(); err != nil {
		return err
	}
	return n.releaseIsolation(held)
}

// stageRemove queues the removal of sandbox key from one table and reports
// whether there was anything to remove.
func (n *runtimeNS) stageRemove(l layout, key string) (bool, error) {
	chains, hasLog, err := n.sandboxChains(l, logChainName(key))
	if err != nil {
		return false, err
	}
	name := chainName(key)
	switch {
	case len(chains) == 0:
		// No sandbox left, but maybe an empty table (from a tampered
		// ruleset): it goes too.
		if ok, err := n.hasTable(l); !ok || err != nil {
			return false, err
		}
		n.Conn.DelTable(l.table)
		return true, nil
	case !slices.Contains(chains, name):
		return false, nil
	case len(chains) == 1:
		n.Conn.DelTable(l.table) // the last sandbox: the table goes with it
		return true, nil
	}
	current, err := n.readSets(l)
	if err != nil {
		return false, err
	}
	sets := map[string]*nftables.Set{}
	for _, ss := range l.sets {
		sets[ss.name] = l.set(ss)
	}
	// The elements go first: a chain that a verdict still jumps to cannot
	// be deleted.
	if err := n.stageElements(l, sets, current, name, nil); err != nil {
		return false, err
	}
	n.Conn.DelChain(l.sandboxChain(key))
	// Then its log chain, which nothing goes to any more.
	if hasLog {
		n.Conn.DelChain(l.logChain(key))
	}
	return true, nil
}

// sandboxChains returns the names of the sandbox chains in l's table, none
// if the table is not there, and whether it has chain other.
func (n *runtimeNS) sandboxChains(l layout, other string) ([]string, bool, error) {
	chains, err := nft.Chains(n.Conn, l.table)
	if err != nil {
		return nil, false, err
	}
	var names []string
	has := false
	for _, c := range chains {
		if strings.HasPrefix(c.Name, chainPrefix) {
			names = append(names, c.Name)
		}
		has = has || c.Name == other
	}
	return names, has, nil
}

// hasTable reports whether l's table exists.
func (n *runtimeNS) hasTable(l layout) (bool, error) {
	ok, err := nft.HasTable(n.Conn, l.table)
	if err != nil {
		return false, fmt.Errorf("look up the table: %w", err)
	}
	return ok, nil
}

// readSets reads the elements of l's sets, by set name; a missing table or
// set has none. (google/nftables does not wrap the errors of set lookups,
// so ENOENT cannot be told from other errors there: the lists of tables
// and sets say what exists.)
func (n *runtimeNS) readSets(l layout) (map[string][]element, error) {
	out := map[string][]element{}
	if ok, err := n.hasTable(l); !ok || err != nil {
		return out, err
	}
	sets, err := n.Conn.GetSets(l.table)
	if err != nil {
		return nil, fmt.Errorf("list sets: %w", err)
	}
	for _, set := range sets {
		i := slices.IndexFunc(l.sets, func(ss setSpec) bool { return ss.name == set.Name })
		if i < 0 {
			continue
		}
		els, err := n.Conn.GetSetElements(l.set(l.sets[i]))
		if err != nil {
			return nil, fmt.Errorf("read set %s: %w", set.Name, err)
		}
		for _, e := range els {
			if want := int(l.sets[i].keyType.Bytes); len(e.Key) != want {
				return nil, fmt.Errorf("set %s has a %d-byte key, want %d", set.Name, len(e.Key), want)
			}
			out[set.Name] = append(out[set.Name], element{key: e.Key, chain: jumpTarget(e.Val)})
		}
	}
	return out, nil
}

// jumpTarget decodes the verdict of a map element as google/nftables
// returns it (the attributes inside NFTA_DATA_VERDICT) and returns the
// chain it jumps to, or "" if it is not a jump.
func jumpTarget(b []byte) string {
	attrs, err := parseAttrs(b)
	if err != nil {
		return ""
	}
	code, chain := attrs[unix.NFTA_VERDICT_CODE], attrs[unix.NFTA_VERDICT_CHAIN]
	if len(code) != 4 || int32(binaryutil.BigEndian.Uint32(code)) != unix.NFT_JUMP {
		return ""
	}
	return strings.TrimRight(string(chain), "\x00")
}

// parseAttrs splits netlink attributes into a map by type.
func parseAttrs(b []byte) (map[uint16][]byte, error) {
	out := map[uint16][]byte{}
	for len(b) > 0 {
		if len(b) < unix.SizeofNlAttr {
			return nil, fmt.Errorf("truncated netlink attribute")
		}
		l := int(binaryutil.NativeEndian.Uint16(b[0:2]))
		typ := binaryutil.NativeEndian.Uint16(b[2:4]) & nlaTypeMask
		if l < unix.SizeofNlAttr || l > len(b) {
			return nil, fmt.Errorf("bad netlink attribute length %d", l)
		}
		out[typ] = b[unix.SizeofNlAttr:l]
		b = b[min(len(b), (l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1)):]
	}
	return out, nil
}
