package dnsfilter

import (
	"context"
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
)

// seedQueries are the fuzz seeds: ordinary, denied, odd and broken queries.
// testdata/fuzz/FuzzFilterQuery holds them packed, with a few hand-made
// byte strings.
func seedQueries() [][]byte {
	var seeds [][]byte
	add := func(m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			panic(err)
		}
		seeds = append(seeds, b)
	}
	q := func(name string, qtype uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.Id = 0x1234
		return m
	}
	add(q("api.example.com.", dns.TypeA))
	add(q("aGVsbG8.0001.t.tunnel.test.", dns.TypeTXT))
	m := q("svc.example.com.", dns.TypeHTTPS)
	m.SetEdns0(1232, true)
	add(m)
	m = q("big.example.com.", dns.TypeA)
	m.SetEdns0(512, false)
	add(m)
	add(q("7.113.0.203.in-addr.arpa.", dns.TypePTR))
	add(q("mixed.example.com.", dns.TypeA))
	add(q("hints.example.com.", dns.TypeHTTPS))
	m = q("api.example.com.", dns.TypeA)
	m.Question = append(m.Question, dns.Question{Name: "evil.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	add(m)
	m = q("api.example.com.", dns.TypeAXFR)
	add(m)
	m = q("api.example.com.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(1)
	add(m)
	m = q("api.example.com.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.SetEdns0(4096, true) // a second OPT record
	add(m)
	m = q("api.example.com.", dns.TypeA)
	m.Response = true
	add(m)
	m = new(dns.Msg)
	m.SetNotify("example.com.")
	add(m)
	seeds = append(seeds,
		[]byte{0x12, 0x34, 0x01},                                                    // shorter than a header
		[]byte{0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0},                         // a question promised, none there
		[]byte{0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c, 0, 1, 0, 1}, // a name pointing at itself
	)
	return seeds
}

// FuzzFilterQuery feeds arbitrary bytes to the filter as UDP queries. The
// filter must not panic; every reply must be a well-formed response with the
// query's ID that fits the client's UDP size and carries neither ECH nor an
// address the guard refuses; and the upstream must never see a question
// the policy does not admit.
func FuzzFilterQuery(f *testing.F) {
	for _, s := range seedQueries() {
		f.Add(s)
	}
	p, err := conf.NewPolicy(conf.ModeAllowlist, []string{"*.example.com", "api.example.com", "203.0.113.0/24"})
	if err != nil {
		f.Fatal(err)
	}
	up := startUpstream(f, testZone(f))
	var leaks atomic.Int64
	up.setHandler(func(w dns.ResponseWriter, r *dns.Msg) {
		for _, q := range r.Question {
			if !decide(p, q).allow {
				leaks.Add(1)
			}
		}
		up.answerFromZone(w, r)
	})
	flt := New(Config{Upstreams: []netip.AddrPort{up.addr}, Timeout: time.Second, Guard: testGuard()}, p)
	client := netip.MustParseAddrPort("127.0.0.1:5353")

	f.Fuzz(func(t *testing.T, query []byte) {
		out := flt.answer(context.Background(), query, client, "udp")
		if n := leaks.Load(); n != 0 {
			t.Fatalf("the upstream saw %d questions the policy does not admit", n)
		}
		if out == nil {
			return
		}
		var r dns.Msg
		if err := r.Unpack(out); err != nil {
			t.Fatalf("reply %x does not unpack: %v", out, err)
		}
		if !r.Response || len(query) < 2 || r.Id != binary.BigEndian.Uint16(query) {
			t.Fatalf("reply is not a response to the query: %v", &r)
		}
		size := dns.MinMsgSize
		var req dns.Msg
		if req.Unpack(query) == nil {
			if opt := req.IsEdns0(); opt != nil {
				size = max(size, int(opt.UDPSize()))
			}
		}
		if len(out) > size {
			t.Fatalf("reply of %d bytes exceeds the client's UDP size %d", len(out), size)
		}
		if stripECH(&r) {
			t.Fatalf("reply carries ECH: %v", &r)
		}
		if pa := flt.stripPrivate(&r, p, ""); pa.removed != 0 {
			t.Fatalf("reply carries private addresses (%s): %v", pa.reason(), &r)
		}
		if r.Rcode == dns.RcodeRefused && len(r.Answer) != 0 {
			t.Fatalf("refusal carries answers: %v", &r)
		}
	})
}
