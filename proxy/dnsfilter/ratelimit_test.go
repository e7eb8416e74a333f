package dnsfilter

import (
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// The bucket lets a second's worth through at once, then the rate.
func TestRateLimitBucket(t *testing.T) {
	r := newRateLimit(10)
	t0 := time.Unix(1_000_000, 0)
	for i := range 10 {
		if !r.allow(t0) {
			t.Fatalf("query %d of the first second's burst refused", i)
		}
	}
	if r.allow(t0) {
		t.Fatal("an 11th query in the same instant allowed")
	}
	if !r.allow(t0.Add(100*time.Millisecond)) || r.allow(t0.Add(100*time.Millisecond)) {
		t.Fatal("a tenth of a second later, want exactly one more")
	}
	if !r.allow(t0.Add(time.Hour)) {
		t.Fatal("an hour later, refused")
	}
	if newRateLimit(0) != nil || !newRateLimit(0).allow(t0) {
		t.Fatal("a zero rate caps")
	}
}

// Past the rate, queries are answered REFUSED with an Extended DNS Error,
// not forwarded, counted, and logged as a limit line rather than one
// line a query.
func TestQueriesPastTheRateRefused(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, testZone(t))
	// A rate of 1: the burst is one query, and the next token comes a
	// second later, so of queries sent back to back a few at most pass.
	tf := startFilter(t, Config{Upstreams: []netip.AddrPort{up.addr}, QueriesPerSecond: 1},
		policy(t, conf.ModeAllowlist, "api.example.com"))
	refused := 0
	for i := range 20 {
		proto := "udp"
		if i%2 == 1 {
			proto = "tcp"
		}
		m := new(dns.Msg)
		m.SetQuestion("api.example.com.", dns.TypeA)
		m.SetEdns0(1232, false)
		r := tf.ask(t, proto, m)
		if r.Rcode == dns.RcodeRefused {
			refused++
			opt := r.IsEdns0()
			if opt == nil || len(opt.Option) == 0 {
				t.Fatalf("REFUSED over the rate without an Extended DNS Error: %v", r)
			}
		} else if r.Rcode != dns.RcodeSuccess {
			t.Fatalf("query %d: %v", i, r)
		}
	}
	st := tf.Stats()
	if refused < 10 || int64(refused) != st.Limited {
		t.Fatalf("%d refused, stats %+v; want most of 20 refused and counted", refused, st)
	}
	if n := up.queries.Load(); n != 20-int64(refused) {
		t.Errorf("upstream saw %d queries, want the %d allowed", n, 20-refused)
	}
	limits, dnsLines := 0, 0
	for _, rec := range tf.logs.records(t) {
		switch rec["msg"] {
		case decisionlog.KindLimit:
			limits++
			if rec["limit"] != decisionlog.LimitDNSRate || rec["max"] != 1.0 {
				t.Errorf("limit line %v", rec)
			}
		case decisionlog.KindDNS:
			dnsLines++
		}
	}
	if limits != refused || dnsLines != 20-refused {
		t.Errorf("%d limit lines and %d dns lines for %d refused", limits, dnsLines, refused)
	}
}
