package dnsfilter

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
)

func TestAllowedNamesForwardedWhole(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "api.example.com:443", "*.github.test"))

	for _, proto := range []string{"udp", "tcp"} {
		r := tf.query(t, proto, "api.example.com.", dns.TypeA)
		wantRcode(t, r, dns.RcodeSuccess)
		want := []string{
			"api.example.com.\t300\tIN\tCNAME\tedge.cdn.example.net.",
			"edge.cdn.example.net.\t300\tIN\tCNAME\tedge2.cdn.example.net.",
			"edge2.cdn.example.net.\t60\tIN\tA\t198.51.100.7",
		}
		if got := rrStrings(r.Answer); !slices.Equal(got, want) {
			t.Errorf("%s: answer\n%s\nwant\n%s", proto, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}

		// A wildcard admits names below it at any depth; mixed case and
		// the question echoed as the client wrote it.
		r = tf.query(t, proto, "Raw.Deep.GitHub.test.", dns.TypeA)
		wantRcode(t, r, dns.RcodeSuccess)
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "198.51.100.8" {
			t.Errorf("%s: wildcard answer %v", proto, r.Answer)
		}
		if r.Question[0].Name != "Raw.Deep.GitHub.test." {
			t.Errorf("%s: question %q, want the client's spelling", proto, r.Question[0].Name)
		}

		// The wildcard's apex is not admitted.
		wantRcode(t, tf.query(t, proto, "github.test.", dns.TypeA), dns.RcodeRefused)
	}
	if got, want := up.seenNames(), []string{"api.example.com.", "Raw.Deep.GitHub.test.", "api.example.com.", "Raw.Deep.GitHub.test."}; !slices.Equal(got, want) {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
}

func TestNotAdmittedRefusedAndNotForwarded(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "api.example.com", "*.github.test", "203.0.113.66"))

	for _, tc := range []struct {
		name  string
		qtype uint16
	}{
		{"evil.test.", dns.TypeA},
		{"evil.test.", dns.TypeAAAA},
		{"xapi.example.com.", dns.TypeA},
		{"sub.api.example.com.", dns.TypeA}, // an exact entry admits no name below it
		{"github.test.", dns.TypeHTTPS},
		{"66.113.0.203.", dns.TypeA}, // an address entry admits no name
		{".", dns.TypeNS},
		{"localhost.", dns.TypeA},
	} {
		for _, proto := range []string{"udp", "tcp"} {
			r := tf.query(t, proto, tc.name, tc.qtype)
			wantRcode(t, r, dns.RcodeRefused)
			if len(r.Answer) != 0 || r.Question[0].Name != tc.name {
				t.Errorf("%s %s: refused answer %v", proto, tc.name, r)
			}
		}
	}
	if n := up.queries.Load(); n != 0 {
		t.Errorf("upstream saw %d queries (%q), want 0", n, up.seenNames())
	}
	if s := tf.Stats(); s.Denied != 16 || s.Allowed != 0 {
		t.Errorf("stats %+v, want 16 denied", s)
	}
}

// An allowed name with a search-list domain after it is answered NXDOMAIN,
// not forwarded, so that stub resolvers go on to the name as given.
func TestSearchListExpansionNXDOMAIN(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "api.example.com", "*.github.test"))
	for _, name := range []string{
		"api.example.com.default.svc.cluster.local.",
		"api.example.com.evil.test.",
		"raw.deep.github.test.corp.test.",
		"API.Example.com.x.",
	} {
		for _, proto := range []string{"udp", "tcp"} {
			r := tf.query(t, proto, name, dns.TypeA)
			wantRcode(t, r, dns.RcodeNameError)
			if len(r.Answer) != 0 {
				t.Errorf("%s %s: answer %v", proto, name, r.Answer)
			}
		}
	}
	// Not expansions: refused as ever.
	for _, name := range []string{"api.example.co.", "github.test.corp.test.", "example.com.api.", "xapi.example.com.x."} {
		wantRcode(t, tf.query(t, "udp", name, dns.TypeA), dns.RcodeRefused)
	}
	if n := up.queries.Load(); n != 0 {
		t.Errorf("upstream saw %d queries (%q), want 0", n, up.seenNames())
	}
	rec := tf.logs.last(t, 12)
	if rec["verdict"] != "deny" || rec["rcode"] != "REFUSED" {
		t.Errorf("log record %v", rec)
	}
	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeSuccess)
}

