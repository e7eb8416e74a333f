package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
)

// proto is a set of the protocols a rule matches.
type proto uint8

const (
	pTCP proto = 1 << iota
	pUDP
	pSCTP
	pICMP
	pAll = pTCP | pUDP | pSCTP | pICMP
)

func (p proto) String() string {
	var s []string
	for _, x := range []struct {
		p    proto
		name string
	}{{pTCP, "TCP"}, {pUDP, "UDP"}, {pSCTP, "SCTP"}, {pICMP, "ICMP"}} {
		if p&x.p != 0 {
			s = append(s, x.name)
		}
	}
	return strings.Join(s, "+")
}

// atom is one piece of traffic a rule matches: a destination (every
// destination, a name, a wildcard or a prefix), a port range and the
// protocols. A rule's traffic is a list of atoms.
type atom struct {
	all    bool // every destination, named or not
	kind   conf.Kind
	name   string // KindName: the name; KindWildcard: the suffix
	prefix netip.Prefix
	lo, hi uint16 // ports, 1-65535 for every port
	proto  proto
	src    *rule // the rule it comes from, for notes
}

// anyPort is every port.
const minPort, maxPort = 1, 65535

func (a atom) host() string {
	switch {
	case a.all:
		return "every destination"
	case a.kind == conf.KindName:
		return a.name
	case a.kind == conf.KindWildcard:
		return "*." + a.name
	}
	return a.prefix.String()
}

func (a atom) String() string {
	s := a.host()
	if a.lo != minPort || a.hi != maxPort {
		s += fmt.Sprintf(" port %d", a.lo)
		if a.hi != a.lo {
			s += fmt.Sprintf("-%d", a.hi)
		}
	}
	if a.proto != pAll {
		s += " (" + a.proto.String() + ")"
	}
	return s
}

func (a atom) isName() bool { return !a.all && a.kind != conf.KindPrefix }

// entry is a as an allowlist entry (for a name, wildcard or prefix).
func (a atom) entry() conf.Entry {
	e := conf.Entry{Kind: a.kind, Name: a.name, Prefix: a.prefix}
	if a.lo != minPort || a.hi != maxPort {
		e.Ports = conf.PortRange{Lo: a.lo, Hi: a.hi}
	}
	e.Raw = e.String()
	return e
}

// subtractor subtracts blockers from atoms and says when it cannot do so
// exactly.
type subtractor struct {
	// clusterDomain and clusterPrefixes are the names and the private
	// ranges the proxy opens to them (serviceCIDRs, podCIDRs).
	clusterDomain   string
	clusterPrefixes []netip.Prefix
	// inexact is called for each subtraction doorman cannot express.
	inexact func(a, b atom, why string)
}

// subtract returns a minus b: under is what is certainly in a and not in
// b, over what may be (they differ only when the subtraction cannot be
// expressed, when exact is false and why says why).
func (s *subtractor) subtract(a, b atom) (under, over []atom, exact bool, why string) {
	common := a.proto & b.proto
	lo, hi := max(a.lo, b.lo), min(a.hi, b.hi)
	if common == 0 || lo > hi {
		return []atom{a}, []atom{a}, true, ""
	}
	var keep []atom
	if rest := a.proto &^ b.proto; rest != 0 {
		r := a
		r.proto = rest
		keep = append(keep, r)
	}
	base := a
	base.proto = common
	if a.lo < lo {
		r := base
		r.hi = lo - 1
		keep = append(keep, r)
	}
	if hi < a.hi {
		r := base
		r.lo = hi + 1
		keep = append(keep, r)
	}
	mid := base
	mid.lo, mid.hi = lo, hi
	hosts, exact, why := s.hostMinus(mid, b)
	under = append(keep, hosts...)
	if exact {
		return under, under, true, ""
	}
	return under, []atom{a}, false, why
}

// hostMinus returns the part of a's destinations not among b's (same
// ports and protocols), and whether that is exact; when it is not, the
// atoms returned are empty (the part certainly outside b).
func (s *subtractor) hostMinus(a, b atom) ([]atom, bool, string) {
	switch {
	case b.all:
		return nil, true, ""
	case a.all:
		return nil, false, "doorman cannot admit every destination except some"
	case a.kind == conf.KindPrefix && b.kind == conf.KindPrefix:
		var out []atom
		for _, p := range prefixMinus(a.prefix, b.prefix) {
			r := a
			r.prefix = p
			out = append(out, r)
		}
		return out, true, ""
	case a.isName() && b.isName():
		switch {
		case nameCovers(b, a):
			return nil, true, ""
		case !namesOverlap(a, b):
			return []atom{a}, true, ""
		}
		return nil, false, "doorman cannot admit names below a wildcard except some of them"
	case a.isName():
		// b is a prefix: the proxy dials the name's addresses, which
		// doorman learns only when it resolves the name. The guard
		// refuses private and special space to names anyway, unless a
		// cluster scope opens it to names under the cluster domain.
		refused, private := guard.RefusedRange(b.prefix)
		if refused && !(private && s.clusterOverlap(a, b.prefix)) {
			return []atom{a}, true, ""
		}
		return nil, false, "doorman dials a name's addresses and cannot keep them out of a denied network"
	}
	// a is a prefix, b a name: an address entry admits every name.
	return nil, false, "an address entry admits connections whatever name they carry, so it cannot leave a denied name out"
}

