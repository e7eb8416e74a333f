package guard

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// The IPv6 forms that carry an IPv4 address to a translator or a tunnel,
// which would deliver what is sent to them to that IPv4 address. See the
// package documentation for which are decoded and why.

// NAT64Lengths are the prefix lengths RFC 6052 §2.2 lays out an
// IPv4-embedded IPv6 address for, and so the lengths a NAT64 prefix may
// have.
var NAT64Lengths = []int{32, 40, 48, 56, 64, 96}

// Fixed prefixes of the forms decoded.
var (
	// wellKnownNAT64 is RFC 6052's Well-Known Prefix, which is a /96
	// and has that layout only.
	wellKnownNAT64 = netip.MustParsePrefix("64:ff9b::/96")
	// localUseNAT64 is RFC 8215's local-use prefix: a network may take
	// it whole, or any prefix inside it, with the layout of that
	// prefix's length.
	localUseNAT64 = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	teredo        = netip.MustParsePrefix("2001::/32")
	translated    = netip.MustParsePrefix("::ffff:0:0:0/96") // IPv4-translated (SIIT, RFC 2765)
	compatible    = netip.MustParsePrefix("::/96")           // IPv4-compatible (RFC 4291, deprecated)
)

// localUseLengths are the layouts an address in localUseNAT64 may be in:
// those of the prefix lengths not shorter than the local-use prefix.
var localUseLengths = []int{48, 56, 64, 96}

// thisNetwork is 0.0.0.0/8, which no translator delivers to (see
// embeddedIPv4).
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// builtinTranslators are the fixed prefixes whose addresses are judged by
// the IPv4 addresses they carry: a connected route inside one is no
// subnet of the host's (see usefulConnected).
var builtinTranslators = []netip.Prefix{wellKnownNAT64, localUseNAT64, sixToFour, teredo, translated, compatible}

// embedded is an IPv4 address an IPv6 address carries, and the name of
// the form that carries it ("NAT64", "6to4", "Teredo client", ...), as a
// refusal's Form.
type embedded struct {
	v4   netip.Addr
	form string
}

// rfc6052 returns the IPv4 address that a carries after a NAT64 prefix of
// bits bits (one of NAT64Lengths): the 32 bits that follow the prefix,
// skipping bits 64 to 71 (RFC 6052 §2.2: the "u" octet, which sits inside
// the prefix of a /96 and in the middle of the IPv4 address otherwise).
func rfc6052(a netip.Addr, bits int) netip.Addr {
	b := a.As16()
	var v4 [4]byte
	j := bits / 8
	for i := range v4 {
		if j == 8 {
			j++
		}
		v4[i] = b[j]
		j++
	}
	return netip.AddrFrom4(v4)
}

