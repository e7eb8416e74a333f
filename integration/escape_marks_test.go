package integration

import (
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
)

// TestRulesetMarks checks that the escape suite finds the marks a ruleset
// uses, so that its SO_MARK row tries them: a comparison, a masked ct mark,
// a mark being set, and a set of marks.
func TestRulesetMarks(t *testing.T) {
	skipUnlessRoot(t)
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		netns.Close()
		testutils.UnmountNS(netns)
	})
	c, err := nftables.New(nftables.WithNetNSFd(int(netns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	u32 := binaryutil.NativeEndian.PutUint32
	table := c.AddTable(&nftables.Table{Name: "marks", Family: nftables.TableFamilyINet})
	chain := c.AddChain(&nftables.Chain{Name: "out", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
	set := &nftables.Set{Table: table, Name: "exempt", KeyType: nftables.TypeMark}
	if err := c.AddSet(set, []nftables.SetElement{{Key: u32(0x5)}, {Key: u32(0x6)}}); err != nil {
		t.Fatal(err)
	}
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	for _, exprs := range [][]expr.Any{
		// meta mark 0x1234 accept
		{&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: u32(0x1234)}, accept},
		// ct mark & 0xff00 == 0x4200 accept
		{&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: u32(0xff00), Xor: u32(0)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: u32(0x4200)}, accept},
		// meta mark set 0x77
		{&expr.Immediate{Register: 1, Data: u32(0x77)}, &expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1}},
		// meta mark @exempt accept
		{&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, &expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID}, accept},
		// not a mark: meta skuid 0x99 accept
		{&expr.Meta{Key: expr.MetaKeySKUID, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: u32(0x99)}, accept},
	} {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs})
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("install the test ruleset: %v", err)
	}

	got, err := rulesetMarks(netns.Path(), "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{0x5, 0x6, 0x77, 0x1234, 0x4200, 0xff00}; !slices.Equal(got, want) {
		t.Errorf("marks %#x, want %#x", got, want)
	}
	tried := probeMarks(got)
	if !slices.Contains(tried, 0x1234) || !slices.Contains(tried, 0x4000) || len(tried) != len(got)+len(defaultMarks) {
		t.Errorf("probe marks %#x: want the ruleset's %#x and the defaults %#x", tried, got, defaultMarks)
	}
}

// TestEscapeVerdict checks when an escape counts as honest: only under a
// partial label whose reason covers the capability the attempt used.
func TestEscapeVerdict(t *testing.T) {
	escaped := counters{{"evil.example.test tcp/9000", "bytes"}: 3}
	raw := escapeAttempt{id: "af-packet", needs: "CAP_NET_RAW"}
	plain := escapeAttempt{id: "tcp"}
	cni := "partial (in-namespace rules only: a container holding CAP_NET_ADMIN can remove them, one holding CAP_NET_RAW can send around them, and a runtime with a network stack of its own (gVisor, a microVM) sends past them)"
	for _, tc := range []struct {
		label   string
		mode    escapeMode
		attempt escapeAttempt
		arrived counters
		ok      bool
	}{
		{"full", modeDefaultCaps, plain, counters{}, true},
		{"full", modeDefaultCaps, plain, escaped, false},
		{"full", modeDefaultCaps, raw, escaped, false},
		{"full", modeFlushed, plain, escaped, false},
		{"partial (container holds CAP_NET_RAW)", modeDefaultCaps, plain, escaped, false},
		{"partial (container holds CAP_NET_RAW)", modeDefaultCaps, raw, escaped, true},
		{"partial (container holds CAP_NET_RAW)", modeFlushed, plain, escaped, false},
		{"partial (container holds CAP_NET_ADMIN)", modeFlushed, plain, escaped, true},
		{"partial (container holds CAP_NET_ADMIN)", modeDefaultCaps, raw, escaped, true},
		{cni, modeDefaultCaps, raw, escaped, true},
		{cni, modeFlushed, plain, escaped, true},
		{cni, modeDefaultCaps, plain, escaped, false},
		{"n/a", modeFlushed, plain, escaped, false},
	} {
		col := &escapeColumn{mode: tc.mode, label: tc.label}
		if ok, why := col.verdict(escapeResult{attempt: tc.attempt, arrived: tc.arrived}); ok != tc.ok {
			t.Errorf("label %q, %s, attempt %s, arrived %q: ok %v (%s), want %v", tc.label, tc.mode, tc.attempt.id, tc.arrived.summary(), ok, why, tc.ok)
		}
	}
	if s := escaped.summary(); s != "3 bytes" {
		t.Errorf("summary %q", s)
	}
	if s := (counters{{"x", "requests"}: 1, {"y", "connections"}: 2, {"y", "bytes"}: 0}).summary(); s != "2 connections, 1 request" {
		t.Errorf("summary %q", s)
	}
	if s := (counters{{"x", "entries"}: 1, {"y", "addresses"}: 1, {"z", "routes"}: 2, {"z", "packets"}: 1}).summary(); s != "1 packet, 1 entry, 2 routes, 1 address" {
		t.Errorf("summary %q", s)
	}
}