// clusterOverlap reports whether names of a may be under the cluster
// domain and p overlaps the ranges the proxy opens to those names.
func (s *subtractor) clusterOverlap(a atom, p netip.Prefix) bool {
	if s.clusterDomain == "" {
		return false
	}
	cd := atom{kind: conf.KindWildcard, name: s.clusterDomain}
	if !namesOverlap(a, cd) && !(a.kind == conf.KindName && a.name == s.clusterDomain) {
		return false
	}
	for _, c := range s.clusterPrefixes {
		if c.Overlaps(p) {
			return true
		}
	}
	return false
}

// nameCovers reports whether every name of a (a name or wildcard atom)
// is one of b's.
func nameCovers(b, a atom) bool {
	switch {
	case b.kind == conf.KindName:
		return a.kind == conf.KindName && a.name == b.name
	case a.kind == conf.KindName:
		return below(a.name, b.name)
	}
	return a.name == b.name || below(a.name, b.name)
}

// namesOverlap reports whether a and b (names or wildcards) share a name.
func namesOverlap(a, b atom) bool {
	switch {
	case a.kind == conf.KindName && b.kind == conf.KindName:
		return a.name == b.name
	case a.kind == conf.KindName:
		return below(a.name, b.name)
	case b.kind == conf.KindName:
		return below(b.name, a.name)
	}
	return a.name == b.name || below(a.name, b.name) || below(b.name, a.name)
}

// below reports whether name lies strictly below suffix, by whole labels.
func below(name, suffix string) bool {
	n := len(name) - len(suffix)
	return n >= 2 && name[n-1] == '.' && name[n:] == suffix
}

// prefixMinus returns the prefixes covering a but not b.
func prefixMinus(a, b netip.Prefix) []netip.Prefix {
	a, b = a.Masked(), b.Masked()
	if a.Addr().Is4() != b.Addr().Is4() || !a.Overlaps(b) {
		return []netip.Prefix{a}
	}
	if b.Bits() <= a.Bits() {
		return nil // b holds a
	}
	// Walk from a down to b, keeping the sibling of each step.
	var out []netip.Prefix
	cur := a
	for cur.Bits() < b.Bits() {
		bits := cur.Bits() + 1
		left := netip.PrefixFrom(cur.Addr(), bits).Masked()
		right := netip.PrefixFrom(setBit(cur.Addr(), cur.Bits()), bits).Masked()
		if left.Contains(b.Addr()) {
			out = append(out, right)
			cur = left
		} else {
			out = append(out, left)
			cur = right
		}
	}
	return out
}

// setBit returns a with bit i (from the most significant) set.
func setBit(a netip.Addr, i int) netip.Addr {
	if a.Is4() {
		b := a.As4()
		b[i/8] |= 0x80 >> (i % 8)
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	b[i/8] |= 0x80 >> (i % 8)
	return netip.AddrFrom16(b)
}

// intersectAtoms returns the traffic both a and b match, if one atom can
// say it (a name and an address range cannot: doorman does not know
// where the name resolves).
func intersectAtoms(a, b atom) (atom, bool) {
	x := a
	x.proto = a.proto & b.proto
	x.lo, x.hi = max(a.lo, b.lo), min(a.hi, b.hi)
	if x.proto == 0 || x.lo > x.hi {
		return atom{}, false
	}
	switch {
	case b.all:
	case a.all:
		x.all, x.kind, x.name, x.prefix = false, b.kind, b.name, b.prefix
	case a.kind == conf.KindPrefix && b.kind == conf.KindPrefix:
		if a.prefix.Addr().Is4() != b.prefix.Addr().Is4() || !a.prefix.Overlaps(b.prefix) {
			return atom{}, false
		}
		if b.prefix.Bits() > a.prefix.Bits() {
			x.prefix = b.prefix
		}
	case a.isName() && b.isName():
		switch {
		case nameCovers(b, a):
		case nameCovers(a, b):
			x.kind, x.name = b.kind, b.name
		default:
			return atom{}, false
		}
	default:
		return atom{}, false
	}
	return x, true
}
