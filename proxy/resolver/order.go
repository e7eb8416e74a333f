package resolver

import (
	"net"
	"net/netip"
	"slices"
)

// sortForDialing orders addrs, the addresses of one name, the way to dial
// them: by RFC 6724's destination address selection, as the Go resolver
// orders them (and so as the proxy dialed them before it had a resolver of
// its own). Of the rules the Go resolver applies, these: addresses the host
// has no route to go last (rule 1); then those whose scope matches that of
// the source address the host would use (rule 2); whose label matches it
// (rule 5: an IPv6 destination reached from a ULA source does not, so a
// host with only ULA IPv6 dials IPv4 first); higher precedence (rule 6:
// IPv6 before IPv4 otherwise); smaller scope (rule 8); the order of the
// answers (rule 10). Rule 9, the longest prefix shared with the source,
// is left out: it only orders addresses that tie on all of these.
//
// The source addresses are found by connecting a UDP socket to each
// address, which sends nothing.
func sortForDialing(addrs []netip.Addr) {
	if len(addrs) < 2 {
		return
	}
	type ranked struct {
		dst, src netip.Addr // src invalid: no route
	}
	rs := make([]ranked, len(addrs))
	for i, a := range addrs {
		rs[i] = ranked{dst: a, src: sourceFor(a)}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		// Rule 1: avoid unusable destinations.
		if ua, ub := !a.src.IsValid(), !b.src.IsValid(); ua != ub {
			return boolOrder(ub, ua)
		}
		if !a.src.IsValid() {
			return 0
		}
		// Rule 2: prefer matching scope.
		if ma, mb := scope(a.dst) == scope(a.src), scope(b.dst) == scope(b.src); ma != mb {
			return boolOrder(ma, mb)
		}
		// Rule 5: prefer matching label.
		if ma, mb := classify(a.dst).label == classify(a.src).label, classify(b.dst).label == classify(b.src).label; ma != mb {
			return boolOrder(ma, mb)
		}
		// Rule 6: prefer higher precedence.
		if pa, pb := classify(a.dst).precedence, classify(b.dst).precedence; pa != pb {
			return int(pb) - int(pa)
		}
		// Rule 8: prefer smaller scope.
		if sa, sb := scope(a.dst), scope(b.dst); sa != sb {
			return int(sa) - int(sb)
		}
		return 0
	})
	for i, r := range rs {
		addrs[i] = r.dst
	}
}

// boolOrder sorts a before b when a is preferred and b is not.
func boolOrder(a, b bool) int {
	switch {
	case a && !b:
		return -1
	case b && !a:
		return 1
	}
	return 0
}

// sourceFor returns the source address the host would use to reach dst,
// or the zero Addr if it has no route there.
func sourceFor(dst netip.Addr) netip.Addr {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
}

// policy is a row of RFC 6724's default policy table (section 2.1).
type policy struct {
	prefix            netip.Prefix
	precedence, label uint8
}

// policyTable is RFC 6724's default policy table, longest prefixes first.
var policyTable = []policy{
	{netip.MustParsePrefix("::1/128"), 50, 0},
	{netip.MustParsePrefix("::ffff:0:0/96"), 35, 4},
	{netip.MustParsePrefix("::/96"), 1, 3},
	{netip.MustParsePrefix("2001::/32"), 5, 5},
	{netip.MustParsePrefix("2002::/16"), 30, 2},
	{netip.MustParsePrefix("3ffe::/16"), 1, 12},
	{netip.MustParsePrefix("fec0::/10"), 1, 11},
	{netip.MustParsePrefix("fc00::/7"), 3, 13},
	{netip.MustParsePrefix("::/0"), 40, 1},
}

// classify returns a's row of the policy table; IPv4 addresses are
// looked up as IPv4-mapped ones.
func classify(a netip.Addr) policy {
	if a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	for _, p := range policyTable {
		if p.prefix.Contains(a) {
			return p
		}
	}
	return policyTable[len(policyTable)-1]
}

// Scopes of RFC 6724 section 3.1 (RFC 4291's multicast scope values).
const (
	scopeLinkLocal = 0x2
	scopeSiteLocal = 0x5
	scopeGlobal    = 0xe
)

// siteLocal is the deprecated IPv6 site-local prefix (RFC 3879).
var siteLocal = netip.MustParsePrefix("fec0::/10")

// scope returns a's scope: IPv4 loopback and link-local addresses count
// as link-local, as RFC 6724 section 3.2 says.
func scope(a netip.Addr) uint8 {
	switch {
	case a.IsMulticast() && a.Is6():
		return a.As16()[1] & 0xf
	case a.IsLoopback(), a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return scopeLinkLocal
	case a.Is6() && siteLocal.Contains(a):
		return scopeSiteLocal
	}
	return scopeGlobal
}
