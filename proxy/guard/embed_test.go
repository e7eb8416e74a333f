package guard

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// embedNAT64 is the inverse of rfc6052: the address of prefix p (of one
// of NAT64Lengths) carrying v4, with the u octet and the suffix zero, as a
// DNS64 server synthesizes it.
func embedNAT64(p netip.Prefix, v4 netip.Addr) netip.Addr {
	b := p.Masked().Addr().As16()
	v := v4.As4()
	j := p.Bits() / 8
	for i := range v {
		if j == 8 {
			j++
		}
		b[j] = v[i]
		j++
	}
	return netip.AddrFrom16(b)
}

// configuredNAT64 are NAT64 prefixes an operator configured, one of each
// length RFC 6052 lays out (in 3fff::/20, RFC 9637's documentation space,
// which the test host is not connected to), and a ULA one.
var configuredNAT64 = []netip.Prefix{
	netip.MustParsePrefix("3fff:10::/32"),
	netip.MustParsePrefix("3fff:20:a000::/40"),
	netip.MustParsePrefix("3fff:30:b::/48"),
	netip.MustParsePrefix("3fff:40:c:d00::/56"),
	netip.MustParsePrefix("3fff:50:e:f::/64"),
	netip.MustParsePrefix("3fff:60:1:2:0:3::/96"),
	netip.MustParsePrefix("fd64::/96"),
}

// nat64Host is testHost with configuredNAT64 and extra, one of which the
// host routes to a translator on a link ("3fff:60:1:2:0:3::/96 dev
// nat64"), as it does Teredo ("2001::/32 dev teredo").
func nat64Host(extra ...netip.Prefix) *Guard {
	h := testHost()
	connected := h.connected
	return New(Config{
		OwnAddrs: h.ownAddrs,
		ConnectedSubnets: func() ([]netip.Prefix, error) {
			c, err := connected()
			return append(c, netip.MustParsePrefix("3fff:60:1:2:0:3::/96"), netip.MustParsePrefix("2001::/32")), err
		},
		NAT64Prefixes: append(slices.Clone(configuredNAT64), extra...),
	})
}

// withBits returns a with the bytes at the given offsets set: what an
// attacker writes in the u octet and the suffix, which RFC 6052 reserves
// and a translator ignores.
func withBits(a netip.Addr, set map[int]byte) netip.Addr {
	b := a.As16()
	for i, v := range set {
		b[i] = v
	}
	return netip.AddrFrom16(b)
}

// nat64Case is one NAT64 prefix and layout, as a refusal names it.
type nat64Case struct {
	prefix netip.Prefix
	form   string
}