func TestTunnelQueriesRefused(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "*.example.com", "tunnel.test"))

	// Data encoded into names below a domain that is not allowed, with
	// the usual tunnel query types.
	for i, qtype := range []uint16{dns.TypeTXT, dns.TypeNULL, dns.TypeCNAME, dns.TypeMX, dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeANY} {
		name := "aGVsbG8gd29ybGQ." + strings.Repeat("a", i+1) + ".x1.tunnel.test."
		for _, proto := range []string{"udp", "tcp"} {
			wantRcode(t, tf.query(t, proto, name, qtype), dns.RcodeRefused)
		}
	}
	if n := up.queries.Load(); n != 0 {
		t.Fatalf("upstream saw %d tunnel queries (%q), want 0", n, up.seenNames())
	}
	rec := tf.logs.last(t, 16)
	if rec["verdict"] != "deny" || rec["reason"] != "name not allowed" || rec["rcode"] != "REFUSED" || rec["upstream"] != "" {
		t.Errorf("log record %v", rec)
	}

	// Allowing the wildcard lets the same queries through.
	tf.SetPolicy(policy(t, conf.ModeAllowlist, "*.tunnel.test"))
	r := tf.query(t, "udp", "x1.tunnel.test.", dns.TypeTXT)
	wantRcode(t, r, dns.RcodeSuccess)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.TXT).Txt[0] != "secret data" {
		t.Errorf("TXT answer %v", r.Answer)
	}
	if n := up.queries.Load(); n != 1 {
		t.Errorf("upstream saw %d queries, want 1", n)
	}
}

func TestECHRemoved(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "*.example.com"))

	for _, proto := range []string{"udp", "tcp"} {
		m := new(dns.Msg)
		m.SetQuestion("svc.example.com.", dns.TypeHTTPS)
		m.SetEdns0(1232, true)
		r := tf.ask(t, proto, m)
		wantRcode(t, r, dns.RcodeSuccess)
		want := []string{
			"svc.example.com.\t300\tIN\tHTTPS\t1 . alpn=\"h2,h3\"",
			"svc.example.com.\t300\tIN\tHTTPS\t2 svc2.example.com. mandatory=\"alpn\" alpn=\"h2\" port=\"8443\"",
		}
		if got := rrStrings(r.Answer); !slices.Equal(got, want) {
			t.Errorf("%s: answer\n%s\nwant\n%s", proto, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if r.AuthenticatedData {
			t.Errorf("%s: AD set on an answer the filter changed", proto)
		}
		rec := tf.logs.last(t, len(tf.logs.records(t)))
		if rec["ech_removed"] != true || rec["qtype"] != "HTTPS" {
			t.Errorf("%s: log record %v", proto, rec)
		}

		m = new(dns.Msg)
		m.SetQuestion("_8443._https.svc.example.com.", dns.TypeSVCB)
		r = tf.ask(t, proto, m)
		want = []string{"_8443._https.svc.example.com.\t300\tIN\tSVCB\t1 svc.example.com. port=\"8443\""}
		if got := rrStrings(r.Answer); !slices.Equal(got, want) {
			t.Errorf("%s: SVCB answer %q, want %q", proto, got, want)
		}
	}

	// An HTTPS record without ECH passes unchanged, and the log says so.
	n := len(tf.logs.records(t))
	r := tf.query(t, "udp", "plain.example.com.", dns.TypeHTTPS)
	if got := rrStrings(r.Answer); len(got) != 1 || got[0] != "plain.example.com.\t300\tIN\tHTTPS\t1 . alpn=\"h2\"" {
		t.Errorf("plain HTTPS answer %q", got)
	}
	if rec := tf.logs.last(t, n+1); rec["ech_removed"] != false {
		t.Errorf("log record %v", rec)
	}
}

func TestStripECHEverySection(t *testing.T) {
	t.Parallel()
	https := func(s string) dns.RR {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return rr
	}
	const ech = "ech=AEj+DQBEAQAgACBNPm8ILXGhjzeFZrT6IEXnRnAAvp2Q5L4uj/hBg6XcTAAEAAEAAQAVY2xvdWRmbGFyZS1lY2guY29tAAA="
	m := new(dns.Msg)
	m.Answer = []dns.RR{https("a.example. 1 IN HTTPS 1 . mandatory=ech " + ech)}
	m.Ns = []dns.RR{https("b.example. 1 IN SVCB 1 . " + ech + " alpn=h3")}
	m.Extra = []dns.RR{https("c.example. 1 IN HTTPS 1 . " + ech)}
	if !stripECH(m) {
		t.Fatal("stripECH reported no change")
	}
	got := rrStrings(slices.Concat(m.Answer, m.Ns, m.Extra))
	want := []string{
		"a.example.\t1\tIN\tHTTPS\t1 .",
		"b.example.\t1\tIN\tSVCB\t1 . alpn=\"h3\"",
		"c.example.\t1\tIN\tHTTPS\t1 .",
	}
	if !slices.Equal(got, want) {
		t.Errorf("after stripECH\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := m.Pack(); err != nil {
		t.Errorf("stripped message does not pack: %v", err)
	}
	if stripECH(m) {
		t.Error("second stripECH reported a change")
	}
}

func TestModeOpenForwardsEverything(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}}, policy(t, conf.ModeOpen))

	r := tf.query(t, "udp", "evil.test.", dns.TypeA)
	wantRcode(t, r, dns.RcodeSuccess)
	if len(r.Answer) != 1 {
		t.Errorf("answer %v", r.Answer)
	}
	wantRcode(t, tf.query(t, "tcp", "x1.tunnel.test.", dns.TypeTXT), dns.RcodeSuccess)
	wantRcode(t, tf.query(t, "udp", "nowhere.test.", dns.TypeA), dns.RcodeNameError)
	if n := up.queries.Load(); n != 3 {
		t.Errorf("upstream saw %d queries, want 3", n)
	}
	rec := tf.logs.last(t, 3)
	if rec["verdict"] != "allow" || rec["reason"] != "mode open" || rec["rcode"] != "NXDOMAIN" || rec["name"] != "nowhere.test" {
		t.Errorf("log record %v", rec)
	}

	// ECH is removed in mode open too: it would hide the name from the
	// TCP proxy's log.
	r = tf.query(t, "udp", "svc.example.com.", dns.TypeHTTPS)
	for _, rr := range r.Answer {
		if strings.Contains(rr.String(), "ech=") {
			t.Errorf("ECH left in mode open: %v", rr)
		}
	}
}

