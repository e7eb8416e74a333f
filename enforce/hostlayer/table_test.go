package hostlayer

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/nftables"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce/nft"
)

// newDummyRuntime is a runtime namespace with routed interfaces d0, d1,
// ... (ifb devices: the test kernel has no dummy driver): enough to
// install, check and remove rules without traffic.
func newDummyRuntime(t *testing.T, n int) *testNS {
	t.Helper()
	rt := newTestNS(t, "hdum")
	for i := range n {
		rt.ip(t, fmt.Sprintf("link add d%d type ifb", i))
	}
	return rt
}

func dummySpec(key string, ifaces ...string) Spec {
	s := Spec{
		Key:         key,
		HostIfaces:  ifaces,
		Resolvers:   []netip.Addr{netip.MustParseAddr(resolver4)},
		AllowDirect: constEntries(hostPort(inet4, 7000), "[2001:db8:1::/64]:7000-7010", "203.0.113.9"),
	}
	for i, name := range ifaces {
		s.Pins = append(s.Pins, dummyPin(name, i))
	}
	return s
}

// dummyPin is the pin of routed interface name, the i-th of its sandbox:
// it has no sandbox end to read it from.
func dummyPin(name string, i int) Pin {
	return Pin{HostIface: name, Addrs: []netip.Addr{
		netip.AddrFrom4([4]byte{198, 51, 100, byte(140 + i)}),
		netip.MustParseAddr(fmt.Sprintf("2001:db8:3::%x", 0x140+i)),
		netip.MustParseAddr(fmt.Sprintf("fe80::%x", 0x140+i)),
	}}
}

// constEntries parses entries that are known to be valid.
func constEntries(ss ...string) []conf.Entry {
	var out []conf.Entry
	for _, s := range ss {
		e, err := conf.ParseEntry(s)
		if err != nil {
			panic(err)
		}
		out = append(out, e)
	}
	return out
}