// nat64Cases are every built-in and configured NAT64 prefix, each in the
// layout of its length: the well-known prefix, the local-use prefix
// taken whole and as prefixes of each length inside it, and
// configuredNAT64.
func nat64Cases() []nat64Case {
	cases := []nat64Case{
		{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
		{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 /48"},
		{netip.MustParsePrefix("64:ff9b:1:ab00::/56"), "local-use NAT64 /56"},
		{netip.MustParsePrefix("64:ff9b:1:ab01::/64"), "local-use NAT64 /64"},
		{netip.MustParsePrefix("64:ff9b:1:ab01:0:cd00::/96"), "local-use NAT64 /96"},
	}
	for _, p := range configuredNAT64 {
		cases = append(cases, nat64Case{p, "NAT64 " + p.String()})
	}
	return cases
}

// TestNAT64Layouts: in every NAT64 prefix and each layout it may have, an
// address carrying a refused IPv4 address is refused as that address,
// with the u octet and the suffix zero or set; one carrying a public
// IPv4 address is permitted.
func TestNAT64Layouts(t *testing.T) {
	g := nat64Host()
	p := policy(t, "*.example.test")
	refused := []struct{ v4, what string }{
		{"10.0.0.5", "RFC 1918 (10.0.0.0/8)"},
		{"192.168.1.1", "RFC 1918 (192.168.0.0/16)"},
		{"100.64.77.10", "shared address space (RFC 6598, CGNAT) (100.64.0.0/10)"},
		{"169.254.169.254", "cloud metadata service"},
		{"127.0.0.1", "loopback (127.0.0.0/8)"},
		{"198.51.100.130", "connected subnet 198.51.100.128/25 of the proxy's host"},
		{"198.51.100.2", "an address of the proxy's host"},
	}
	public := []string{"203.0.113.7", "198.51.100.7", "192.0.2.1", "8.8.8.8"}
	for _, c := range nat64Cases() {
		for _, tt := range refused {
			v4 := netip.MustParseAddr(tt.v4)
			base := embedNAT64(c.prefix, v4)
			// What an attacker may set: the u octet and the suffix
			// (none in a /96), spelling a public address where the
			// old decoder looked.
			set := map[int]byte{15: 0x07, 14: 0x71, 13: 0x00}
			if c.prefix.Bits() < 96 {
				set[8] = 0xff
			}
			if c.prefix.Bits() < 64 {
				set[12] = 0xcb
			}
			for _, a := range []netip.Addr{base, withBits(base, set)} {
				if c.prefix.Bits() == 96 && a != base {
					continue
				}
				want := fmt.Sprintf("%v: %s form of %v, %s", a, c.form, v4, tt.what)
				for _, r := range []*Refusal{g.Check(p, a, 443), g.CheckAnyPort(p, a)} {
					if r == nil || r.String() != want {
						t.Errorf("%v (%v in %v): refusal %v, want %q", a, v4, c.prefix, r, want)
					}
				}
			}
		}
		for _, s := range public {
			a := embedNAT64(c.prefix, netip.MustParseAddr(s))
			if r := g.Check(p, a, 443); r != nil {
				t.Errorf("%v (%s in %v): refused %v, want permitted", a, s, c.prefix, r)
			}
		}
	}
}

// The local-use prefix is judged in every layout a prefix inside it may
// have: the attacker picks the one the NAT64 on the path uses. A layout
// whose reading falls in 0.0.0.0/8 does not count (no translator
// delivers there) unless every one does; any other refused reading
// refuses the address.
func TestLocalUseAmbiguity(t *testing.T) {
	g := testHost()
	for _, tc := range []struct{ addr, want string }{
		// The LAN address 10.66.77.203 in the /48, /56 and /64
		// layouts, the suffix spelling 203.0.113.7 where the /96
		// layout reads.
		{"64:ff9b:1:a42:4d:cb00:cb00:7107", "64:ff9b:1:a42:4d:cb00:cb00:7107: local-use NAT64 /48 form of 10.66.77.203, RFC 1918 (10.0.0.0/8)"},
		{"64:ff9b:1:a:42:4dcb:cb00:7107", "64:ff9b:1:a:42:4dcb:cb00:7107: local-use NAT64 /56 form of 10.66.77.203, RFC 1918 (10.0.0.0/8)"},
		{"64:ff9b:1:0:a:424d:cb00:7107", "64:ff9b:1:0:a:424d:cb00:7107: local-use NAT64 /64 form of 10.66.77.203, RFC 1918 (10.0.0.0/8)"},
		// Every layout in 0.0.0.0/8: refused as this network.
		{"64:ff9b:1::", "64:ff9b:1::: local-use NAT64 /96 form of 0.0.0.0, this network (0.0.0.0/8)"},
		{"64:ff9b:1::1", "64:ff9b:1::1: local-use NAT64 /96 form of 0.0.0.1, this network (0.0.0.0/8)"},
		// Public in every layout that does not read 0.0.0.0/8.
		{"64:ff9b:1::203.0.113.7", ""},
		{"64:ff9b:1:cb00:71:700::", ""},
		// The price: a /64 inside the prefix whose subnet bits read
		// as private space in the /48 layout refuses every address of
		// it. Naming that /64 in nat64Prefixes makes its layout the
		// only one read (TestConfiguredNAT64).
		{"64:ff9b:1:a00:cb:71:700:0", "64:ff9b:1:a00:cb:71:700:0: local-use NAT64 /48 form of 10.0.203.0, RFC 1918 (10.0.0.0/8)"},
	} {
		got := ""
		if r := g.Check(nil, netip.MustParseAddr(tc.addr), 443); r != nil {
			got = r.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestConfiguredNAT64: inside a configured prefix only its layout is
// read (the longest configured prefix wins over the local-use prefix's
// layouts), its addresses are not refused as private space or as a
// connected subnet themselves, and an address entry for the IPv4
// address admits it.
func TestConfiguredNAT64(t *testing.T) {
	g := nat64Host(netip.MustParsePrefix("64:ff9b:1:a00::/64"))
	for _, tc := range []struct{ addr, want string }{
		{"64:ff9b:1:a00:cb:71:700:0", ""},
		{"64:ff9b:1:a00:a:0:500:0", "64:ff9b:1:a00:a:0:500:0: NAT64 64:ff9b:1:a00::/64 form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"fd64::203.0.113.7", ""}, // ULA, but the translator's
		{"fd64::10.0.0.5", "fd64::a00:5: NAT64 fd64::/96 form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"fd65::203.0.113.7", "fd65::cb00:7107: unique local (ULA) (fc00::/7)"},
		{"3fff:60:1:2:0:3:cb00:7107", ""}, // routed on a link: not a subnet of the host's
	} {
		got := ""
		if r := g.Check(nil, netip.MustParseAddr(tc.addr), 443); r != nil {
			got = r.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.addr, got, tc.want)
		}
	}
	if r := g.Check(policy(t, "10.0.0.0/8"), netip.MustParseAddr("3fff:10:a00:5::"), 80); r != nil {
		t.Errorf("entry 10.0.0.0/8, 3fff:10:a00:5:: (10.0.0.5 under 3fff:10::/32): %v", r)
	}
	// Without the setting, the configured /32's address is public.
	if r := testHost().Check(nil, netip.MustParseAddr("3fff:10:a00:5::"), 80); r != nil {
		t.Errorf("no NAT64 prefixes, 3fff:10:a00:5::: %v", r)
	}
}

// TestTeredoAndISATAP: a Teredo address is refused when its server or
// its client address is; an ISATAP interface identifier in any prefix
// when the address it names is.
func TestTeredoAndISATAP(t *testing.T) {
	g := nat64Host()
	for _, tc := range []struct{ addr, want string }{
		// RFC 4380's example: server 65.54.227.120, client 192.0.2.45
		// port 40000.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", ""},
		{"2001:0:a00:5:8000:63bf:3fff:fdd2", "2001:0:a00:5:8000:63bf:3fff:fdd2: Teredo server form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"2001:0:4136:e378:8000:63bf:f5ff:fffa", "2001:0:4136:e378:8000:63bf:f5ff:fffa: Teredo client form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "2001:0:4136:e378:8000:63bf:80ff:fffe: Teredo client form of 127.0.0.1, loopback (127.0.0.0/8)"},
		{"2001:0:4136:e378:8000:63bf:5601:5601", "2001:0:4136:e378:8000:63bf:5601:5601: Teredo client form of 169.254.169.254, cloud metadata service"},
		{"2001:db8:1234::5efe:203.0.113.7", ""},
		{"2001:db8:1234::5efe:10.0.0.5", "2001:db8:1234::5efe:a00:5: ISATAP form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"2001:db8:1234::200:5efe:10.0.0.5", "2001:db8:1234:0:200:5efe:a00:5: ISATAP form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"2001:db8:1234::300:5efe:192.168.1.1", "2001:db8:1234:0:300:5efe:c0a8:101: ISATAP form of 192.168.1.1, RFC 1918 (192.168.0.0/16)"},
		{"2001:db8:1234::400:5efe:10.0.0.5", ""}, // no ISATAP identifier
		{"2002:cb00:7107:1::5efe:10.0.0.5", "2002:cb00:7107:1:0:5efe:a00:5: ISATAP form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"2002:a00:5:1::5efe:203.0.113.7", "2002:a00:5:1:0:5efe:cb00:7107: 6to4 form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"64:ff9b::5efe:0:a00:5", ""}, // not in 64:ff9b::/96, not ISATAP (bits 64-95 are 0:5efe:0)
	} {
		got := ""
		if r := g.Check(nil, netip.MustParseAddr(tc.addr), 443); r != nil {
			got = r.String()
		}
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestSingleLayoutForms: whatever the IPv4 address, its form in the
// well-known prefix and in each configured prefix is refused exactly
// when it is, as that address.
func TestSingleLayoutForms(t *testing.T) {
	g := nat64Host()
	p := policy(t, "10.1.0.0/16", "198.51.100.130:80")
	rng := rand.New(rand.NewPCG(3, 4))
	prefixes := append([]netip.Prefix{netip.MustParsePrefix("64:ff9b::/96")}, configuredNAT64...)
	for range 20000 {
		v := rng.Uint32()
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		v4 := g.Check(p, a, 80)
		for _, pfx := range prefixes {
			form := embedNAT64(pfx, a)
			r := g.Check(p, form, 80)
			if (r == nil) != (v4 == nil) || (r != nil && r.Embedded != a) {
				t.Fatalf("%v refused %v, its form %v in %v refused %+v", a, v4, form, pfx, r)
			}
		}
		// The local-use layouts: refused whenever the address is (the
		// other layouts may refuse more), but for 0.0.0.0/8, which no
		// translator delivers to.
		if thisNetwork.Contains(a) {
			continue
		}
		for _, pfx := range []string{"64:ff9b:1::/48", "64:ff9b:1:ab00::/56", "64:ff9b:1:ab01::/64", "64:ff9b:1:ab01:0:cd00::/96"} {
			form := embedNAT64(netip.MustParsePrefix(pfx), a)
			if r := g.Check(p, form, 80); v4 != nil && r == nil {
				t.Fatalf("%v refused %v, its form %v in %v permitted", a, v4, form, pfx)
			}
		}
	}
}

// TestValidateNAT64Prefix: the prefixes an operator may configure, and
// why others are refused.
func TestValidateNAT64Prefix(t *testing.T) {
	for _, tc := range []struct{ prefix, err string }{
		{"64:ff9b::/96", ""},
		{"64:ff9b:1::/48", ""},
		{"2001:db8:64::/96", ""},
		{"2001:db8::/32", ""},
		{"2001:db8:100::/40", ""},
		{"2001:db8:64:6400::/56", ""},
		{"2001:db8:64:64::/64", ""},
		{"fd64::/96", ""},
		{"64:ff9b::/64", "the well-known prefix 64:ff9b::/96 is a /96 only (RFC 6052 §2.1): name it as such, or a prefix outside it"},
		{"64:ff9b::/32", "the well-known prefix 64:ff9b::/96 is a /96 only (RFC 6052 §2.1): name it as such, or a prefix outside it"},
		{"2001:db8:64::/97", "length /97: RFC 6052 lays out IPv4 addresses after a prefix of /32, /40, /48, /56, /64 or /96 only"},
		{"2001:db8::/33", "length /33: RFC 6052 lays out IPv4 addresses after a prefix of /32, /40, /48, /56, /64 or /96 only"},
		{"2001:db8:64::1/96", "host bits set: did you mean 2001:db8:64::/96?"},
		{"2001:db8:64:0:100::/96", "bits 64 to 71 of a /96 NAT64 prefix must be zero (RFC 6052 §2.2)"},
		{"10.0.0.0/8", "not an IPv6 prefix: a NAT64 prefix is IPv6, such as 64:ff9b::/96"},
		{"::ffff:10.0.0.0/104", "not an IPv6 prefix: a NAT64 prefix is IPv6, such as 64:ff9b::/96"},
		{"::/96", "overlaps ::/96, which no NAT64 owns"},
		{"::/32", "overlaps ::/96, which no NAT64 owns"},
		{"fe80::/64", "overlaps fe80::/10, which no NAT64 owns"},
		{"ff02::/96", "overlaps ff00::/8, which no NAT64 owns"},
		{"fd00:ec2::/32", "overlaps fd00:ec2::254/128, which no NAT64 owns"},
	} {
		got := ""
		if err := ValidateNAT64Prefix(netip.MustParsePrefix(tc.prefix)); err != nil {
			got = err.Error()
		}
		if got != tc.err {
			t.Errorf("%s: %q, want %q", tc.prefix, got, tc.err)
		}
	}
	if err := ValidateNAT64Prefix(netip.Prefix{}); err == nil {
		t.Error("the zero prefix: valid")
	}
}