// embeddedIPv4 returns the IPv4 addresses that a (an IPv6 address, not
// IPv4-mapped) carries to a translator or a tunnel, each with its form,
// in the order the guard judges them:
//
//   - inside a configured NAT64 prefix (the longest that holds a): the
//     IPv4 address of that prefix's layout;
//   - else inside 64:ff9b::/96: its /96 layout;
//   - else inside 64:ff9b:1::/48: the IPv4 address of each layout a
//     prefix inside it may have (/48, /56, /64, /96), since the guard
//     cannot know which one a NAT64 on the path uses and the attacker
//     picks the one that does. A layout that yields an address in
//     0.0.0.0/8 is left out, since no translator delivers there (and
//     every address of the prefix yields one for some layout: the /96
//     form of 203.0.113.7 is 0.0.0.0 in the /48 layout), unless every
//     layout does;
//   - 6to4 (2002::/16): bits 16 to 47;
//   - Teredo (2001::/32): the server's address (bits 32 to 63) and the
//     client's (the last 32 bits, inverted), both: a Teredo relay
//     sends to the client's mapped address and port, and the server is
//     the other IPv4 host the address names;
//   - IPv4-translated (::ffff:0:0:0/96) and IPv4-compatible (::/96): the
//     last 32 bits;
//   - an ISATAP interface identifier (RFC 5214: bits 64 to 95 are
//     0000:5efe or 0200:5efe, the u and g bits free) in any prefix: the
//     last 32 bits, which the ISATAP router of that prefix tunnels to.
func (g *Guard) embeddedIPv4(a netip.Addr) []embedded {
	if !a.Is6() || a.Is4In6() {
		return nil
	}
	var out []embedded
	switch p, ok := g.nat64Prefix(a); {
	case ok:
		out = append(out, embedded{rfc6052(a, p.Bits()), "NAT64 " + p.String()})
	case wellKnownNAT64.Contains(a):
		out = append(out, embedded{rfc6052(a, 96), "NAT64"})
	case localUseNAT64.Contains(a):
		var zero []embedded
		for _, bits := range localUseLengths {
			e := embedded{rfc6052(a, bits), fmt.Sprintf("local-use NAT64 /%d", bits)}
			if thisNetwork.Contains(e.v4) {
				zero = append(zero, e)
			} else {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			out = zero[len(zero)-1:] // the /96 layout's
		}
	case sixToFour.Contains(a):
		b := a.As16()
		out = append(out, embedded{netip.AddrFrom4([4]byte(b[2:6])), "6to4"})
	case teredo.Contains(a):
		b := a.As16()
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		out = append(out, embedded{netip.AddrFrom4([4]byte(b[4:8])), "Teredo server"},
			embedded{netip.AddrFrom4(client), "Teredo client"})
	case translated.Contains(a):
		out = append(out, embedded{rfc6052(a, 96), "IPv4-translated"})
	case compatible.Contains(a):
		out = append(out, embedded{rfc6052(a, 96), "IPv4-compatible"})
	}
	if b := a.As16(); b[8]&^0x03 == 0 && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe {
		out = append(out, embedded{rfc6052(a, 96), "ISATAP"})
	}
	return out
}

// nat64Prefix returns the longest configured NAT64 prefix that holds a.
func (g *Guard) nat64Prefix(a netip.Addr) (netip.Prefix, bool) {
	best, found := netip.Prefix{}, false
	for _, p := range g.nat64 {
		if p.Contains(a) && (!found || p.Bits() > best.Bits()) {
			best, found = p, true
		}
	}
	return best, found
}

// notNAT64 are the ranges a NAT64 prefix may not overlap: they are not
// unicast space a translator could own, or are IPv4 forms of their own.
var notNAT64 = []netip.Prefix{
	netip.MustParsePrefix("::/96"),             // unspecified, loopback, IPv4-compatible
	netip.MustParsePrefix("::ffff:0:0/96"),     // IPv4-mapped
	netip.MustParsePrefix("fe80::/10"),         // link-local
	netip.MustParsePrefix("ff00::/8"),          // multicast
	netip.MustParsePrefix("::ffff:0:0:0/96"),   // IPv4-translated
	netip.MustParsePrefix("fd00:ec2::254/128"), // a metadata service
}

// ValidateNAT64Prefix says why p cannot be a NAT64 prefix (nil if it
// can): it must be an IPv6 prefix without host bits, of one of the
// lengths RFC 6052 lays out (NAT64Lengths), with bits 64 to 71 zero in a
// /96 (RFC 6052 §2.2), not a prefix of another length holding the
// well-known prefix, and outside the ranges no translator owns
// (loopback, link-local, multicast, the IPv4-mapped, -compatible and
// -translated forms) and the metadata service fd00:ec2::254.
func ValidateNAT64Prefix(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return errors.New("not a prefix")
	case !p.Addr().Is6() || p.Addr().Is4In6():
		return errors.New("not an IPv6 prefix: a NAT64 prefix is IPv6, such as 64:ff9b::/96")
	case p.Addr().Zone() != "":
		return errors.New("a prefix has no zone")
	case !slices.Contains(NAT64Lengths, p.Bits()):
		return fmt.Errorf("length /%d: RFC 6052 lays out IPv4 addresses after a prefix of /32, /40, /48, /56, /64 or /96 only", p.Bits())
	case p.Masked() != p:
		return fmt.Errorf("host bits set: did you mean %s?", p.Masked())
	}
	if p.Bits() == 96 && p.Addr().As16()[8] != 0 {
		return errors.New("bits 64 to 71 of a /96 NAT64 prefix must be zero (RFC 6052 §2.2)")
	}
	if p.Overlaps(wellKnownNAT64) && p != wellKnownNAT64 {
		return errors.New("the well-known prefix 64:ff9b::/96 is a /96 only (RFC 6052 §2.1): name it as such, or a prefix outside it")
	}
	for _, r := range notNAT64 {
		if p.Overlaps(r) {
			return fmt.Errorf("overlaps %s, which no NAT64 owns", r)
		}
	}
	return nil
}