// ruleset is a dump of the layer's tables for comparisons: every chain's
// rules as marshalled expressions, and every set's elements.
func ruleset(t *testing.T, nsPath string) string {
	t.Helper()
	n, err := openRuntimeNS(nsPath, false)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var b strings.Builder
	for _, l := range layouts() {
		chains, err := n.Conn.ListChainsOfTableFamily(l.table.Family)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chains {
			if c.Table.Name != TableName {
				continue
			}
			rules, err := n.Conn.GetRules(l.table, c)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s chain %s: %d rules\n", l, c.Name, len(rules))
			for _, r := range rules {
				for _, e := range r.Exprs {
					fmt.Fprintf(&b, " %T%+v", e, e)
				}
				b.WriteString("\n")
			}
		}
		sets, err := n.readSets(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, ss := range l.sets {
			els := sets[ss.name]
			slices.SortFunc(els, func(a, b element) int { return bytes.Compare(a.key, b.key) })
			fmt.Fprintf(&b, "%s set %s: %v\n", l, ss.name, els)
		}
	}
	return b.String()
}

func TestApplyIsIdempotent(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt := newDummyRuntime(t, 2)
	s := dummySpec("x", "d0", "d1")
	if _, err := Apply(rt.path, s); err != nil {
		t.Fatal(err)
	}
	first := ruleset(t, rt.path)
	if _, err := Apply(rt.path, s); err != nil {
		t.Fatal(err)
	}
	if second := ruleset(t, rt.path); second != first {
		t.Errorf("the second Apply changed the ruleset:\n%s\nwant\n%s", second, first)
	}
	if err := Check(rt.path, s); err != nil {
		t.Error(err)
	}
	if !strings.Contains(first, "sandboxes: [") || strings.Count(first, "sbx-x") < 2 {
		t.Errorf("ruleset lacks the sandbox's elements:\n%s", first)
	}
}

func TestCheckDetectsTampering(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	inet, bridge := inetLayout(), bridgeLayout()
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, n *runtimeNS)
		want   string
	}{
		{"a deleted rule", func(t *testing.T, n *runtimeNS) {
			deleteRule(t, n, inet, chainName("x"), 3)
		}, "rule"},
		{"an added rule", func(t *testing.T, n *runtimeNS) {
			nft.AddRule(n.Conn, inet.sandboxChain("x"), nft.Rule("extra", nft.Accept()))
		}, "not part of the layer"},
		{"a deleted dispatch rule", func(t *testing.T, n *runtimeNS) {
			deleteRule(t, n, inet, "prerouting", 0)
		}, "prerouting"},
		{"a deleted map element", func(t *testing.T, n *runtimeNS) {
			if err := n.Conn.SetDeleteElements(inet.set(inet.sets[0]), []nftables.SetElement{{Key: ifIndexKey(ifIndex(t, n, "d0"))}}); err != nil {
				t.Fatal(err)
			}
		}, "lacks the element"},
		{"a deleted address pin", func(t *testing.T, n *runtimeNS) {
			set := inet.set(inet.sets[slices.IndexFunc(inet.sets, func(ss setSpec) bool { return ss.name == setAddrs4 })])
			key := ifaceAddrKey(ifIndex(t, n, "d0"), dummyPin("d0", 0).Addrs[0])
			if err := n.Conn.SetDeleteElements(set, []nftables.SetElement{{Key: key}}); err != nil {
				t.Fatal(err)
			}
		}, "set \"sandbox-ip\" lacks the element interface index"},
		{"an added address pin", func(t *testing.T, n *runtimeNS) {
			set := inet.set(inet.sets[slices.IndexFunc(inet.sets, func(ss setSpec) bool { return ss.name == setAddrs6 })])
			key := ifaceAddrKey(ifIndex(t, n, "d0"), netip.MustParseAddr("2001:db8:3::99"))
			if err := n.Conn.SetAddElements(set, []nftables.SetElement{{Key: key}}); err != nil {
				t.Fatal(err)
			}
		}, "2001:db8:3::99 for the sandbox, which it should not have"},
		{"a deleted pin rule", func(t *testing.T, n *runtimeNS) {
			deleteRule(t, n, inet, chainName("x"), 0)
		}, "is dropped"},
		{"a deleted shape rule", func(t *testing.T, n *runtimeNS) {
			deleteRule(t, n, bridge, chainNDShape, 0)
		}, chainNDShape},
		{"a deleted table", func(t *testing.T, n *runtimeNS) {
			n.Conn.DelTable(bridge.table)
		}, "table is missing"},
		{"a deleted base chain", func(t *testing.T, n *runtimeNS) {
			i := slices.IndexFunc(bridge.bases, func(b baseSpec) bool { return b.name == "forward" })
			c := bridge.baseChain(bridge.bases[i])
			n.Conn.FlushChain(c)
			n.Conn.DelChain(c)
		}, "forward"},
		{"a base chain with policy drop", func(t *testing.T, n *runtimeNS) {
			c := inet.baseChain(inet.bases[0])
			c.Policy = ptr(nftables.ChainPolicyDrop)
			n.Conn.AddChain(c)
		}, "policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rt := newDummyRuntime(t, 1)
			s := dummySpec("x", "d0")
			if _, err := Apply(rt.path, s); err != nil {
				t.Fatal(err)
			}
			n, err := openRuntimeNS(rt.path, true)
			if err != nil {
				t.Fatal(err)
			}
			tc.tamper(t, n)
			err = n.Conn.Flush()
			n.Close()
			if err != nil {
				t.Fatalf("tamper: %v", err)
			}
			if err := Check(rt.path, s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check after %s: %v, want an error about %q", tc.name, err, tc.want)
			}
			if _, err := Apply(rt.path, s); err != nil {
				t.Fatal(err)
			}
			if err := Check(rt.path, s); err != nil {
				t.Errorf("Check after re-applying: %v", err)
			}
		})
	}
}

func deleteRule(t *testing.T, n *runtimeNS, l layout, chain string, i int) {
	t.Helper()
	rules, err := n.Conn.GetRules(l.table, &nftables.Chain{Name: chain, Table: l.table})
	if err != nil || len(rules) <= i {
		t.Fatalf("rules of %s: %d, %v", chain, len(rules), err)
	}
	if err := n.Conn.DelRule(rules[i]); err != nil {
		t.Fatal(err)
	}
}

