package guard

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
)

// testHost is a host with an uplink 198.51.100.2 (and 2001:db8:1::2), a
// bridge 198.51.100.128/25 (and 2001:db8:3::/64), another 10.88.0.0/16, a
// sit0 "::/96", a NAT64 "64:ff9b::/96 dev nat64", a "169.254.0.0/16 dev
// eth0", fe80::/64 on every link and default routes without a gateway
// (dev wg0).
func testHost() *Guard {
	return New(Config{
		OwnAddrs: func() ([]netip.Addr, error) {
			return []netip.Addr{
				netip.MustParseAddr("198.51.100.2"),
				netip.MustParseAddr("2001:db8:1::2"),
				netip.MustParseAddr("fe80::1%eth0"),
			}, nil
		},
		ConnectedSubnets: func() ([]netip.Prefix, error) {
			var out []netip.Prefix
			for _, s := range []string{
				"198.51.100.128/25", "2001:db8:3::/64", "::/96", "169.254.0.0/16",
				"fe80::/64", "0.0.0.0/0", "::/0", "10.88.0.0/16", "64:ff9b::/96",
			} {
				out = append(out, netip.MustParsePrefix(s))
			}
			return out, nil
		},
	})
}

func policy(t testing.TB, entries ...string) *conf.Policy {
	t.Helper()
	p, err := conf.NewPolicy(conf.ModeAllowlist, entries)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClassify: every refused range, the forms that embed IPv4, and the
// addresses that stay public (documentation space among them), under a
// policy with no entry that could admit anything.
func TestClassify(t *testing.T) {
	g := testHost()
	p := policy(t, "*.example.test", "api.example.test:443")
	tests := []struct {
		addr string
		want string // the refusal as logged; "" means permitted
	}{
		{"10.0.0.5", "10.0.0.5: RFC 1918 (10.0.0.0/8)"},
		{"10.255.255.255", "10.255.255.255: RFC 1918 (10.0.0.0/8)"},
		{"172.16.0.1", "172.16.0.1: RFC 1918 (172.16.0.0/12)"},
		{"172.31.255.255", "172.31.255.255: RFC 1918 (172.16.0.0/12)"},
		{"172.32.0.1", ""},
		{"192.168.1.1", "192.168.1.1: RFC 1918 (192.168.0.0/16)"},
		{"100.64.0.1", "100.64.0.1: shared address space (RFC 6598, CGNAT) (100.64.0.0/10)"},
		{"100.127.255.255", "100.127.255.255: shared address space (RFC 6598, CGNAT) (100.64.0.0/10)"},
		{"100.128.0.1", ""},
		{"100.100.100.200", "100.100.100.200: cloud metadata service"},
		{"169.254.169.254", "169.254.169.254: cloud metadata service"},
		{"169.254.170.2", "169.254.170.2: cloud metadata service"},
		{"169.254.1.1", "169.254.1.1: link-local (169.254.0.0/16)"},
		{"168.63.129.16", "168.63.129.16: cloud metadata service"},
		{"168.63.129.17", ""},
		{"198.18.0.1", "198.18.0.1: benchmarking (RFC 2544) (198.18.0.0/15)"},
		{"198.19.255.255", "198.19.255.255: benchmarking (RFC 2544) (198.18.0.0/15)"},
		{"198.20.0.1", ""},
		{"240.0.0.1", "240.0.0.1: reserved (240.0.0.0/4)"},
		{"255.255.255.255", "255.255.255.255: broadcast"},
		{"192.0.0.8", "192.0.0.8: IETF protocol assignments (192.0.0.0/24)"},
		{"192.0.1.1", ""},
		{"127.0.0.1", "127.0.0.1: loopback (127.0.0.0/8)"},
		{"127.1.2.3", "127.1.2.3: loopback (127.0.0.0/8)"},
		{"0.0.0.0", "0.0.0.0: this network (0.0.0.0/8)"},
		{"224.0.0.1", "224.0.0.1: multicast (224.0.0.0/4)"},
		{"::1", "::1: loopback"},
		{"::", "::: unspecified"},
		{"fd00::5", "fd00::5: unique local (ULA) (fc00::/7)"},
		{"fc00::1", "fc00::1: unique local (ULA) (fc00::/7)"},
		{"fd00:ec2::254", "fd00:ec2::254: cloud metadata service"},
		{"fe80::9", "fe80::9: link-local (fe80::/10)"},
		{"fe80::1", "fe80::1: an address of the proxy's host"}, // narrower than fe80::/10
		{"fe80::2%eth0", "fe80::2: link-local (fe80::/10)"},
		{"fec0::1", "fec0::1: site-local (deprecated) (fec0::/10)"},
		{"ff02::1", "ff02::1: multicast (ff00::/8)"},

		// IPv4-mapped: the IPv4 address it is.
		{"::ffff:10.0.0.5", "10.0.0.5: RFC 1918 (10.0.0.0/8)"},
		{"::ffff:127.0.0.1", "127.0.0.1: loopback (127.0.0.0/8)"},
		{"::ffff:203.0.113.7", ""},
		// Forms that carry an IPv4 address to a translator or tunnel
		// (their connected routes are left to the embedded address).
		{"64:ff9b::10.0.0.5", "64:ff9b::a00:5: NAT64 form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"64:ff9b::127.0.0.1", "64:ff9b::7f00:1: NAT64 form of 127.0.0.1, loopback (127.0.0.0/8)"},
		{"64:ff9b::169.254.169.254", "64:ff9b::a9fe:a9fe: NAT64 form of 169.254.169.254, cloud metadata service"},
		{"64:ff9b::198.51.100.130", "64:ff9b::c633:6482: NAT64 form of 198.51.100.130, connected subnet 198.51.100.128/25 of the proxy's host"},
		{"64:ff9b::203.0.113.7", ""},
		{"64:ff9b:1::10.0.0.5", "64:ff9b:1::a00:5: local-use NAT64 /96 form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"64:ff9b:1::203.0.113.7", ""},
		{"2002:a00:5::1", "2002:a00:5::1: 6to4 form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"2002:c0a8:101:7::9", "2002:c0a8:101:7::9: 6to4 form of 192.168.1.1, RFC 1918 (192.168.0.0/16)"},
		{"2002:cb00:7107::1", ""},
		{"::10.0.0.5", "::a00:5: IPv4-compatible form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"::203.0.113.7", ""},
		{"::ffff:0:10.0.0.5", "::ffff:0:a00:5: IPv4-translated form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		{"::ffff:0:203.0.113.7", ""},

		// The host: its addresses and connected subnets; a connected
		// route inside link-local space or a default route adds nothing.
		{"198.51.100.2", "198.51.100.2: an address of the proxy's host"},
		{"2001:db8:1::2", "2001:db8:1::2: an address of the proxy's host"},
		{"198.51.100.130", "198.51.100.130: connected subnet 198.51.100.128/25 of the proxy's host"},
		{"::ffff:198.51.100.255", "198.51.100.255: connected subnet 198.51.100.128/25 of the proxy's host"},
		{"2001:db8:3::5", "2001:db8:3::5: connected subnet 2001:db8:3::/64 of the proxy's host"},
		{"10.88.0.7", "10.88.0.7: connected subnet 10.88.0.0/16 of the proxy's host"},
		{"198.51.100.3", ""},

		// Documentation space is public unless connected.
		{"192.0.2.1", ""},
		{"198.51.100.7", ""},
		{"198.51.100.127", ""},
		{"203.0.113.7", ""},
		{"2001:db8::7", ""},
		{"2001:db8:100::10", ""},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		for _, check := range []struct {
			how string
			r   *Refusal
		}{{"Check", g.Check(p, a, 443)}, {"CheckAnyPort", g.CheckAnyPort(p, a)}} {
			got := ""
			if check.r != nil {
				got = check.r.String()
			}
			if got != tt.want {
				t.Errorf("%s(%s) = %q, want %q", check.how, tt.addr, got, tt.want)
			}
		}
	}
}

// TestAdmit: an address entry admits a refused address only if it lies
// inside the narrowest refused range that holds it, and admits the
// address (and port).
func TestAdmit(t *testing.T) {
	g := testHost()
	tests := []struct {
		entries []string
		addr    string
		port    uint16
		admit   bool
	}{
		{[]string{"10.0.0.0/8"}, "10.0.0.5", 6379, true},
		{[]string{"10.0.0.0/8"}, "::ffff:10.0.0.5", 6379, true},
		{[]string{"::ffff:10.0.0.0/104"}, "10.0.0.5", 6379, true}, // the same entry, written mapped
		{[]string{"10.1.2.3:6379"}, "10.1.2.3", 6379, true},
		{[]string{"10.1.2.3:6379"}, "10.1.2.3", 80, false},
		{[]string{"10.1.2.3:6379"}, "10.1.2.4", 6379, false},
		{[]string{"10.0.0.0/16"}, "10.0.0.5", 80, true},
		{[]string{"10.0.0.0/16"}, "10.1.0.5", 80, false},
		// Wider than the range: opens nothing of it.
		{[]string{"0.0.0.0/0"}, "10.0.0.5", 80, false},
		{[]string{"0.0.0.0/0"}, "::ffff:10.0.0.5", 80, false},
		{[]string{"8.0.0.0/6"}, "10.0.0.5", 80, false},
		{[]string{"::/0"}, "fd00::5", 80, false},
		{[]string{"0.0.0.0/0", "::/0"}, "127.0.0.1", 80, false},
		{[]string{"0.0.0.0/0"}, "203.0.113.7", 80, true},
		// Names never admit an address.
		{[]string{"*.example.test", "rebind.example.test"}, "10.0.0.5", 443, false},
		// Ranges nest: the narrowest must be named.
		{[]string{"fc00::/7"}, "fd00::5", 80, true},
		{[]string{"fc00::/7"}, "fd00:ec2::254", 80, false},
		{[]string{"fd00:ec2::254"}, "fd00:ec2::254", 80, true},
		{[]string{"169.254.0.0/16"}, "169.254.1.1", 80, true},
		{[]string{"169.254.0.0/16"}, "169.254.169.254", 80, false},
		{[]string{"169.254.169.254:80"}, "169.254.169.254", 80, true},
		{[]string{"100.64.0.0/10"}, "100.100.100.200", 80, false},
		{[]string{"100.64.0.0/10"}, "100.64.0.1", 80, true},
		{[]string{"168.63.129.16"}, "168.63.129.16", 80, true},
		{[]string{"10.0.0.0/8"}, "10.88.0.7", 80, false}, // a bridge inside RFC 1918
		{[]string{"10.88.0.0/16"}, "10.88.0.7", 80, true},
		{[]string{"198.51.100.0/24"}, "198.51.100.130", 80, false},
		{[]string{"198.51.100.128/25"}, "198.51.100.130", 80, true},
		{[]string{"198.51.100.130"}, "198.51.100.130", 80, true},
		{[]string{"2001:db8:3::/64"}, "2001:db8:3::5", 80, true},
		{[]string{"2001:db8::/32"}, "2001:db8:3::5", 80, false},
		{[]string{"198.51.100.0/24"}, "198.51.100.2", 80, false}, // the host's own address
		{[]string{"198.51.100.2"}, "198.51.100.2", 80, true},
		{[]string{"127.0.0.1"}, "127.0.0.1", 80, true},
		{[]string{"127.0.0.0/8"}, "127.0.0.2", 80, true},
		// An embedded address is admitted by an entry for it.
		{[]string{"10.0.0.0/8"}, "64:ff9b::10.0.0.5", 80, true},
		{[]string{"10.0.0.0/8"}, "2002:a00:5::1", 80, true},
		{[]string{"::/0"}, "64:ff9b::10.0.0.5", 80, false},
	}
	for _, tt := range tests {
		p := policy(t, tt.entries...)
		r := g.Check(p, netip.MustParseAddr(tt.addr), tt.port)
		if (r == nil) != tt.admit {
			t.Errorf("entries %v, %s port %d: refusal %v, want admitted %v", tt.entries, tt.addr, tt.port, r, tt.admit)
		}
	}

	// Without a port: an entry admits the address on whatever port it
	// names.
	p := policy(t, "10.1.2.3:6379")
	if r := g.CheckAnyPort(p, netip.MustParseAddr("10.1.2.3")); r != nil {
		t.Errorf("CheckAnyPort(10.1.2.3) under 10.1.2.3:6379: %v", r)
	}
	if r := g.CheckAnyPort(p, netip.MustParseAddr("10.1.2.4")); r == nil {
		t.Error("CheckAnyPort(10.1.2.4) under 10.1.2.3:6379: admitted")
	}
	// The guard does not look at the mode; a nil policy admits nothing
	// refused.
	for _, mode := range []conf.Mode{conf.ModeOpen, conf.ModeNone} {
		p, _ := conf.NewPolicy(mode, []string{"api.example.test"})
		if r := g.Check(p, netip.MustParseAddr("10.0.0.5"), 80); r == nil {
			t.Errorf("mode %s: 10.0.0.5 admitted", mode)
		}
	}
	if r := g.Check(nil, netip.MustParseAddr("10.0.0.5"), 80); r == nil {
		t.Error("nil policy: 10.0.0.5 admitted")
	}
	if r := g.Check(nil, netip.MustParseAddr("203.0.113.7"), 80); r != nil {
		t.Errorf("nil policy: 203.0.113.7 refused: %v", r)
	}
}

// TestRefusalFields: what a refusal carries besides its text.
func TestRefusalFields(t *testing.T) {
	g := testHost()
	r := g.Check(nil, netip.MustParseAddr("64:ff9b::10.0.0.5"), 80)
	if r == nil || r.Addr != netip.MustParseAddr("64:ff9b::a00:5") || r.Embedded != netip.MustParseAddr("10.0.0.5") ||
		r.Form != "NAT64" || r.Range != netip.MustParsePrefix("10.0.0.0/8") || r.Err != nil {
		t.Errorf("NAT64 refusal %+v", r)
	}
	r = g.Check(nil, netip.MustParseAddr("::ffff:198.51.100.130"), 80)
	if r == nil || r.Addr != netip.MustParseAddr("198.51.100.130") || r.Embedded.IsValid() || r.Range != netip.MustParsePrefix("198.51.100.128/25") {
		t.Errorf("connected refusal %+v", r)
	}
}

// TestHostUnknown: when the host's addresses or routes cannot be read,
// every address is refused, public ones too, saying why.
func TestHostUnknown(t *testing.T) {
	boom := errors.New("netlink: boom")
	none := func() ([]netip.Addr, error) { return nil, nil }
	noRoutes := func() ([]netip.Prefix, error) { return nil, nil }
	for _, g := range []*Guard{
		New(Config{OwnAddrs: func() ([]netip.Addr, error) { return nil, boom }, ConnectedSubnets: noRoutes}),
		New(Config{OwnAddrs: none, ConnectedSubnets: func() ([]netip.Prefix, error) { return nil, boom }}),
	} {
		r := g.Check(policy(t, "0.0.0.0/0"), netip.MustParseAddr("203.0.113.7"), 443)
		if r == nil || !errors.Is(r.Err, boom) || !strings.HasPrefix(r.String(), "203.0.113.7: cannot tell whether it is private (listing the ") {
			t.Errorf("refusal %v, want one saying the host could not be read", r)
		}
	}
}

// TestForms: whatever the IPv4 address, its mapped form gets the same
// verdict, and its NAT64, 6to4, IPv4-translated and IPv4-compatible
// forms are refused exactly when it is, as that address.
func TestForms(t *testing.T) {
	g := testHost()
	p := policy(t, "10.1.0.0/16", "198.51.100.130:80")
	rng := rand.New(rand.NewPCG(1, 2))
	var samples []netip.Addr
	for range 20000 {
		v := rng.Uint32()
		samples = append(samples, netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}))
	}
	for _, s := range []string{"0.0.0.0", "0.0.0.1", "10.1.2.3", "10.2.0.1", "198.51.100.130", "198.51.100.131", "169.254.169.254", "127.0.0.1", "203.0.113.7"} {
		samples = append(samples, netip.MustParseAddr(s))
	}
	for _, a := range samples {
		v4 := g.Check(p, a, 80)
		b := a.As4()
		if m := g.Check(p, netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}), 80); (m == nil) != (v4 == nil) || (m != nil && m.String() != v4.String()) {
			t.Fatalf("%v refused %v, its mapped form %v", a, v4, m)
		}
		for _, form := range []netip.Addr{
			netip.AddrFrom16([16]byte{1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
			netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: b[0], 3: b[1], 4: b[2], 5: b[3], 15: 1}),
			netip.AddrFrom16([16]byte{8: 0xff, 9: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
			netip.AddrFrom16([16]byte{12: b[0], 13: b[1], 14: b[2], 15: b[3]}),
		} {
			r := g.Check(p, form, 80)
			if (r == nil) != (v4 == nil) {
				t.Fatalf("%v refused %v, its form %v refused %v", a, v4, form, r)
			}
			// :: and ::1 are refused as themselves.
			if r != nil && r.Embedded != a && form != netip.IPv6Unspecified() && form != netip.IPv6Loopback() {
				t.Fatalf("%v: its form %v refused %+v, not as %v", a, form, r, a)
			}
		}
	}
}

// Reason lists the first three refusals, each after its prefix, and
// counts the rest.
func TestReason(t *testing.T) {
	var rs []*Refusal
	for _, a := range []string{"10.0.0.5", "192.168.1.1", "127.0.0.1", "169.254.169.254", "fd00::1"} {
		rs = append(rs, &Refusal{Addr: netip.MustParseAddr(a), What: "private"})
	}
	if got, want := Reason("private upstream ", rs[:1]), "private upstream 10.0.0.5: private"; got != want {
		t.Errorf("one: %q, want %q", got, want)
	}
	want := "private answer 10.0.0.5: private; private answer 192.168.1.1: private; private answer 127.0.0.1: private; and 2 more"
	if got := Reason("private answer ", rs); got != want {
		t.Errorf("five: %q, want %q", got, want)
	}
	if got := Reason("private answer ", nil); got != "" {
		t.Errorf("none: %q", got)
	}
}

// clusterHost is testHost on a Kubernetes node: service CIDR 10.96.0.0/12
// and pod CIDR 10.244.0.0/16, of which the node's bridge 10.244.1.0/24
// (gateway 10.244.1.1, an address of the node) is a connected subnet; the
// cluster's ranges are open to the names under cluster.local.
func clusterHost() *Guard {
	h := testHost()
	own, connected := h.ownAddrs, h.connected
	return New(Config{
		OwnAddrs: func() ([]netip.Addr, error) {
			a, err := own()
			return append(a, netip.MustParseAddr("10.244.1.1"), netip.MustParseAddr("fd00:10:244:1::1")), err
		},
		ConnectedSubnets: func() ([]netip.Prefix, error) {
			c, err := connected()
			return append(c, netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")), err
		},
		Scopes: []Scope{{Domain: "cluster.local", Prefixes: []netip.Prefix{
			netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("10.244.0.0/16"),
			netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("100.64.0.0/10"),
		}}},
	})
}

// A name under the cluster domain reaches the cluster's ranges, private
// space and connected subnets alike; nothing else private, and no other
// name reaches them; an address entry still works as before.
func TestScopes(t *testing.T) {
	g := clusterHost()
	p := policy(t, "*.svc.cluster.local", "*.example.test")
	for _, tc := range []struct {
		name, addr string
		want       string // the refusal; "" permitted
	}{
		{"api.default.svc.cluster.local", "10.96.0.10", ""},
		{"API.Default.svc.cluster.local.", "10.96.0.10", ""},
		{"web.default.svc.cluster.local", "10.244.3.7", ""},                                           // a pod on another node: RFC 1918
		{"web.default.svc.cluster.local", "10.244.1.7", ""},                                           // a pod on this node: a connected subnet
		{"web.default.svc.cluster.local", "fd00:10:244:1::7", ""},                                     // ULA, connected
		{"web.default.svc.cluster.local", "10.244.1.1", "10.244.1.1: an address of the proxy's host"}, // the node itself
		{"x.default.svc.cluster.local", "100.100.100.200", "100.100.100.200: cloud metadata service"}, // inside a prefix, still refused
		{"x.default.svc.cluster.local", "10.0.0.5", "10.0.0.5: RFC 1918 (10.0.0.0/8)"},                // private, outside the prefixes
		{"x.default.svc.cluster.local", "10.88.0.5", "10.88.0.5: connected subnet 10.88.0.0/16 of the proxy's host"},
		{"x.default.svc.cluster.local", "127.0.0.1", "127.0.0.1: loopback (127.0.0.0/8)"},
		{"x.default.svc.cluster.local", "64:ff9b::a60:a", "64:ff9b::a60:a: NAT64 form of 10.96.0.10, RFC 1918 (10.0.0.0/8)"},
		{"cluster.local", "10.96.0.10", "10.96.0.10: RFC 1918 (10.0.0.0/8)"},     // the domain itself
		{"api.example.test", "10.96.0.10", "10.96.0.10: RFC 1918 (10.0.0.0/8)"},  // another name
		{"evilcluster.local", "10.96.0.10", "10.96.0.10: RFC 1918 (10.0.0.0/8)"}, // not under the domain
		{"", "10.96.0.10", "10.96.0.10: RFC 1918 (10.0.0.0/8)"},                  // no name: the client's choice
		{"api.default.svc.cluster.local", "203.0.113.7", ""},                     // public, as ever
	} {
		var got string
		if r := g.CheckName(p, tc.name, netip.MustParseAddr(tc.addr), 443); r != nil {
			got = r.String()
		}
		if got != tc.want {
			t.Errorf("CheckName(%q, %s) = %q, want %q", tc.name, tc.addr, got, tc.want)
		}
		got = ""
		if r := g.CheckNameAnyPort(p, tc.name, netip.MustParseAddr(tc.addr)); r != nil {
			got = r.String()
		}
		if got != tc.want {
			t.Errorf("CheckNameAnyPort(%q, %s) = %q, want %q", tc.name, tc.addr, got, tc.want)
		}
	}
	// Without scopes a cluster name is any name; with them, Check (no
	// name) is as before, and an address entry opens its range as ever.
	if r := testHost().CheckName(p, "api.default.svc.cluster.local", netip.MustParseAddr("10.96.0.10"), 443); r == nil {
		t.Error("a guard without scopes let a cluster name reach 10.96.0.10")
	}
	if r := g.Check(policy(t, "10.0.0.0/8"), netip.MustParseAddr("10.0.0.5"), 443); r != nil {
		t.Errorf("an address entry: %v", r)
	}
}

func TestRefusedRange(t *testing.T) {
	for _, tc := range []struct {
		prefix           string
		refused, private bool
	}{
		{"10.1.0.0/16", true, true},
		{"10.0.0.0/8", true, true},
		{"10.0.0.0/7", false, false},
		{"0.0.0.0/0", false, false},
		{"169.254.169.254/32", true, false},
		{"127.0.0.1/32", true, false},
		{"203.0.113.0/24", false, false},
		{"fd00::/8", true, true},
		{"2001:db8::/32", false, false},
	} {
		r, p := RefusedRange(netip.MustParsePrefix(tc.prefix))
		if r != tc.refused || p != tc.private {
			t.Errorf("RefusedRange(%s) = %v, %v; want %v, %v", tc.prefix, r, p, tc.refused, tc.private)
		}
	}
}

// Local: loopback and the host's own addresses, nothing else.
func TestLocal(t *testing.T) {
	g := testHost()
	for a, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "::ffff:127.0.0.1": true,
		"198.51.100.2": true, "2001:db8:1::2": true, "fe80::1%eth0": true,
		"198.51.100.3": false, "10.0.0.5": false, "198.51.100.130": false, "169.254.169.254": false, "::": false,
	} {
		if got := g.Local(netip.MustParseAddr(a)); got != want {
			t.Errorf("Local(%s) = %v, want %v", a, got, want)
		}
	}
}
