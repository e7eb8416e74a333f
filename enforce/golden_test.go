package enforce

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/doorman-net/doorman/enforce/nft/nfttest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/ruleset.golden from the ruleset the code builds now")

// TestRulesetGolden pins the ruleset to the expressions, byte for byte as
// netlink attributes, that earlier releases installed: Check of a release
// compares an installed table with what it would install, so a sandbox
// enforced by the previous release must read back as exactly this.
func TestRulesetGolden(t *testing.T) {
	direct := []Direct{
		{Prefix: netip.MustParsePrefix("203.0.113.0/28"), PortLo: 5432, PortHi: 5432},
		{Prefix: netip.MustParsePrefix("203.0.113.0/28")},
		{Prefix: netip.MustParsePrefix("198.51.100.7/32"), PortLo: 8000, PortHi: 8080},
		{Prefix: netip.MustParsePrefix("::ffff:198.51.100.0/120"), PortLo: 53, PortHi: 53},
		{Prefix: netip.MustParsePrefix("2001:db8::/64")},
		{Prefix: netip.MustParsePrefix("2001:db8:1::1/128"), PortLo: 1, PortHi: 65535},
		{Prefix: netip.MustParsePrefix("0.0.0.0/0"), PortLo: 853, PortHi: 853},
	}
	resolvers := []netip.Addr{netip.MustParseAddr("203.0.113.53"), netip.MustParseAddr("::ffff:198.51.100.53"),
		netip.MustParseAddr("2001:db8::53"), netip.MustParseAddr("127.0.0.11")}
	specs := []struct {
		name string
		spec Spec
	}{
		{"everything", Spec{Port4: 4000, Port6: 6000, DNSPort4: 5300, DNSPort6: 5301, Resolvers: resolvers, AllowICMP: true, Direct: direct}},
		{"no dns filter, one port", Spec{Port4: 4000, Port6: 4000, Resolvers: resolvers, Direct: direct[:2]}},
		{"ipv4 only", Spec{Port4: 4000, DNSPort4: 5300, Resolvers: resolvers[:1], AllowICMP: true}},
		{"mode none", Spec{Port4: 4000, Port6: 6000, Resolvers: resolvers, AllowICMP: true, Direct: direct, DenyAll: true}},
	}
	var b strings.Builder
	for _, sp := range specs {
		s, err := sp.spec.normalized()
		if err != nil {
			t.Fatalf("%s: %v", sp.name, err)
		}
		fmt.Fprintf(&b, "spec %s\n", sp.name)
		for _, cs := range buildRuleset(s) {
			fmt.Fprintf(&b, "chain %s type %s hook %d priority %d policy %d\n", cs.name, cs.typ, cs.hook, cs.priority, cs.policy)
			for _, r := range cs.rules {
				fmt.Fprintf(&b, "  rule %q\n", r.Comment)
				nfttest.WriteExprs(t, &b, nftables.TableFamilyINet, r.Exprs)
			}
		}
	}
	nfttest.Compare(t, "testdata/ruleset.golden", b.String(), *updateGolden)
}
