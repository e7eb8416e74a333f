package dnsfilter

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
)

// adWriter sets the AD bit on every answer, as a validating resolver
// does for signed zones.
type adWriter struct{ dns.ResponseWriter }

func (w adWriter) WriteMsg(m *dns.Msg) error {
	m.AuthenticatedData = true
	return w.ResponseWriter.WriteMsg(m)
}

// validatingUpstream is a test upstream answering from the test zone
// with AD set.
func validatingUpstream(t *testing.T) *upstream {
	up := startUpstream(t, testZone(t))
	up.setHandler(func(w dns.ResponseWriter, r *dns.Msg) { up.answerFromZone(adWriter{w}, r) })
	return up
}

// ask asks tf for name and qtype (with EDNS, so that a refusal can carry
// its EDE) and returns the answer and its log record.
func askLogged(t *testing.T, tf *testFilter, name string, qtype uint16) (*dns.Msg, map[string]any) {
	t.Helper()
	n := len(tf.logs.records(t))
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, false)
	r := tf.ask(t, "udp", m)
	return r, tf.logs.last(t, n+1)
}

// TestPrivateAnswersRefused: an A or AAAA question whose every answer of
// that type is an address the proxy would refuse to dial is refused, with
// an Extended DNS Error that does not name the address; the log names it.
func TestPrivateAnswersRefused(t *testing.T) {
	t.Parallel()
	up := validatingUpstream(t)
	for _, mode := range []conf.Mode{conf.ModeAllowlist, conf.ModeOpen} {
		tf := startFilter(t, Config{Sandbox: "sb-priv", Upstreams: []netip.AddrPort{up.addr}},
			policy(t, mode, "*.example.com", "0.0.0.0/0", "::/0"))
		for _, tc := range []struct {
			name   string
			qtype  uint16
			reason string
		}{
			{"rebind.example.com.", dns.TypeA, "private answer 10.0.0.5: RFC 1918 (10.0.0.0/8)"},
			{"rebind.example.com.", dns.TypeAAAA, "private answer fd00::5: unique local (ULA) (fc00::/7)"},
			// Through a CNAME to a name no entry admits: the addresses
			// at the end are what counts.
			{"alias.example.com.", dns.TypeA, "private answer 10.0.0.5: RFC 1918 (10.0.0.0/8)"},
			{"neighbour.example.com.", dns.TypeA, "private answer 198.51.100.130: connected subnet 198.51.100.128/25 of the proxy's host"},
			{"nat64.example.com.", dns.TypeAAAA, "private answer 64:ff9b::a00:5: NAT64 form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
			{"nat64-56.example.com.", dns.TypeAAAA, "private answer 64:ff9b:1:a:42:4dcb:cb00:7107: local-use NAT64 /56 form of 10.66.77.203, RFC 1918 (10.0.0.0/8)"},
			{"teredo.example.com.", dns.TypeAAAA, "private answer 2001:0:4136:e378:8000:63bf:f5ff:fffa: Teredo client form of 10.0.0.5, RFC 1918 (10.0.0.0/8)"},
		} {
			r, rec := askLogged(t, tf, tc.name, tc.qtype)
			what := string(mode) + " " + tc.name + " " + dns.Type(tc.qtype).String()
			wantRcode(t, r, dns.RcodeRefused)
			if len(r.Answer)+len(r.Ns) != 0 || r.AuthenticatedData {
				t.Errorf("%s: refusal carries records or AD: %v", what, r)
			}
			opt := r.IsEdns0()
			if opt == nil || len(opt.Option) != 1 {
				t.Fatalf("%s: refusal OPT %v, want one EDE option", what, opt)
			}
			wantText := "doorman: every " + dns.Type(tc.qtype).String() + " record of the answer is a private address in sandbox sb-priv"
			if ede, ok := opt.Option[0].(*dns.EDNS0_EDE); !ok || ede.InfoCode != dns.ExtendedErrorCodeProhibited || ede.ExtraText != wantText {
				t.Errorf("%s: EDE %v, want Prohibited %q", what, opt.Option[0], wantText)
			}
			for k, want := range map[string]any{
				"verdict": "deny", "reason": tc.reason, "rcode": "REFUSED", "rule": "*.example.com",
				"private_removed": float64(1), "level": "WARN", "upstream": up.addr.String(),
			} {
				if mode == conf.ModeOpen && k == "rule" {
					want = ""
				}
				if rec[k] != want {
					t.Errorf("%s: log %s = %v, want %v", what, k, rec[k], want)
				}
			}
		}
	}
}

// TestPrivateAnswersRemoved: of mixed answers only the public addresses
// pass, address hints lose their private values, and AD is cleared where
// anything was removed, as where ECH is; an answer with nothing private
// passes untouched, AD included.
func TestPrivateAnswersRemoved(t *testing.T) {
	t.Parallel()
	up := validatingUpstream(t)
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}}, policy(t, conf.ModeAllowlist, "*.example.com"))
	for _, tc := range []struct {
		name    string
		qtype   uint16
		want    []string
		removed float64
	}{
		{"mixed.example.com.", dns.TypeA, []string{"mixed.example.com.\t300\tIN\tA\t203.0.113.77"}, 1},
		{"mixed.example.com.", dns.TypeAAAA, []string{"mixed.example.com.\t300\tIN\tAAAA\t2001:db8::77"}, 1},
		{"hints.example.com.", dns.TypeHTTPS, []string{"hints.example.com.\t300\tIN\tHTTPS\t1 . alpn=\"h2\" ipv4hint=\"203.0.113.77\""}, 2},
		// The hint the mandatory list named goes, and the list with it.
		{"hintsonly.example.com.", dns.TypeHTTPS, []string{"hintsonly.example.com.\t300\tIN\tHTTPS\t1 . ipv6hint=\"2001:db8::77\""}, 1},
		// The question's type had no private answer: nothing to refuse.
		{"rebind.example.com.", dns.TypeHTTPS, nil, 0},
		{"api.example.com.", dns.TypeA, []string{
			"api.example.com.\t300\tIN\tCNAME\tedge.cdn.example.net.",
			"edge.cdn.example.net.\t300\tIN\tCNAME\tedge2.cdn.example.net.",
			"edge2.cdn.example.net.\t60\tIN\tA\t198.51.100.7",
		}, 0},
	} {
		r, rec := askLogged(t, tf, tc.name, tc.qtype)
		what := tc.name + " " + dns.Type(tc.qtype).String()
		wantRcode(t, r, dns.RcodeSuccess)
		if got := rrStrings(r.Answer); !slices.Equal(got, tc.want) {
			t.Errorf("%s: answer\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
		if r.AuthenticatedData != (tc.removed == 0) {
			t.Errorf("%s: AD %v after removing %v addresses", what, r.AuthenticatedData, tc.removed)
		}
		if rec["verdict"] != "allow" || rec["private_removed"] != tc.removed || rec["reason"] != "name allowed" {
			t.Errorf("%s: log record %v", what, rec)
		}
	}
}

// TestPrivateAnswersAdmitted: an address entry inside the private range
// lets its addresses through, as it lets the proxy dial them; one wider
// than the range does not.
func TestPrivateAnswersAdmitted(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "*.example.com", "10.0.0.5:6379", "::/0", "198.51.100.128/25"))
	r, rec := askLogged(t, tf, "rebind.example.com.", dns.TypeA)
	wantRcode(t, r, dns.RcodeSuccess)
	if got := rrStrings(r.Answer); len(got) != 1 || got[0] != "rebind.example.com.\t300\tIN\tA\t10.0.0.5" || rec["private_removed"] != float64(0) {
		t.Errorf("admitted private A: %q, log %v", got, rec)
	}
	r, _ = askLogged(t, tf, "neighbour.example.com.", dns.TypeA)
	wantRcode(t, r, dns.RcodeSuccess)
	r, rec = askLogged(t, tf, "rebind.example.com.", dns.TypeAAAA)
	wantRcode(t, r, dns.RcodeRefused)
	if rec["reason"] != "private answer fd00::5: unique local (ULA) (fc00::/7)" {
		t.Errorf("log %v", rec)
	}
}