func ifIndex(t *testing.T, n *runtimeNS, name string) int {
	t.Helper()
	l, err := n.link.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

func TestCheckDetectsAnotherSpec(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt := newDummyRuntime(t, 2)
	s := dummySpec("x", "d0")
	if _, err := Apply(rt.path, s); err != nil {
		t.Fatal(err)
	}
	other := s
	other.AllowICMP = true
	if err := Check(rt.path, other); err == nil {
		t.Errorf("Check with AllowICMP: nil, want an error")
	}
	other = s
	other.Resolvers = nil
	if err := Check(rt.path, other); err == nil {
		t.Errorf("Check without resolvers: nil, want an error")
	}
	other = s
	other.HostIfaces, other.Pins = []string{"d1"}, []Pin{dummyPin("d1", 0)}
	if err := Check(rt.path, other); err == nil || !strings.Contains(err.Error(), "d1") {
		t.Errorf("Check with another interface: %v, want an error about d1", err)
	}
	other = s
	other.Pins = []Pin{dummyPin("d0", 1)}
	if err := Check(rt.path, other); err == nil || !strings.Contains(err.Error(), "lacks the element interface index") {
		t.Errorf("Check with other addresses: %v, want an error about the addresses", err)
	}
	other = s
	other.HostIfaces, other.Pins = []string{"d0", "d1"}, []Pin{dummyPin("d0", 0), dummyPin("d1", 1)}
	if err := Check(rt.path, other); err == nil {
		t.Errorf("Check with one more interface: nil, want an error")
	}
}

func TestApplyMovesInterfaces(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt := newDummyRuntime(t, 2)
	if _, err := Apply(rt.path, dummySpec("x", "d0")); err != nil {
		t.Fatal(err)
	}
	s := dummySpec("x", "d1")
	if _, err := Apply(rt.path, s); err != nil {
		t.Fatal(err)
	}
	if err := Check(rt.path, s); err != nil {
		t.Errorf("after moving to d1: %v", err)
	}
	if err := Check(rt.path, dummySpec("x", "d0")); err == nil {
		t.Errorf("Check on d0 after moving to d1: nil, want an error")
	}
}

func TestApplyFollowsARecreatedInterface(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt := newDummyRuntime(t, 1)
	s := dummySpec("x", "d0")
	if _, err := Apply(rt.path, s); err != nil {
		t.Fatal(err)
	}
	rt.ip(t, "link del d0")
	rt.ip(t, "link add d0 type ifb")
	if err := Check(rt.path, s); err == nil || !strings.Contains(err.Error(), "index") {
		t.Errorf("Check after d0 was recreated: %v, want an error about its index", err)
	}
	if _, err := Apply(rt.path, s); err != nil {
		t.Fatal(err)
	}
	// Check also fails if an element for the old index is left.
	if err := Check(rt.path, s); err != nil {
		t.Errorf("Check after re-applying: %v", err)
	}
}

func TestApplyTakesOverAStaleElement(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt := newDummyRuntime(t, 2)
	x, y, z := dummySpec("x", "d0"), dummySpec("y", "d0"), dummySpec("z", "d1")
	for _, s := range []Spec{x, z, y} {
		if _, err := Apply(rt.path, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := Check(rt.path, y); err != nil {
		t.Errorf("y, which took d0 over: %v", err)
	}
	if err := Check(rt.path, x); err == nil || !strings.Contains(err.Error(), `chain "sbx-y"`) {
		t.Errorf("Check of x, whose d0 y took over: %v, want an error naming y's chain", err)
	}
	if err := Remove(rt.path, "x"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Spec{y, z} {
		if err := Check(rt.path, s); err != nil {
			t.Errorf("%s after removing x: %v", s.Key, err)
		}
	}
}

func TestConcurrentApplyAndRemove(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	const n = 12
	rt := newDummyRuntime(t, n)
	specs := make([]Spec, n)
	for i := range specs {
		specs[i] = dummySpec(fmt.Sprintf("s%d", i), fmt.Sprintf("d%d", i))
	}
	parallel := func(f func(i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { errs[i] = f(i) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	parallel(func(i int) error {
		_, err := Apply(rt.path, specs[i])
		return err
	})
	parallel(func(i int) error { return Check(rt.path, specs[i]) })
	parallel(func(i int) error {
		if i%2 == 0 {
			return Remove(rt.path, specs[i].Key)
		}
		specs[i].AllowICMP = true
		_, err := Apply(rt.path, specs[i])
		return err
	})
	for i, s := range specs {
		err := Check(rt.path, s)
		if i%2 == 0 && err == nil {
			t.Errorf("%s: Check after Remove: nil, want an error", s.Key)
		}
		if i%2 == 1 && err != nil {
			t.Errorf("%s: %v", s.Key, err)
		}
	}
	parallel(func(i int) error { return Remove(rt.path, specs[i].Key) })
	if tables := tableNames(t, rt.path); len(tables) != 0 {
		t.Errorf("tables left after removing every sandbox: %v", tables)
	}
}

func TestApplyRefuses(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt := newDummyRuntime(t, 2)
	rt.ip(t, "link add br9 type bridge")
	rt.ip(t, "link add d9 type ifb")
	rt.ip(t, "link set d9 master br9")
	name := constEntries("example.com:443")
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Key: "x", HostIfaces: []string{"lo"}}, `"lo": is the loopback interface`},
		{Spec{Key: "x", HostIfaces: []string{"nope0"}}, `"nope0": does not exist`},
		{Spec{Key: "x", HostIfaces: []string{"br9"}}, `"br9": is a bridge`},
		{Spec{Key: "x", HostIfaces: []string{"d9"}}, `"d9": is a port of bridge "br9": the sandbox's network namespace is needed`},
		{Spec{Key: "x", HostIfaces: []string{"d9"}, SandboxNetNS: rt.path}, `"d9": is a ifb, not a veth`},
		{Spec{Key: "x", HostIfaces: []string{"d0", "nope0"}, Pins: []Pin{dummyPin("d0", 0)}}, `"nope0": does not exist`},
		{Spec{Key: "x", HostIfaces: []string{"d0"}}, `"d0": is a routed interface without a pin: the sandbox's network namespace is needed`},
		{Spec{Key: "x", HostIfaces: []string{"d0"}, Pins: []Pin{{HostIface: "d0", Addrs: []netip.Addr{netip.MustParseAddr("ff02::1")}}}},
			`pin for host interface "d0": address ff02::1: not a unicast address`},
		{Spec{Key: "x", HostIfaces: []string{"d0"}, Pins: []Pin{dummyPin("d0", 0), dummyPin("d0", 1)}}, `two pins for host interface "d0"`},
		{Spec{Key: "x", SandboxNetNS: rt.path}, "no veth of the sandbox"},
		{Spec{Key: "../x", HostIfaces: []string{"d0"}}, `sandbox key "../x"`},
		{Spec{Key: "x", HostIfaces: []string{"d0"}, AllowDirect: name}, `"example.com:443": a name entry cannot bypass the proxy`},
	} {
		_, err := Apply(rt.path, tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Apply(%+v): %v, want an error containing %q", tc.spec, err, tc.want)
		}
	}
	if tables := tableNames(t, rt.path); len(tables) != 0 {
		t.Errorf("refused Applies left tables: %v", tables)
	}
	if _, err := Apply(filepath.Join(t.TempDir(), "none"), dummySpec("x", "d0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Apply in a namespace that does not exist: %v, want ErrNotExist", err)
	}
}

func TestRemoveOfNothing(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt := newDummyRuntime(t, 1)
	if err := Remove(rt.path, "x"); err != nil {
		t.Errorf("Remove with no tables: %v", err)
	}
	if _, err := Apply(rt.path, dummySpec("x", "d0")); err != nil {
		t.Fatal(err)
	}
	if err := Remove(rt.path, "y"); err != nil {
		t.Errorf("Remove of a sandbox that has no rules: %v", err)
	}
	if err := Check(rt.path, dummySpec("x", "d0")); err != nil {
		t.Errorf("x after removing y: %v", err)
	}
	if err := Remove(filepath.Join(t.TempDir(), "gone"), "x"); err != nil {
		t.Errorf("Remove in a namespace that is gone: %v", err)
	}
	if err := Remove(rt.path, "a/b"); err == nil {
		t.Errorf("Remove with an invalid key: nil, want an error")
	}
}

// baseRuleHandles returns the handles of the rules in every base chain of
// the layer's tables.
func baseRuleHandles(t *testing.T, nsPath string) []uint64 {
	t.Helper()
	n, err := openRuntimeNS(nsPath, false)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var out []uint64
	for _, l := range layouts() {
		for _, b := range l.bases {
			rules, err := n.Conn.GetRules(l.table, l.baseChain(b))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rules {
				out = append(out, r.Handle)
			}
		}
	}
	return out
}

// TestApplyLeavesIntactBaseChains: a sandbox that joins others leaves the
// shared base chains alone when they are intact (rebuilding them would
// give their rules new handles), and still rebuilds one that was altered
// (see TestCheckDetectsTampering).
func TestApplyLeavesIntactBaseChains(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	rt := newDummyRuntime(t, 2)
	if _, err := Apply(rt.path, dummySpec("x", "d0")); err != nil {
		t.Fatal(err)
	}
	before := baseRuleHandles(t, rt.path)
	if len(before) == 0 {
		t.Fatal("no rules in the base chains")
	}
	y := dummySpec("y", "d1")
	if _, err := Apply(rt.path, y); err != nil {
		t.Fatal(err)
	}
	if after := baseRuleHandles(t, rt.path); !slices.Equal(after, before) {
		t.Errorf("base chain rule handles went from %v to %v: the chains were rebuilt", before, after)
	}
	for _, s := range []Spec{dummySpec("x", "d0"), y} {
		if err := Check(rt.path, s); err != nil {
			t.Errorf("Check %s: %v", s.Key, err)
		}
	}
}