func TestModeNoneRefusesEverything(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeNone, "api.example.com", "*.example.com"))

	for _, proto := range []string{"udp", "tcp"} {
		wantRcode(t, tf.query(t, proto, "api.example.com.", dns.TypeA), dns.RcodeRefused)
		wantRcode(t, tf.query(t, proto, "svc.example.com.", dns.TypeHTTPS), dns.RcodeRefused)
	}
	if n := up.queries.Load(); n != 0 {
		t.Errorf("upstream saw %d queries, want 0", n)
	}
	if rec := tf.logs.last(t, 4); rec["reason"] != "mode none" || rec["verdict"] != "deny" {
		t.Errorf("log record %v", rec)
	}

	// A nil policy is deny-all.
	tf2 := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}}, nil)
	wantRcode(t, tf2.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeRefused)
	if n := up.queries.Load(); n != 0 {
		t.Errorf("upstream saw %d queries, want 0", n)
	}
}

func TestSetPolicy(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "github.test"))

	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeRefused)
	tf.SetPolicy(policy(t, conf.ModeAllowlist, "API.example.com."))
	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeSuccess)
	wantRcode(t, tf.query(t, "udp", "github.test.", dns.TypeA), dns.RcodeRefused)
	tf.SetPolicy(nil)
	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeRefused)
	if got := tf.Policy().Mode; got != conf.ModeNone {
		t.Errorf("policy after SetPolicy(nil) has mode %s, want none", got)
	}
	if n := up.queries.Load(); n != 1 {
		t.Errorf("upstream saw %d queries, want 1", n)
	}
}

func TestTruncationPassesThrough(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "big.example.com"))

	// 40 A records do not fit in 512 bytes: the upstream sets TC over UDP,
	// the client gets it and retries over TCP, where everything fits.
	r := tf.query(t, "udp", "big.example.com.", dns.TypeA)
	if !r.Truncated {
		t.Fatalf("UDP answer of %d records is not truncated", len(r.Answer))
	}
	if up.lastSeen().IsEdns0() != nil {
		t.Error("a query without EDNS was forwarded with EDNS")
	}
	r = tf.query(t, "tcp", "big.example.com.", dns.TypeA)
	if r.Truncated || len(r.Answer) != 40 {
		t.Fatalf("TCP answer: TC %v, %d records, want 40", r.Truncated, len(r.Answer))
	}

	// With EDNS the client gets everything over UDP, and the size offered
	// upstream is the client's, at most 1232.
	m := new(dns.Msg)
	m.SetQuestion("big.example.com.", dns.TypeA)
	m.SetEdns0(4096, false)
	r = tf.ask(t, "udp", m)
	if r.Truncated || len(r.Answer) != 40 {
		t.Fatalf("EDNS UDP answer: TC %v, %d records, want 40", r.Truncated, len(r.Answer))
	}
	if opt := r.IsEdns0(); opt == nil || opt.UDPSize() != advertisedUDPSize {
		t.Errorf("answer OPT %v, want UDP size %d", opt, advertisedUDPSize)
	}
	if opt := up.lastSeen().IsEdns0(); opt == nil || opt.UDPSize() != advertisedUDPSize {
		t.Errorf("upstream query OPT %v, want UDP size %d", opt, advertisedUDPSize)
	}
}