// TestPrivateAnswersDenyRcode: the refusal is the configured denial rcode.
func TestPrivateAnswersDenyRcode(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}, DenyRcode: dns.RcodeNameError},
		policy(t, conf.ModeAllowlist, "*.example.com"))
	wantRcode(t, tf.query(t, "tcp", "rebind.example.com.", dns.TypeA), dns.RcodeNameError)
}

// TestStripPrivateEverySection: records in the authority and additional
// sections go too; the OPT record and other types stay; the message still
// packs.
func TestStripPrivateEverySection(t *testing.T) {
	t.Parallel()
	f := New(Config{Guard: testGuard()}, nil)
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	m := new(dns.Msg)
	m.Answer = []dns.RR{rr("a.example. 1 IN A 203.0.113.1"), rr("a.example. 1 IN A 127.0.0.1")}
	m.Ns = []dns.RR{rr("example. 1 IN NS ns.example."), rr("ns.example. 1 IN A 192.168.0.53")}
	m.Extra = []dns.RR{
		rr("ns.example. 1 IN AAAA fe80::53"),
		rr("ns.example. 1 IN AAAA 2001:db8::53"),
		rr("b.example. 1 IN SVCB 1 . ipv4hint=100.100.100.200 ipv6hint=fd00:ec2::254"),
		rr("c.example. 1 IN TXT \"10.0.0.5\""),
	}
	// The parser refuses a mapped address in ipv6hint; a resolver may
	// still send one.
	hint := m.Extra[2].(*dns.SVCB).Value[1].(*dns.SVCBIPv6Hint)
	hint.Hint = append(hint.Hint, net.ParseIP("::ffff:10.1.1.1"))
	m.SetEdns0(1232, false)
	pa := f.stripPrivate(m, nil, "")
	got := rrStrings(slices.Concat(m.Answer, m.Ns, m.Extra))
	want := []string{
		"a.example.\t1\tIN\tA\t203.0.113.1",
		"example.\t1\tIN\tNS\tns.example.",
		"ns.example.\t1\tIN\tAAAA\t2001:db8::53",
		"b.example.\t1\tIN\tSVCB\t1 .",
		"c.example.\t1\tIN\tTXT\t\"10.0.0.5\"",
		"\n;; OPT PSEUDOSECTION:\n; EDNS: version 0; flags:; udp: 1232",
	}
	if !slices.Equal(got, want) {
		t.Errorf("after stripPrivate\n%q\nwant\n%q", got, want)
	}
	if pa.removed != 6 || len(pa.refusals) != 6 {
		t.Errorf("removed %d (%d refusals), want 6", pa.removed, len(pa.refusals))
	}
	if want := "private answer 127.0.0.1: loopback (127.0.0.0/8); private answer 192.168.0.53: RFC 1918 (192.168.0.0/16); " +
		"private answer fe80::53: link-local (fe80::/10); and 3 more"; pa.reason() != want {
		t.Errorf("reason %q, want %q", pa.reason(), want)
	}
	if _, err := m.Pack(); err != nil {
		t.Errorf("stripped message does not pack: %v", err)
	}
	if pa := f.stripPrivate(m, nil, ""); pa.removed != 0 {
		t.Errorf("second stripPrivate removed %d", pa.removed)
	}
}

