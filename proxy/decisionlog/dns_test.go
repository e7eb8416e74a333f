package decisionlog_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
	. "github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/decisionlog/learn"
	"github.com/doorman-net/doorman/proxy/dnsfilter"
	"github.com/doorman-net/doorman/proxy/guard"
)

// lockedBuffer is a log the filter's goroutines write to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startResolver serves UDP DNS on 127.0.0.1, answering every A question
// with 203.0.113.10, and those for names below lan.example.test with
// 10.0.0.5 (rebind) or both (mixed).
func startResolver(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			addrs := []string{"203.0.113.10"}
			switch strings.ToLower(q.Name) {
			case "rebind.lan.example.test.":
				addrs = []string{"10.0.0.5"}
			case "mixed.lan.example.test.":
				addrs = []string{"10.0.0.5", "203.0.113.10"}
			}
			for _, a := range addrs {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A:   net.ParseIP(a).To4(),
				})
			}
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// dnsFilterLog runs a real DNS filter in mode allowlist admitting
// api.example.test, asks it the questions, and returns what it logged.
func dnsFilterLog(t *testing.T, questions []dnsQuestion) string {
	t.Helper()
	var logs lockedBuffer
	p, err := conf.NewPolicy(conf.ModeAllowlist, []string{"api.example.test:443", "*.lan.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	f := dnsfilter.New(dnsfilter.Config{
		Sandbox:   "sb-dl",
		Upstreams: []netip.AddrPort{startResolver(t)},
		Logger:    slog.New(slog.NewJSONHandler(&logs, nil)),
		// A host with no address and no connected subnet of its own.
		Guard: guard.New(guard.Config{
			OwnAddrs:         func() ([]netip.Addr, error) { return nil, nil },
			ConnectedSubnets: func() ([]netip.Prefix, error) { return nil, nil },
		}),
	}, p)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.ServeUDP(pc)
	go f.ServeTCP(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.Shutdown(ctx)
	})
	for _, q := range questions {
		addr := pc.LocalAddr().String()
		if q.net == "tcp" {
			addr = ln.Addr().String()
		}
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		c := &dns.Client{Net: q.net, Timeout: 5 * time.Second}
		if _, _, err := c.Exchange(m, addr); err != nil {
			t.Fatalf("query %s: %v", q.name, err)
		}
	}
	// The filter logs a query before it sends the answer.
	return logs.String()
}

type dnsQuestion struct {
	net, name string
	qtype     uint16
}