func TestUpstreamQueryCarriesOnlyTheQuestion(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "api.example.com"))

	m := new(dns.Msg)
	m.SetQuestion("aPi.example.com.", dns.TypeA)
	m.Id = 4242
	m.CheckingDisabled = true
	m.SetEdns0(1400, true)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option,
		&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(198, 51, 100, 0).To4()},
		&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"},
		&dns.EDNS0_LOCAL{Code: 65001, Data: []byte("exfiltrated")},
	)
	m.Extra = append(m.Extra, &dns.TXT{Hdr: dns.RR_Header{Name: "leak.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{"x"}})
	r := tf.ask(t, "udp", m)
	wantRcode(t, r, dns.RcodeSuccess)
	if r.Id != 4242 {
		t.Errorf("answer ID %d, want the query's 4242", r.Id)
	}

	seen := up.lastSeen()
	if seen.Id == 4242 {
		t.Error("the client's ID was forwarded")
	}
	if !seen.RecursionDesired || !seen.CheckingDisabled || len(seen.Question) != 1 || seen.Question[0].Name != "aPi.example.com." {
		t.Errorf("upstream query %v", seen)
	}
	if len(seen.Extra) != 1 {
		t.Fatalf("upstream query has %d additional records, want the OPT only: %v", len(seen.Extra), seen.Extra)
	}
	if o := seen.IsEdns0(); o == nil || !o.Do() || len(o.Option) != 0 || o.UDPSize() != 1232 {
		t.Errorf("upstream OPT %v, want DO, size 1232, no options", o)
	}
}

func TestMalformedQueries(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "api.example.com"))

	two := new(dns.Msg)
	two.SetQuestion("api.example.com.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "evil.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	none := new(dns.Msg)
	none.Id = 7
	notify := new(dns.Msg)
	notify.SetNotify("api.example.com.")
	update := new(dns.Msg)
	update.SetUpdate("example.com.")
	axfr := new(dns.Msg)
	axfr.SetAxfr("api.example.com.")
	chaos := new(dns.Msg)
	chaos.SetQuestion("api.example.com.", dns.TypeA)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	badvers := new(dns.Msg)
	badvers.SetQuestion("api.example.com.", dns.TypeA)
	badvers.SetEdns0(1232, false)
	badvers.IsEdns0().SetVersion(1)

	for _, tc := range []struct {
		what  string
		m     *dns.Msg
		rcode int
	}{
		{"two questions", two, dns.RcodeFormatError},
		{"no question", none, dns.RcodeFormatError},
		{"NOTIFY", notify, dns.RcodeNotImplemented},
		{"UPDATE", update, dns.RcodeNotImplemented},
		{"AXFR", axfr, dns.RcodeNotImplemented},
		{"class CH", chaos, dns.RcodeRefused},
		{"EDNS version 1", badvers, dns.RcodeBadVers},
	} {
		for _, proto := range []string{"udp", "tcp"} {
			r := tf.ask(t, proto, tc.m)
			if r.Rcode != tc.rcode || r.Id != tc.m.Id || len(r.Answer) != 0 {
				t.Errorf("%s over %s: got %s ID %d, want %s ID %d", tc.what, proto,
					dns.RcodeToString[r.Rcode], r.Id, dns.RcodeToString[tc.rcode], tc.m.Id)
			}
		}
	}
	if n := up.queries.Load(); n != 0 {
		t.Errorf("upstream saw %d queries (%q), want 0", n, up.seenNames())
	}
}

func TestMalformedPackets(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "api.example.com"))

	c, err := net.Dial("udp", tf.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exchange := func(b []byte) []byte {
		t.Helper()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			return nil
		}
		return buf[:n]
	}

	// Shorter than a header, and responses: no reply at all.
	if got := exchange([]byte{0x12, 0x34, 0x01}); got != nil {
		t.Errorf("short packet got a reply %x", got)
	}
	resp := new(dns.Msg)
	resp.SetQuestion("api.example.com.", dns.TypeA)
	resp.Response = true
	b, _ := resp.Pack()
	if got := exchange(b); got != nil {
		t.Errorf("a response got a reply %x", got)
	}

	// A header followed by garbage: FORMERR with the ID.
	got := exchange([]byte{0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0x3f, 'x'})
	var r dns.Msg
	if err := r.Unpack(got); err != nil {
		t.Fatalf("garbage query: reply %x does not unpack: %v", got, err)
	}
	if r.Id != 0xabcd || r.Rcode != dns.RcodeFormatError || !r.Response {
		t.Errorf("garbage query: reply %v", &r)
	}
	if rec := tf.logs.last(t, 3); rec["verdict"] != "deny" || !strings.HasPrefix(rec["reason"].(string), "malformed query") || rec["rcode"] != "FORMERR" {
		t.Errorf("log record %v", rec)
	}
	recs := tf.logs.records(t)
	if recs[0]["rcode"] != "none" || recs[1]["reason"] != "not a query: the QR bit is set" {
		t.Errorf("log records %v", recs)
	}

	// Over TCP, a query that gets no reply ends the connection.
	tc, err := net.Dial("tcp", tf.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.Write([]byte{0, 3, 1, 2, 3})
	tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := tc.Read(make([]byte, 10)); err == nil {
		t.Errorf("TCP connection still open after a short query (read %d bytes)", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("TCP connection not closed after a short query")
	}
	if up.queries.Load() != 0 {
		t.Error("upstream saw a query")
	}
}

func TestUpstreamIDMismatchRejected(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	forged := func(r *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Id = r.Id + 1
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(203, 0, 113, 66)}}
		return m
	}
	up.setHandler(func(w dns.ResponseWriter, r *dns.Msg) { w.WriteMsg(forged(r)) })
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}, Timeout: 300 * time.Millisecond},
		policy(t, conf.ModeAllowlist, "api.example.com"))

	for i, proto := range []string{"udp", "tcp"} {
		r := tf.query(t, proto, "api.example.com.", dns.TypeA)
		wantRcode(t, r, dns.RcodeServerFailure)
		if len(r.Answer) != 0 {
			t.Errorf("%s: forged answer passed: %v", proto, r.Answer)
		}
		rec := tf.logs.last(t, i+1)
		if rec["verdict"] != "error" || rec["level"] != "ERROR" || rec["upstream"] != up.addr.String() {
			t.Errorf("%s: log record %v", proto, rec)
		}
		want := "no answer within 300ms" // UDP: the wrong ID is skipped
		if proto == "tcp" {
			want = "id mismatch"
		}
		if !strings.Contains(rec["reason"].(string), want) {
			t.Errorf("%s: reason %q, want it to say %q", proto, rec["reason"], want)
		}
	}

	// Over UDP a forged answer that arrives first is skipped and the
	// real one taken.
	up.setHandler(func(w dns.ResponseWriter, r *dns.Msg) {
		w.WriteMsg(forged(r))
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer, _ = up.zone.resolve(r.Question[0])
		w.WriteMsg(m)
	})
	r := tf.query(t, "udp", "api.example.com.", dns.TypeA)
	wantRcode(t, r, dns.RcodeSuccess)
	if len(r.Answer) != 3 || strings.Contains(r.String(), "203.0.113.66") {
		t.Errorf("answer %v", r.Answer)
	}
}

