package guard

import (
	"fmt"
	"net/netip"
)

// special is a range of addresses the proxy must not dial unless an entry
// inside it admits them, with what it is in the words of a refusal.
// private marks the address space networks are built on (RFC 1918, CGNAT,
// ULA...), which a Scope's prefixes may open (see Config.Scopes); the
// rest (loopback, link-local, multicast, metadata services...) no Scope
// opens.
type special struct {
	prefix  netip.Prefix
	what    string
	private bool
}

// describe renders s for a refusal: what it is and, unless it is one
// address, the range ("RFC 1918 (10.0.0.0/8)").
func (s special) describe() string {
	if s.prefix.IsSingleIP() {
		return s.what
	}
	return fmt.Sprintf("%s (%v)", s.what, s.prefix)
}

func sp(prefix, what string) special {
	return special{prefix: netip.MustParsePrefix(prefix), what: what}
}

// spPrivate is sp for private address space.
func spPrivate(prefix, what string) special {
	s := sp(prefix, what)
	s.private = true
	return s
}

// metadata is what the cloud metadata services are called in refusals.
const metadata = "cloud metadata service"

// specialRanges are the ranges refused whatever the host (see the package
// documentation). Ranges that hold one another are all listed: the
// narrowest one that holds an address is the one an entry must lie in.
var specialRanges = []special{
	sp("0.0.0.0/8", "this network"),
	spPrivate("10.0.0.0/8", "RFC 1918"),
	spPrivate("100.64.0.0/10", "shared address space (RFC 6598, CGNAT)"),
	sp("100.100.100.200/32", metadata),
	sp("127.0.0.0/8", "loopback"),
	sp("168.63.129.16/32", metadata),
	sp("169.254.0.0/16", "link-local"),
	sp("169.254.169.254/32", metadata),
	sp("169.254.170.2/32", metadata),
	spPrivate("172.16.0.0/12", "RFC 1918"),
	sp("192.0.0.0/24", "IETF protocol assignments"),
	spPrivate("192.168.0.0/16", "RFC 1918"),
	spPrivate("198.18.0.0/15", "benchmarking (RFC 2544)"),
	sp("224.0.0.0/4", "multicast"),
	sp("240.0.0.0/4", "reserved"),
	sp("255.255.255.255/32", "broadcast"),

	sp("::/128", "unspecified"),
	sp("::1/128", "loopback"),
	spPrivate("fc00::/7", "unique local (ULA)"),
	sp("fd00:ec2::254/128", metadata),
	sp("fe80::/10", "link-local"),
	spPrivate("fec0::/10", "site-local (deprecated)"),
	sp("ff00::/8", "multicast"),
}

// linkScoped are ranges whose connected routes (169.254.0.0/16 dev eth0,
// fe80::/64 on every interface) add nothing: they are refused as
// link-local already, and saying so is the clearer reason.
var linkScoped = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
}

// usefulConnected reports whether a connected route's prefix says
// something the fixed rules do not: not a default route, not link-local
// space, not one of the IPv6 ranges whose addresses carry an IPv4 address
// ("::/96 dev sit0", "64:ff9b::/96 dev nat64", "2001::/32 dev teredo",
// a configured NAT64 prefix; see translators), whose addresses are judged
// by the IPv4 addresses they carry.
func usefulConnected(p netip.Prefix, translators []netip.Prefix) bool {
	if p.Bits() == 0 {
		return false
	}
	for _, r := range linkScoped {
		if within(p, r) {
			return false
		}
	}
	for _, r := range translators {
		if within(p, r) {
			return false
		}
	}
	return true
}

// within reports whether p lies inside r.
func within(p, r netip.Prefix) bool {
	return p.Bits() >= r.Bits() && r.Contains(p.Addr())
}

// RefusedRange reports whether every address of p lies in one of the
// ranges the proxy refuses whatever the host (private space, loopback,
// link-local, metadata services...: see the package documentation), so
// that a name the proxy dials never reaches an address of p unless an
// entry inside one of those ranges, or a Config.Scopes prefix for a
// private one, opens it. private says whether the narrowest such range
// is private space, which Scopes may open. The Kubernetes node agent
// uses it to tell which Deny rules of a cluster's policy the guard
// already holds for name entries.
func RefusedRange(p netip.Prefix) (refused, private bool) {
	p = p.Masked()
	best := -1
	for i, s := range specialRanges {
		if within(p, s.prefix) && (best < 0 || s.prefix.Bits() > specialRanges[best].prefix.Bits()) {
			best = i
		}
	}
	if best < 0 {
		return false, false
	}
	return true, specialRanges[best].private
}
