package nft

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// newNetNS creates a throwaway network namespace and returns its path; it
// is deleted when the test ends.
func newNetNS(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "dm-nft-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return filepath.Join("/var/run/netns", name)
}

func openNS(t *testing.T, path string) *NetNS {
	t.Helper()
	ns, err := OpenNetNS(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// vocabulary is a rule for each match, in the chains where the kernel
// accepts them.
func vocabulary() (prerouting, output []RuleSpec) {
	prerouting = []RuleSpec{
		Rule("daddr", Daddr(netip.MustParseAddr("203.0.113.53")), UDP(), Dport(53), Accept()),
		Rule("daddr prefix", DaddrPrefix(netip.MustParsePrefix("2001:db8::/32")), TCP(), DportRange(1000, 2000), Drop()),
		Rule("daddr prefix /0", DaddrPrefix(netip.MustParsePrefix("0.0.0.0/0")), Return()),
		Rule("daddr masked", DaddrMasked(netip.MustParsePrefix("198.51.100.7/32")), TCP(), DportBetween(5432, 5432), Accept()),
		Rule("saddr masked", SaddrMasked(netip.MustParsePrefix("198.51.100.0/24")), L4ProtoNot(unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6), Drop()),
		Rule("small echo", DaddrPrefix(netip.MustParsePrefix("203.0.113.0/24")), L4Proto(unix.IPPROTO_ICMP), ICMPType(ICMPEchoRequest),
			IPv4NoOptions(), IPLengthRange(false, EchoIPv4MinLen, EchoIPv4MaxLen), Accept()),
		Rule("small echo between", NFProtoIPv6(), L4Proto(unix.IPPROTO_ICMPV6), ICMPType(ICMPv6EchoRequest),
			IPLengthBetween(true, EchoIPv6MinLen, EchoIPv6MaxLen), Accept()),
		Rule("not solicitations", NFProtoIPv6(), L4Proto(unix.IPPROTO_ICMPV6), ICMPTypeNot(ICMPv6NeighSolicit, ICMPv6RouterSolicit), HopLimit(255), Drop()),
		Rule("ct", NFProtoIPv4(), CtState(expr.CtStateBitESTABLISHED), CtReply(), CtStatus(1<<5), Accept()),
		Rule("fib local", FibDaddrLocal(), Accept()),
		Rule("fib not local", FibDaddrNotLocal(), Drop()),
		Rule("ipv4 saddr", IPv4Saddr().Eq(netip.MustParseAddr("198.51.100.2").AsSlice()), Accept()),
		Rule("ipv6 saddr", IPv6Saddr().Neq(make([]byte, 16)), Accept()),
	}
	prerouting = append(prerouting, ICMPErrorRules()...)
	prerouting = append(prerouting, MLDRules()...)
	output = []RuleSpec{
		Rule("oifname", OifName("lo"), Accept()),
		Rule("oifname not", OifNameNot("a-fifteen-bytes"), Drop()),
	}
	return prerouting, output
}

// TestCompareInstalled installs every match and reads it back: what the
// kernel returns must compare equal to what was sent, and a difference of
// one rule must not.
func TestCompareInstalled(t *testing.T) {
	ns := openNS(t, newNetNS(t))
	c := ns.Conn
	tbl := &nftables.Table{Name: "nft-test", Family: nftables.TableFamilyINet}
	if err := CheckTable(c, tbl); err == nil || err.Error() != "table is missing" {
		t.Fatalf("CheckTable before the table exists = %v, want table is missing", err)
	}
	if ok, err := HasTable(c, tbl); ok || err != nil {
		t.Fatalf("HasTable before the table exists = %v, %v", ok, err)
	}

	prerouting, output := vocabulary()
	chains := []*nftables.Chain{
		{Name: "prerouting", Table: tbl, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookPrerouting,
			Priority: nftables.ChainPriorityMangle, Policy: ptr(nftables.ChainPolicyAccept)},
		{Name: "output", Table: tbl, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput,
			Priority: nftables.ChainPriorityFilter, Policy: ptr(nftables.ChainPolicyDrop)},
	}
	ReplaceTable(c, tbl)
	for i, rules := range [][]RuleSpec{prerouting, output} {
		ch := c.AddChain(chains[i])
		for _, r := range rules {
			AddRule(c, ch, r)
		}
	}
	other := c.AddTable(&nftables.Table{Name: "nft-other", Family: nftables.TableFamilyINet})
	c.AddChain(&nftables.Chain{Name: "elsewhere", Table: other})
	if err := c.Flush(); err != nil {
		t.Fatalf("install: %v", err)
	}

	if err := CheckTable(c, tbl); err != nil {
		t.Errorf("CheckTable: %v", err)
	}
	if ok, err := HasTable(c, tbl); !ok || err != nil {
		t.Errorf("HasTable = %v, %v", ok, err)
	}
	installed, err := Chains(c, tbl)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*nftables.Chain{}
	for _, ch := range installed {
		byName[ch.Name] = ch
	}
	if len(installed) != 2 || byName["prerouting"] == nil || byName["output"] == nil {
		t.Fatalf("Chains = %v, want prerouting and output only", installed)
	}
	for i, rules := range [][]RuleSpec{prerouting, output} {
		ch := byName[chains[i].Name]
		if err := CompareBaseChain(chains[i], ch); err != nil {
			t.Errorf("CompareBaseChain: %v", err)
		}
		if err := CompareRules(c, ch, rules, "test"); err != nil {
			t.Errorf("CompareRules of the rules as installed: %v", err)
		}
	}

	pre := byName["prerouting"]
	if err := CompareBaseChain(chains[1], pre); err == nil || !strings.Contains(err.Error(), "is type filter hook 0 priority -150") {
		t.Errorf("CompareBaseChain with another hook = %v", err)
	}
	drop := *chains[0]
	drop.Policy = ptr(nftables.ChainPolicyDrop)
	if err := CompareBaseChain(&drop, pre); err == nil || !strings.Contains(err.Error(), `chain "prerouting" has policy accept, want drop`) {
		t.Errorf("CompareBaseChain with another policy = %v", err)
	}
	if err := CompareRules(c, pre, prerouting[:len(prerouting)-1], "test"); err == nil ||
		!strings.Contains(err.Error(), `("ipv6 mldv2 report is accepted" (handle`) || !strings.Contains(err.Error(), "is not part of the test") {
		t.Errorf("CompareRules with a rule less = %v", err)
	}
	extra := append(append([]RuleSpec{}, prerouting...), Rule("extra", Accept()))
	if err := CompareRules(c, pre, extra, "test"); err == nil || !strings.Contains(err.Error(), "(extra) is missing") {
		t.Errorf("CompareRules with a rule more = %v", err)
	}
	altered := append([]RuleSpec{}, prerouting...)
	altered[1] = Rule("daddr prefix", DaddrPrefix(netip.MustParsePrefix("2001:db8::/32")), TCP(), DportBetween(1000, 2000), Drop())
	if err := CompareRules(c, pre, altered, "test"); err == nil || !strings.Contains(err.Error(), `rule 2 is "daddr prefix" (handle`) {
		t.Errorf("CompareRules with the other encoding of a range = %v", err)
	}
	altered[1] = prerouting[1]
	altered[0] = Rule("daddr", Daddr(netip.MustParseAddr("203.0.113.53")), UDP(), Dport(54), Accept())
	if err := CompareRules(c, pre, altered, "test"); err == nil || !strings.Contains(err.Error(), `rule 1 is "daddr" (handle`) {
		t.Errorf("CompareRules with another port = %v", err)
	}

}

// TestRuleName names a rule by its comment, and says when it has none.
func TestRuleName(t *testing.T) {
	ns := openNS(t, newNetNS(t))
	c := ns.Conn
	tbl := c.AddTable(&nftables.Table{Name: "nft-test", Family: nftables.TableFamilyINet})
	ch := c.AddChain(&nftables.Chain{Name: "c", Table: tbl})
	AddRule(c, ch, Rule("named", Accept()))
	c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: Drop()})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	rules, err := c.GetRules(tbl, ch)
	if err != nil || len(rules) != 2 {
		t.Fatalf("rules = %v, %v", rules, err)
	}
	if got := RuleName(rules[0]); !strings.HasPrefix(got, `"named" (handle `) {
		t.Errorf("RuleName of a rule with a comment = %s", got)
	}
	if got := RuleName(rules[1]); !strings.HasPrefix(got, "a rule without comment (handle ") {
		t.Errorf("RuleName of a rule without one = %s", got)
	}
}

func TestOpenNetNS(t *testing.T) {
	if _, err := OpenNetNS("/proc/self/status"); !errors.Is(err, ErrNotNetNS) {
		t.Errorf("OpenNetNS of a file = %v, want ErrNotNetNS", err)
	}
	if _, err := OpenNetNS("/proc/self/ns/uts"); !errors.Is(err, ErrNotNetNS) {
		t.Errorf("OpenNetNS of another namespace = %v, want ErrNotNetNS", err)
	}
	missing := filepath.Join(t.TempDir(), "gone")
	if _, err := OpenNetNS(missing); !IsNotExist(err) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenNetNS of a missing path = %v, want not exist", err)
	}
	ns := openNS(t, newNetNS(t))
	if _, err := ns.Conn.ListTables(); err != nil {
		t.Errorf("list tables in the namespace: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