func TestUpstreamQuestionMismatchRejected(t *testing.T) {
	t.Parallel()
	bad := startUpstream(t, testZone(t))
	bad.setHandler(func(w dns.ResponseWriter, r *dns.Msg) {
		// An answer, with the right ID, for another name.
		q := r.Copy()
		q.Question[0].Name = "evil.test."
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer, _ = bad.zone.resolve(q.Question[0])
		w.WriteMsg(m)
	})
	good := startUpstream(t, testZone(t))
	p := policy(t, conf.ModeAllowlist, "api.example.com")

	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{bad.addr}}, p)
	r := tf.query(t, "udp", "api.example.com.", dns.TypeA)
	wantRcode(t, r, dns.RcodeServerFailure)
	if rec := tf.logs.last(t, 1); !strings.Contains(rec["reason"].(string), "answer is for evil.test.") {
		t.Errorf("log record %v", rec)
	}

	// The next upstream is tried, and the log names the one that answered.
	tf = startFilter(t, Config{Upstreams: []netip.AddrPort{bad.addr, good.addr}}, p)
	r = tf.query(t, "tcp", "api.example.com.", dns.TypeA)
	wantRcode(t, r, dns.RcodeSuccess)
	if len(r.Answer) != 3 || strings.Contains(r.String(), "203.0.113.66") {
		t.Errorf("answer %v", r.Answer)
	}
	if rec := tf.logs.last(t, 1); rec["upstream"] != good.addr.String() || rec["verdict"] != "allow" {
		t.Errorf("log record %v", rec)
	}
}

func TestUpstreamDown(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: bind one, then close it.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	pc.Close()
	p := policy(t, conf.ModeAllowlist, "api.example.com")

	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{down}, Timeout: 300 * time.Millisecond}, p)
	for i, proto := range []string{"udp", "tcp"} {
		start := time.Now()
		r := tf.query(t, proto, "api.example.com.", dns.TypeA)
		wantRcode(t, r, dns.RcodeServerFailure)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: SERVFAIL took %v", proto, d)
		}
		rec := tf.logs.last(t, i+1)
		if rec["verdict"] != "error" || rec["level"] != "ERROR" || rec["rcode"] != "SERVFAIL" ||
			rec["upstream"] != down.String() || !strings.HasPrefix(rec["reason"].(string), "no upstream answered: "+down.String()) {
			t.Errorf("%s: log record %v", proto, rec)
		}
	}
	if s := tf.Stats(); s.Failed != 2 {
		t.Errorf("stats %+v, want 2 failed", s)
	}

	// No upstreams at all.
	tf = startFilter(t, Config{}, p)
	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeServerFailure)
	if rec := tf.logs.last(t, 1); rec["reason"] != "no upstream resolvers configured" {
		t.Errorf("log record %v", rec)
	}

	// A resolver that is down is skipped for the next.
	up := startUpstream(t, testZone(t))
	tf = startFilter(t, Config{Upstreams: []netip.AddrPort{down, up.addr}, Timeout: 300 * time.Millisecond}, p)
	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeSuccess)
}

