package enforce

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func chainNames(cs []chainSpec) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.name)
	}
	return names
}

func comments(c chainSpec) string {
	var out []string
	for _, r := range c.rules {
		out = append(out, r.Comment)
	}
	return strings.Join(out, "\n")
}

func find(t *testing.T, cs []chainSpec, name string) chainSpec {
	t.Helper()
	for _, c := range cs {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no chain %q in %v", name, chainNames(cs))
	return chainSpec{}
}

func TestSpecNormalized(t *testing.T) {
	s, err := Spec{Resolvers: []netip.Addr{
		netip.MustParseAddr("::ffff:203.0.113.53"), netip.MustParseAddr("203.0.113.53"), netip.MustParseAddr("2001:db8::53"),
	}}.normalized()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Resolvers; !slices.Equal(got, []netip.Addr{netip.MustParseAddr("203.0.113.53"), netip.MustParseAddr("2001:db8::53")}) {
		t.Errorf("resolvers = %v, want unmapped and deduplicated", got)
	}

	for _, tc := range []struct {
		addr netip.Addr
		want string
	}{
		{netip.Addr{}, `resolver #2 "invalid IP": not an IP address`},
		{netip.MustParseAddr("fe80::1%eth0"), `resolver #2 "fe80::1%eth0": scoped address`},
		{netip.MustParseAddr("0.0.0.0"), "unspecified"},
		{netip.MustParseAddr("ff02::fb"), "multicast"},
	} {
		_, err := Spec{Resolvers: []netip.Addr{netip.MustParseAddr("203.0.113.53"), tc.addr}}.normalized()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("resolver %v: error %v, want it to contain %q", tc.addr, err, tc.want)
		}
	}
}

func TestRulesetLayout(t *testing.T) {
	resolvers := []netip.Addr{netip.MustParseAddr("203.0.113.53")}
	direct := []Direct{{Prefix: netip.MustParsePrefix("203.0.113.0/28"), PortLo: 5432, PortHi: 5432},
		{Prefix: netip.MustParsePrefix("203.0.113.0/28")}, {Prefix: netip.MustParsePrefix("2001:db8::/64")}}
	full := buildRuleset(Spec{Port4: 4000, Port6: 6000, Resolvers: resolvers, AllowICMP: true, Direct: direct})
	if got, want := chainNames(full), []string{chainNATOutput, chainNATPrerouting, chainInput, chainOutput, chainForward}; !slices.Equal(got, want) {
		t.Errorf("chains = %v, want %v", got, want)
	}
	for _, name := range []string{chainOutput, chainForward} {
		out := comments(find(t, full, name))
		for _, want := range []string{"dns udp to resolver 203.0.113.53",
			"icmp echo request to allowDirect 203.0.113.0/28 of at most 64 data bytes is accepted",
			"icmpv6 echo request to allowDirect 2001:db8::/64 of at most 64 data bytes is accepted",
			"icmp destination unreachable related to a flow is accepted", "icmpv6 packet too big related to a flow is accepted"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q:\n%s", name, want, out)
			}
		}
		if n := strings.Count(out, "echo request"); n != 2 {
			t.Errorf("%s has %d echo rules, want one per allowDirect prefix (2):\n%s", name, n, out)
		}
		if !strings.HasSuffix(out, "other tcp is reset\neverything else is rejected") {
			t.Errorf("%s does not end in the rejects:\n%s", name, out)
		}
	}
	out := comments(find(t, full, chainOutput))
	for _, want := range []string{"port 4000 is accepted", "port 6000 is accepted", "neighbour solicitation"} {
		if !strings.Contains(out, want) {
			t.Errorf("filter-output lacks %q:\n%s", want, out)
		}
	}
	for _, never := range []string{"icmp is accepted", "icmpv6 is accepted", "router advertisement", "icmp redirect"} {
		if strings.Contains(out, never) {
			t.Errorf("filter-output has %q:\n%s", never, out)
		}
	}

	noICMP := comments(find(t, buildRuleset(Spec{Port4: 4000, Resolvers: resolvers, Direct: direct}), chainOutput))
	if strings.Contains(noICMP, "echo") || !strings.Contains(noICMP, "neighbour solicitation") {
		t.Errorf("without AllowICMP, filter-output must drop echo requests but keep neighbour discovery:\n%s", noICMP)
	}

	// One listener port shared by both families: one pair of input rules.
	same := find(t, buildRuleset(Spec{Port4: 4000, Port6: 4000}), chainInput)
	if len(same.rules) != 2 {
		t.Errorf("input rules for a shared port: %d, want 2:\n%s", len(same.rules), comments(same))
	}

	// Port6 = 0: IPv6 TCP is not redirected (and so is reset).
	v4only := buildRuleset(Spec{Port4: 4000})
	for _, name := range []string{chainNATOutput, chainNATPrerouting} {
		if c := comments(find(t, v4only, name)); strings.Contains(c, "ipv6") || !strings.Contains(c, "ipv4") {
			t.Errorf("%s with Port6 = 0:\n%s", name, c)
		}
	}

	none, err := Spec{Port4: 4000, Port6: 6000, Resolvers: resolvers, AllowICMP: true, DenyAll: true}.normalized()
	if err != nil {
		t.Fatal(err)
	}
	deny := buildRuleset(none)
	if got, want := chainNames(deny), []string{chainOutput, chainForward}; !slices.Equal(got, want) {
		t.Errorf("mode none chains = %v, want %v", got, want)
	}
	for _, c := range deny {
		if s := comments(c); strings.Contains(s, "dns") || strings.Contains(s, "icmp is") || strings.Contains(s, "proxy") {
			t.Errorf("mode none %s lets more than loopback and replies out:\n%s", c.name, s)
		}
	}
}