// The reader reads what the DNS filter writes, field for field, and the
// CLI's uses of it (format, filter, count, learn) treat it as a query.
func TestParseDNSFilterRecords(t *testing.T) {
	log := dnsFilterLog(t, []dnsQuestion{
		{"udp", "API.Example.Test.", dns.TypeA},                      // allowed, forwarded
		{"tcp", "evil.example.test.", dns.TypeTXT},                   // refused
		{"udp", "api.example.test.svc.cluster.local.", dns.TypeA},    // search-list expansion: NXDOMAIN
		{"udp", "9.113.0.203.in-addr.arpa.", dns.TypePTR},            // reverse name
		{"udp", "blocked.example.test.", dns.TypeAAAA},               // refused: learned
		{"udp", "10.113.0.203.in-addr.arpa.", dns.TypeA},             // under in-addr.arpa, not a PTR
		{"udp", "evil.example.test.api.example.test.", dns.TypeAAAA}, // below an exact entry: refused
		{"udp", "rebind.lan.example.test.", dns.TypeA},               // a private answer: refused
		{"udp", "mixed.lan.example.test.", dns.TypeA},                // the private address removed
	})
	// A policy event between the queries' lines is not a decision.
	log += `{"time":"2025-06-01T12:00:00Z","level":"INFO","msg":"policy loaded","sandbox":"sb-dl","mode":"allowlist","entries":1}` + "\n"

	var got []Decision
	if _, err := Scan(strings.NewReader(log), func(d Decision) error { got = append(got, d); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 9 {
		t.Fatalf("got %d decisions, want 9, from\n%s", len(got), log)
	}
	type fields struct{ level, proto, name, qtype, verdict, rule, rcode, reason string }
	want := []fields{
		{"INFO", "udp", "api.example.test", "A", Allow, "api.example.test:443", "NOERROR", "name allowed"},
		{"WARN", "tcp", "evil.example.test", "TXT", Deny, "", "REFUSED", "name not allowed"},
		{"WARN", "udp", "api.example.test.svc.cluster.local", "A", Deny, "", "NXDOMAIN",
			"name not allowed: api.example.test:443 with a search-list suffix (answered NXDOMAIN)"},
		{"WARN", "udp", "9.113.0.203.in-addr.arpa", "PTR", Deny, "", "REFUSED", "reverse name of an address not allowed"},
		{"WARN", "udp", "blocked.example.test", "AAAA", Deny, "", "REFUSED", "name not allowed"},
		{"WARN", "udp", "10.113.0.203.in-addr.arpa", "A", Deny, "", "REFUSED", "reverse name of an address not allowed"},
		{"WARN", "udp", "evil.example.test.api.example.test", "AAAA", Deny, "", "REFUSED", "name not allowed"},
		{"WARN", "udp", "rebind.lan.example.test", "A", Deny, "*.lan.example.test", "REFUSED", "private answer 10.0.0.5: RFC 1918 (10.0.0.0/8)"},
		{"INFO", "udp", "mixed.lan.example.test", "A", Allow, "*.lan.example.test", "NOERROR", "name allowed"},
	}
	for i, d := range got {
		g := fields{d.Level, d.Proto, d.Name, d.QType, d.Verdict, d.Rule, d.Rcode, d.Reason}
		if g != want[i] {
			t.Errorf("decision %d\n got %+v\nwant %+v", i, g, want[i])
		}
		if !d.IsDNS() || d.Kind != KindDNS || d.Sandbox != "sb-dl" || d.Time.IsZero() || d.Dst != "" || len(d.Raw) == 0 {
			t.Errorf("decision %d: %+v", i, d)
		}
		if _, err := netip.ParseAddrPort(d.Client); err != nil {
			t.Errorf("decision %d: client %q: %v", i, d.Client, err)
		}
		if _, ok := d.DstAddrPort(); ok {
			t.Errorf("decision %d: a query has a destination: %q", i, d.Dst)
		}
	}
	allowed := got[0]
	if up, err := netip.ParseAddrPort(allowed.Upstream); err != nil || !up.Addr().IsLoopback() || allowed.DurationMS <= 0 {
		t.Errorf("allowed query: upstream %q, duration %v", allowed.Upstream, allowed.DurationMS)
	}
	if got[1].Upstream != "" {
		t.Errorf("refused query: upstream %q", got[1].Upstream)
	}
	if got[7].PrivateRemoved != 1 || got[8].PrivateRemoved != 1 || got[0].PrivateRemoved != 0 {
		t.Errorf("private_removed: %d, %d, %d; want 1, 1, 0", got[7].PrivateRemoved, got[8].PrivateRemoved, got[0].PrivateRemoved)
	}
	if w := "allow dns/udp mixed.lan.example.test A answered NOERROR, rule *.lan.example.test (resolver " + got[8].Upstream + ", "; !strings.HasPrefix(Format(got[8]), got[8].Time.Format(TimeLayout)+" "+w) ||
		!strings.HasSuffix(Format(got[8]), ", 1 private address removed)") {
		t.Errorf("Format of an answer that lost a private address: %q", Format(got[8]))
	}

	// Format: said to be DNS, with the rcode; the time and the duration
	// vary.
	formats := []string{
		"allow dns/udp api.example.test A answered NOERROR, rule api.example.test:443 (resolver " + allowed.Upstream + ", ",
		"deny  dns/tcp evil.example.test TXT answered REFUSED, name not allowed",
		"deny  dns/udp api.example.test.svc.cluster.local A answered NXDOMAIN, name not allowed: api.example.test:443 with a search-list suffix",
		"deny  dns/udp 9.113.0.203.in-addr.arpa PTR answered REFUSED, reverse name of an address not allowed",
		"deny  dns/udp blocked.example.test AAAA answered REFUSED, name not allowed",
	}
	for i, w := range formats {
		s := Format(got[i])
		at := got[i].Time.Format(TimeLayout) + " "
		if !strings.HasPrefix(s, at+w) {
			t.Errorf("Format\n got %q\nwant %q...", s, at+w)
		}
		if i > 0 && s != at+w {
			t.Errorf("Format of a denial\n got %q\nwant %q", s, at+w)
		}
	}

	// Filter and Counts: denials are denials, counted apart from
	// connections.
	var denied int
	var c Counts
	for _, d := range got {
		if (Filter{Denied: true}).Match(d) {
			denied++
		}
		c.Add(d)
	}
	if denied != 7 {
		t.Errorf("Filter denied: %d, want 7", denied)
	}
	if c != (Counts{DNS: DNSCounts{Allowed: 2, Denied: 7}}) {
		t.Errorf("Counts: %+v", c)
	}

	// Learn: only the lookup refused for want of an entry, of a type a
	// client asks before it connects; not the TXT, the expansion, the
	// reverse names, the private answer (counted apart); no port.
	l := learn.From(got, learn.Options{})
	if h := strings.Join(l.Policy().Hosts(), " "); h != "evil.example.test.api.example.test blocked.example.test" {
		t.Errorf("learned %q", h)
	}
	if l.Used != 0 || l.UsedDNS != 2 || l.QueriedOnly != 2 || l.Skipped != 0 || l.Private != 1 {
		t.Errorf("learned from %+v", l)
	}
}

func TestFormatDNS(t *testing.T) {
	line := func(level, verdict, name, qtype, rule, reason, rcode, upstream string, ech bool) string {
		e := "false"
		if ech {
			e = "true"
		}
		return `{"time":"2025-06-01T12:00:00.5+02:00","level":"` + level + `","msg":"dns","sandbox":"ctr1","proto":"udp","client":"10.0.0.2:40000","name":"` + name +
			`","qtype":"` + qtype + `","verdict":"` + verdict + `","rule":"` + rule + `","reason":"` + reason + `","rcode":"` + rcode +
			`","upstream":"` + upstream + `","ech_removed":` + e + `,"duration_ms":1.25}`
	}
	const at = "2025-06-01 12:00:00.500 "
	tests := []struct{ line, want string }{
		{line("INFO", "allow", "www.example.org", "HTTPS", "*.example.org", "name allowed", "NOERROR", "192.0.2.53:53", true),
			"allow dns/udp www.example.org HTTPS answered NOERROR, rule *.example.org (resolver 192.0.2.53:53, 1ms, ECH removed)"},
		// The last answer passed on when every resolver failed so.
		{line("INFO", "allow", "api.example.com", "A", "api.example.com", "name allowed; 192.0.2.53:53: answered SERVFAIL", "SERVFAIL", "192.0.2.53:53", false),
			"allow dns/udp api.example.com A answered SERVFAIL, rule api.example.com; 192.0.2.53:53: answered SERVFAIL (resolver 192.0.2.53:53, 1ms)"},
		{line("INFO", "allow", "anything.example", "TXT", "", "mode open", "NOERROR", "192.0.2.53:53", false),
			"allow dns/udp anything.example TXT answered NOERROR, mode open (resolver 192.0.2.53:53, 1ms)"},
		{line("ERROR", "error", "api.example.com", "AAAA", "api.example.com", "no upstream answered: 192.0.2.53:53: i/o timeout", "SERVFAIL", "192.0.2.53:53", false),
			"error dns/udp api.example.com AAAA answered SERVFAIL, no upstream answered: 192.0.2.53:53: i/o timeout"},
		{line("WARN", "deny", "x.example", "A", "", "mode none", "REFUSED", "", false),
			"deny  dns/udp x.example A answered REFUSED, mode none"},
		// No name, no type, no answer.
		{line("WARN", "deny", "", "", "", "not a query: the QR bit is set", "none", "", false),
			"deny  dns/udp (no name) not answered, not a query: the QR bit is set"},
	}
	for _, tt := range tests {
		d, ok := Parse([]byte(tt.line))
		if !ok {
			t.Fatalf("parse %s", tt.line)
		}
		if got := Format(d); got != at+tt.want {
			t.Errorf("Format\n got %q\nwant %q", got, at+tt.want)
		}
	}
	// A connection line is not read as a query, nor a query with another
	// msg as anything.
	if d, ok := Parse([]byte(LineAllow)); !ok || d.IsDNS() || d.Kind != KindConnection {
		t.Errorf("connection line: %+v, %v", d, ok)
	}
	bad := strings.Replace(line("WARN", "deny", "x.example", "A", "", "mode none", "REFUSED", "", false), `"msg":"dns"`, `"msg":"dnsx","m":"\"msg\":\"dns\""`, 1)
	if d, ok := Parse([]byte(bad)); ok {
		t.Errorf("line with msg dnsx read as %+v", d)
	}
}