func TestUpstreamServfailTriesNext(t *testing.T) {
	t.Parallel()
	failing := startUpstream(t, testZone(t))
	failing.setHandler(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		w.WriteMsg(m)
	})
	good := startUpstream(t, testZone(t))
	p := policy(t, conf.ModeAllowlist, "api.example.com")

	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{failing.addr, good.addr}}, p)
	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeSuccess)

	// When every resolver fails so, the last answer is passed on.
	tf = startFilter(t, Config{Upstreams: []netip.AddrPort{failing.addr}}, p)
	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeServerFailure)
	if rec := tf.logs.last(t, 1); rec["verdict"] != "allow" || !strings.Contains(rec["reason"].(string), "answered SERVFAIL") {
		t.Errorf("log record %v", rec)
	}
}

func TestLogRecordFields(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Sandbox: "sb-logs", Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "*.example.com:443"))

	tf.query(t, "udp", "API.Example.com.", dns.TypeAAAA)
	tf.query(t, "tcp", "evil.test.", dns.TypeTXT)
	tf.logs.last(t, 2)
	recs := tf.logs.records(t)
	fields := []string{"time", "level", "msg", "sandbox", "proto", "client", "name", "qtype", "verdict", "rule", "reason", "rcode", "upstream", "ech_removed", "private_removed", "duration_ms"}
	for _, rec := range recs {
		for _, k := range fields {
			if _, ok := rec[k]; !ok {
				t.Errorf("log record lacks %q: %v", k, rec)
			}
		}
		if rec["msg"] != "dns" || rec["sandbox"] != "sb-logs" {
			t.Errorf("log record %v", rec)
		}
		if _, err := netip.ParseAddrPort(rec["client"].(string)); err != nil {
			t.Errorf("client %q: %v", rec["client"], err)
		}
	}
	allow, deny := recs[0], recs[1]
	for k, want := range map[string]any{
		"level": "INFO", "proto": "udp", "name": "api.example.com", "qtype": "AAAA", "verdict": "allow",
		"rule": "*.example.com:443", "reason": "name allowed", "rcode": "NOERROR", "upstream": up.addr.String(),
	} {
		if allow[k] != want {
			t.Errorf("allowed query: %s = %v, want %v", k, allow[k], want)
		}
	}
	for k, want := range map[string]any{
		"level": "WARN", "proto": "tcp", "name": "evil.test", "qtype": "TXT", "verdict": "deny",
		"rule": "", "reason": "name not allowed", "rcode": "REFUSED", "upstream": "",
	} {
		if deny[k] != want {
			t.Errorf("denied query: %s = %v, want %v", k, deny[k], want)
		}
	}
	if d, ok := allow["duration_ms"].(float64); !ok || d <= 0 {
		t.Errorf("duration_ms %v", allow["duration_ms"])
	}
}

func TestDenialCarriesExtendedError(t *testing.T) {
	t.Parallel()
	tf := startFilter(t, Config{Sandbox: "sb-ede"}, policy(t, conf.ModeAllowlist))
	m := new(dns.Msg)
	m.SetQuestion("evil.test.", dns.TypeA)
	m.SetEdns0(1232, false)
	r := tf.ask(t, "udp", m)
	wantRcode(t, r, dns.RcodeRefused)
	opt := r.IsEdns0()
	if opt == nil || len(opt.Option) != 1 {
		t.Fatalf("refusal OPT %v, want one EDE option", opt)
	}
	ede, ok := opt.Option[0].(*dns.EDNS0_EDE)
	if !ok || ede.InfoCode != dns.ExtendedErrorCodeProhibited || ede.ExtraText != "doorman: name not allowed in sandbox sb-ede" {
		t.Errorf("EDE %v", opt.Option[0])
	}
	// Without EDNS, no OPT record.
	if r := tf.query(t, "udp", "evil.test.", dns.TypeA); r.IsEdns0() != nil {
		t.Errorf("answer to a query without EDNS has OPT: %v", r)
	}
}

func TestDenyRcodeNXDOMAIN(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}, DenyRcode: dns.RcodeNameError},
		policy(t, conf.ModeAllowlist, "api.example.com"))
	wantRcode(t, tf.query(t, "udp", "evil.test.", dns.TypeA), dns.RcodeNameError)
	wantRcode(t, tf.query(t, "udp", "api.example.com.", dns.TypeA), dns.RcodeSuccess)
	if n := up.queries.Load(); n != 1 {
		t.Errorf("upstream saw %d queries, want 1", n)
	}
	// Any other value means REFUSED.
	tf = startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}, DenyRcode: dns.RcodeSuccess},
		policy(t, conf.ModeAllowlist))
	wantRcode(t, tf.query(t, "udp", "evil.test.", dns.TypeA), dns.RcodeRefused)
}