// TestStripHintsKeepsEachFamily: a hint that keeps some of its addresses
// stays the hint it was, IPv4 or IPv6, with the public ones.
func TestStripHintsKeepsEachFamily(t *testing.T) {
	t.Parallel()
	f := New(Config{Guard: testGuard()}, nil)
	rr, err := dns.NewRR("b.example. 1 IN SVCB 1 . ipv4hint=203.0.113.1,10.0.0.1 ipv6hint=2001:db8::1,fd00::1")
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.Answer = []dns.RR{rr}
	if pa := f.stripPrivate(m, nil, ""); pa.removed != 2 {
		t.Errorf("removed %d, want 2", pa.removed)
	}
	if got, want := m.Answer[0].String(), "b.example.\t1\tIN\tSVCB\t1 . ipv4hint=\"203.0.113.1\" ipv6hint=\"2001:db8::1\""; got != want {
		t.Errorf("after stripPrivate\n %s\nwant %s", got, want)
	}
}

// TestClusterNames: with the cluster's service CIDR open to the names
// under its domain (a guard.Scope), an admitted cluster name's answer in
// that range passes, through a CNAME too; the same address is still
// removed from the answer for any other name, and a cluster name's
// address outside the range is removed as before. In mode open no name
// entry admits the name, and the proxy would dial the client's choice of
// address: the scope does not apply.
func TestClusterNames(t *testing.T) {
	t.Parallel()
	z := zone{}
	for _, s := range []string{
		"api.default.svc.cluster.local. 300 IN A 10.96.0.10",
		"alias.default.svc.cluster.local. 300 IN CNAME ext.example.net.",
		"ext.example.net. 300 IN A 10.96.0.11",
		"db.default.svc.cluster.local. 300 IN A 10.0.0.5",
		"svc.example.com. 300 IN A 10.96.0.10",
	} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		z.add(rr)
	}
	up := startUpstream(t, z)
	g := guard.New(guard.Config{
		OwnAddrs:         func() ([]netip.Addr, error) { return nil, nil },
		ConnectedSubnets: func() ([]netip.Prefix, error) { return nil, nil },
		Scopes:           []guard.Scope{{Domain: "cluster.local", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}},
	})
	allow := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}, Guard: g}, policy(t, conf.ModeAllowlist, "*.svc.cluster.local", "*.example.com"))
	open := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}, Guard: g}, policy(t, conf.ModeOpen))
	for _, tc := range []struct {
		tf    *testFilter
		name  string
		rcode int
		addr  string // the answer's last A record, if any
	}{
		{allow, "api.default.svc.cluster.local.", dns.RcodeSuccess, "10.96.0.10"},
		{allow, "alias.default.svc.cluster.local.", dns.RcodeSuccess, "10.96.0.11"},
		{allow, "db.default.svc.cluster.local.", dns.RcodeRefused, ""},
		{allow, "svc.example.com.", dns.RcodeRefused, ""},
		{open, "api.default.svc.cluster.local.", dns.RcodeRefused, ""},
	} {
		r, rec := askLogged(t, tc.tf, tc.name, dns.TypeA)
		var addr string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				addr = a.A.String()
			}
		}
		if r.Rcode != tc.rcode || addr != tc.addr {
			t.Errorf("%s (%s): %s %q, want %s %q; log %v", tc.name, rec["rule"], dns.RcodeToString[r.Rcode], addr,
				dns.RcodeToString[tc.rcode], tc.addr, rec)
		}
	}
}