func TestReverseLookups(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "203.0.113.0/24:443", "2001:db8::/32", "1.1.1.1.in-addr.arpa"))

	for _, tc := range []struct {
		name  string
		rcode int
	}{
		{"7.113.0.203.in-addr.arpa.", dns.RcodeSuccess},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.B.D.0.1.0.0.2.ip6.arpa.", dns.RcodeSuccess},
		{"1.1.1.1.in-addr.arpa.", dns.RcodeNameError}, // admitted by its name entry
		{"8.8.8.8.in-addr.arpa.", dns.RcodeRefused},
		{"113.0.203.in-addr.arpa.", dns.RcodeRefused},                   // a network, not an address
		{"data.7.113.0.203.in-addr.arpa.", dns.RcodeRefused},            // below an address
		{"07.113.0.203.in-addr.arpa.", dns.RcodeRefused},                // not canonical
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.", dns.RcodeRefused}, // partial
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.2.0.0.2.ip6.arpa.", dns.RcodeRefused},
	} {
		r := tf.query(t, "udp", tc.name, dns.TypePTR)
		if r.Rcode != tc.rcode {
			t.Errorf("PTR %s: %s, want %s", tc.name, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
		}
	}
	if n := up.queries.Load(); n != 3 {
		t.Errorf("upstream saw %d queries (%q), want 3", n, up.seenNames())
	}
}

func TestReverseAddr(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"7.113.0.203.in-addr.arpa": "203.0.113.7",
		"0.0.0.0.in-addr.arpa":     "0.0.0.0",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa": "2001:db8::1",
		"f.e.d.c.b.a.9.8.7.6.5.4.3.2.1.0.f.e.d.c.b.a.9.8.7.6.5.4.3.2.1.0.ip6.arpa": "123:4567:89ab:cdef:123:4567:89ab:cdef",
		"256.0.0.1.in-addr.arpa": "",
		"1.2.3.in-addr.arpa":     "",
		"a.2.3.4.in-addr.arpa":   "",
		"+1.2.3.4.in-addr.arpa":  "",
		"in-addr.arpa":           "",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.02.ip6.arpa":  "",
		"10.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa":  "",
		"g.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa": "",
		"example.com": "",
	} {
		a, ok := reverseAddr(name)
		got := ""
		if ok {
			got = a.String()
		}
		if got != want {
			t.Errorf("reverseAddr(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	p := policy(t, conf.ModeAllowlist, "api.example.com:443", "*.github.test:8000-8999", "203.0.113.7", "_dmarc.example.org", "xn--bcher-kva.example")
	for _, tc := range []struct {
		name  string
		class uint16
		allow bool
		rule  string
	}{
		{"api.example.com.", dns.ClassINET, true, "api.example.com:443"},
		{"API.EXAMPLE.COM", dns.ClassINET, true, "api.example.com:443"},
		{"a.b.github.test.", dns.ClassINET, true, "*.github.test:8000-8999"},
		{"_dmarc.example.org.", dns.ClassINET, true, "_dmarc.example.org"},
		{"XN--BCHER-KVA.example.", dns.ClassINET, true, "xn--bcher-kva.example"},
		{"github.test.", dns.ClassINET, false, ""},
		{"api.example.com.", dns.ClassCHAOS, false, ""},
		{"api.example.com..", dns.ClassINET, false, ""},
		{"api\\.example.com.", dns.ClassINET, false, ""},
		{"api.example.com\\000.", dns.ClassINET, false, ""},
		{"7.0.113.203.in-addr.arpa.", dns.ClassINET, false, ""},
		{"7.113.0.203.in-addr.arpa.", dns.ClassINET, true, "203.0.113.7"},
	} {
		d := decide(p, dns.Question{Name: tc.name, Qtype: dns.TypeA, Qclass: tc.class})
		if d.allow != tc.allow || d.rule != tc.rule || d.reason == "" {
			t.Errorf("decide(%q, %s) = %+v, want allow %v rule %q", tc.name, dns.Class(tc.class), d, tc.allow, tc.rule)
		}
	}
	open := policy(t, conf.ModeOpen)
	if d := decide(open, dns.Question{Name: "anything\\000.", Qtype: dns.TypeTXT, Qclass: dns.ClassCHAOS}); !d.allow {
		t.Errorf("mode open: %+v", d)
	}
}

func TestConcurrencyBounded(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	up.delay.Store(int64(50 * time.Millisecond))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}, MaxInFlight: 3},
		policy(t, conf.ModeAllowlist, "api.example.com"))

	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			c := dns.Client{Net: "udp", Timeout: 5 * time.Second}
			addr := tf.udp
			if i%3 == 0 {
				c.Net, addr = "tcp", tf.tcp
			}
			m := new(dns.Msg)
			m.SetQuestion("api.example.com.", dns.TypeA)
			if r, _, err := c.Exchange(m, addr); err != nil || r.Rcode != dns.RcodeSuccess {
				t.Errorf("query %d over %s: %v %v", i, c.Net, r, err)
			}
		})
	}
	wg.Wait()
	if n := up.queries.Load(); n != 12 {
		t.Errorf("upstream saw %d queries, want 12", n)
	}
	if m := up.maxInFlight.Load(); m > 3 || m < 2 {
		t.Errorf("upstream saw %d queries at once, want at most 3 (and some overlap)", m)
	}
}

func TestTCPPipelinedQueries(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}},
		policy(t, conf.ModeAllowlist, "api.example.com"))

	c, err := dns.Dial("tcp", tf.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names := []string{"api.example.com.", "evil.test.", "api.example.com."}
	for i, name := range names {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Id = uint16(100 + i)
		if err := c.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := range names {
		r, err := c.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		want := dns.RcodeSuccess
		if i == 1 {
			want = dns.RcodeRefused
		}
		if r.Id != uint16(100+i) || r.Rcode != want {
			t.Errorf("answer %d: ID %d %s", i, r.Id, dns.RcodeToString[r.Rcode])
		}
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	up.delay.Store(int64(1500 * time.Millisecond))
	f := New(Config{Upstreams: []netip.AddrPort{up.addr}, Timeout: 5 * time.Second}, policy(t, conf.ModeOpen))
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 2)
	go func() { served <- f.ServeUDP(pc) }()
	go func() { served <- f.ServeTCP(ln) }()

	// An idle TCP connection and a query waiting on a slow upstream.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	go func() {
		c := dns.Client{Net: "udp", Timeout: 3 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion("api.example.com.", dns.TypeA)
		c.Exchange(m, pc.LocalAddr().String())
	}()
	for up.queries.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := f.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Errorf("Shutdown with a query in flight: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Shutdown took %v: the upstream exchange was not aborted", d)
	}
	for range 2 {
		if err := <-served; err != ErrClosed {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	}
	idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Error("idle TCP connection still open")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("idle TCP connection not closed by Shutdown")
	}

	// Serving after Shutdown fails at once and closes the listener.
	pc2, _ := net.ListenPacket("udp", "127.0.0.1:0")
	if err := f.ServeUDP(pc2); err != ErrClosed {
		t.Errorf("ServeUDP after Shutdown: %v", err)
	}
	if _, err := pc2.WriteTo([]byte("x"), pc2.LocalAddr()); err == nil {
		t.Error("ServeUDP after Shutdown left its PacketConn open")
	}
	if err := f.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

func TestRelayEDNS(t *testing.T) {
	t.Parallel()
	f := New(Config{}, nil)
	withOPT := func(m *dns.Msg) *dns.Msg {
		m.SetEdns0(4096, true)
		return m
	}
	req := new(dns.Msg)
	req.SetQuestion("API.example.com.", dns.TypeA)
	req.Id = 99
	upReply := func() *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion("API.example.com.", dns.TypeA)
		m.Response, m.Id, m.AuthenticatedData = true, 1, true
		return m
	}

	// The client sent no OPT: none goes back, even if upstream sent one.
	var r record
	got := f.relay(withOPT(upReply()), req, &r, nil)
	if got.IsEdns0() != nil || got.Id != 99 || !got.AuthenticatedData || r.echRemoved {
		t.Errorf("relay without EDNS: %v", got)
	}

	// The client sent OPT: one goes back, with the filter's size.
	ednsReq := withOPT(req.Copy())
	for _, up := range []*dns.Msg{upReply(), withOPT(upReply())} {
		got = f.relay(up, ednsReq, &r, nil)
		if opt := got.IsEdns0(); opt == nil || opt.UDPSize() != advertisedUDPSize || countOPT(got) != 1 {
			t.Errorf("relay with EDNS: %v", got)
		}
	}
}

// A UDP answer leaves from the address the query was sent to, even when the
// socket is bound to the wildcard address: a client's connected socket (and
// conntrack undoing a redirect) accepts nothing else. 127.0.0.2 is local
// but is not the source address the kernel would pick to reach 127.0.0.1.
func TestUDPAnswersFromQueriedAddress(t *testing.T) {
	t.Parallel()
	f := New(Config{}, policy(t, conf.ModeNone))
	pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.ServeUDP(pc)
	t.Cleanup(func() { f.Shutdown(context.Background()) })
	port := pc.LocalAddr().(*net.UDPAddr).Port

	c := dns.Client{Net: "udp", Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion("api.example.com.", dns.TypeA)
	r, _, err := c.Exchange(m, net.JoinHostPort("127.0.0.2", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("query to 127.0.0.2: %v", err)
	}
	wantRcode(t, r, dns.RcodeRefused)
}
