package resolver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// testServer is a DNS server on loopback (UDP and TCP on one port) whose
// answers its handler makes; it counts the queries it got.
type testServer struct {
	addr    netip.AddrPort
	queries atomic.Int64
	tcp     atomic.Int64
}

// serve starts a server answering with h until the test ends.
func serve(t *testing.T, h func(w dns.ResponseWriter, req *dns.Msg)) *testServer {
	t.Helper()
	s := &testServer{}
	var pc net.PacketConn
	var ln net.Listener
	// A free UDP port may be taken for TCP: try another.
	for range 16 {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no loopback port free for both UDP and TCP")
	}
	s.addr = netip.MustParseAddrPort(pc.LocalAddr().String())
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		s.queries.Add(1)
		if w.RemoteAddr().Network() == "tcp" {
			s.tcp.Add(1)
		}
		h(w, req)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan error, 1)
		go func() { done <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-done:
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Shutdown(); <-done })
	}
	return s
}

// zone answers A and AAAA for the names in records, NXDOMAIN otherwise.
func zone(records map[string][]string) func(dns.ResponseWriter, *dns.Msg) {
	return func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		addrs, ok := records[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		for _, s := range addrs {
			rr, err := dns.NewRR(q.Name + " 5 IN " + s)
			if err != nil {
				panic(err)
			}
			if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME {
				m.Answer = append(m.Answer, rr)
			}
		}
		w.WriteMsg(m)
	}
}

// rcode answers every query with rc.
func rcode(rc int) func(dns.ResponseWriter, *dns.Msg) {
	return func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(req, rc)
		w.WriteMsg(m)
	}
}

// silent is a UDP socket that reads queries and never answers.
func silent(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

// closedPort is a loopback UDP port nobody listens on: queries to it get
// an ICMP port unreachable.
func closedPort(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(pc.LocalAddr().String())
	pc.Close()
	return ap
}

func newStub(t *testing.T, servers ...netip.AddrPort) *Stub {
	t.Helper()
	// A short attempt timeout keeps the silent server from slowing the
	// test; nothing here measures time.
	r, err := New(Config{Servers: servers, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

var apiZone = map[string][]string{"api.example.test.": {"A 203.0.113.10", "AAAA 2001:db8:100::10"}}

func TestLookupAsksInOrderAndFailsOver(t *testing.T) {
	good := serve(t, zone(apiZone))
	servfail := serve(t, rcode(dns.RcodeServerFailure))
	refused := serve(t, rcode(dns.RcodeRefused))
	dead, unreachable := silent(t), closedPort(t)
	want := addrs("203.0.113.10", "2001:db8:100::10")

	for _, tc := range []struct {
		name    string
		servers []netip.AddrPort
	}{
		{"the only server", []netip.AddrPort{good.addr}},
		{"after SERVFAIL and REFUSED", []netip.AddrPort{servfail.addr, refused.addr, good.addr}},
		{"after a server that never answers", []netip.AddrPort{dead, good.addr}},
		{"after an unreachable one", []netip.AddrPort{unreachable, good.addr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := good.queries.Load()
			got, err := newStub(t, tc.servers...).LookupNetIP(context.Background(), "ip", "API.example.test")
			if err != nil || !sameAddrs(got, want) {
				t.Fatalf("LookupNetIP = %v, %v; want %v", got, err, want)
			}
			if n := good.queries.Load() - before; n != 2 {
				t.Errorf("the answering server got %d queries, want 2 (A and AAAA)", n)
			}
		})
	}

	// One family.
	r := newStub(t, good.addr)
	if got, err := r.LookupNetIP(context.Background(), "ip4", "api.example.test"); err != nil || !slices.Equal(got, want[:1]) {
		t.Errorf("ip4: %v, %v", got, err)
	}
	if got, err := r.LookupNetIP(context.Background(), "ip6", "api.example.test."); err != nil || !slices.Equal(got, want[1:]) {
		t.Errorf("ip6: %v, %v", got, err)
	}
	// An address is its own answer, and asks nobody.
	before := good.queries.Load()
	if got, err := r.LookupNetIP(context.Background(), "ip", "203.0.113.7"); err != nil || !slices.Equal(got, addrs("203.0.113.7")) {
		t.Errorf("an address: %v, %v", got, err)
	}
	if good.queries.Load() != before {
		t.Error("looking up an address sent a query")
	}
}

// NXDOMAIN is an answer: the next server is not asked (a name the first
// server denies must not be found at the second).
func TestLookupNXDOMAINIsFinal(t *testing.T) {
	first := serve(t, zone(nil))
	second := serve(t, zone(apiZone))
	_, err := newStub(t, first.addr, second.addr).LookupNetIP(context.Background(), "ip", "api.example.test")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Fatalf("NXDOMAIN from the first server: %v, want a not-found DNSError", err)
	}
	if n := second.queries.Load(); n != 0 {
		t.Errorf("the second server got %d queries after the first answered NXDOMAIN", n)
	}
	// NOERROR without addresses (NODATA) is an answer too.
	nodata := serve(t, zone(map[string][]string{"api.example.test.": {"TXT hello"}}))
	_, err = newStub(t, nodata.addr, second.addr).LookupNetIP(context.Background(), "ip", "api.example.test")
	if !errors.As(err, &de) || !de.IsNotFound || second.queries.Load() != 0 {
		t.Errorf("NODATA: %v, second server asked %d times", err, second.queries.Load())
	}
}

// When no server answers, the error says what each did.
func TestLookupNoServerAnswers(t *testing.T) {
	servfail := serve(t, rcode(dns.RcodeServerFailure))
	dead := silent(t)
	_, err := newStub(t, servfail.addr, dead).LookupNetIP(context.Background(), "ip4", "api.example.test")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsTemporary || de.IsNotFound {
		t.Fatalf("no answer: %v, want a temporary DNSError", err)
	}
	for _, want := range []string{servfail.addr.String() + ": answered SERVFAIL", dead.String() + ": no answer within 300ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// A cancelled lookup stops at once, whatever is left to try.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newStub(t, dead, dead, dead).LookupNetIP(ctx, "ip", "api.example.test"); err == nil {
		t.Error("cancelled lookup: no error")
	}
}

// A truncated answer is asked again over TCP.
func TestLookupTruncatedRetriesTCP(t *testing.T) {
	full := zone(apiZone)
	var s *testServer
	s = serve(t, func(w dns.ResponseWriter, req *dns.Msg) {
		if w.RemoteAddr().Network() == "udp" {
			m := new(dns.Msg)
			m.SetReply(req)
			m.Truncated = true
			w.WriteMsg(m)
			return
		}
		full(w, req)
	})
	got, err := newStub(t, s.addr).LookupNetIP(context.Background(), "ip", "api.example.test")
	if err != nil || !sameAddrs(got, addrs("203.0.113.10", "2001:db8:100::10")) {
		t.Fatalf("truncated over UDP: %v, %v", got, err)
	}
	if n := s.tcp.Load(); n != 2 {
		t.Errorf("%d queries over TCP, want 2", n)
	}
}

// Only the name asked and its CNAME chain count: other records in the
// answer are not the name's addresses.
func TestLookupFollowsCNAMEOnly(t *testing.T) {
	s := serve(t, func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		for _, rr := range []string{
			"evil.example.test. 5 IN A 203.0.113.20",
			"api.example.test. 5 IN CNAME edge.example.test.",
			"edge.example.test. 5 IN CNAME cdn.example.test.",
			"cdn.example.test. 5 IN A 203.0.113.11",
			"other.example.test. 5 IN A 203.0.113.30",
		} {
			r, _ := dns.NewRR(rr)
			m.Answer = append(m.Answer, r)
		}
		w.WriteMsg(m)
	})
	got, err := newStub(t, s.addr).LookupNetIP(context.Background(), "ip4", "api.example.test")
	if err != nil || !slices.Equal(got, addrs("203.0.113.11")) {
		t.Fatalf("CNAME chain: %v, %v; want only cdn.example.test's 203.0.113.11", got, err)
	}
}

// An answer to another question, or with another ID, is no answer: the
// next server is asked.
func TestLookupRejectsForeignAnswers(t *testing.T) {
	good := serve(t, zone(apiZone))
	for _, tc := range []struct {
		name   string
		mangle func(m *dns.Msg)
		why    string
	}{
		{"another name", func(m *dns.Msg) { m.Question[0].Name = "evil.example.test." }, "not the question asked"},
		{"another type", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeTXT }, "not the question asked"},
		{"no question", func(m *dns.Msg) { m.Question = nil }, "0 questions"},
		{"not a response", func(m *dns.Msg) { m.Response = false }, "QR bit clear"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forged := serve(t, func(w dns.ResponseWriter, req *dns.Msg) {
				m := new(dns.Msg)
				m.SetReply(req)
				rr, _ := dns.NewRR(req.Question[0].Name + " 5 IN A 203.0.113.20")
				m.Answer = []dns.RR{rr}
				tc.mangle(m)
				w.WriteMsg(m)
			})
			got, err := newStub(t, forged.addr, good.addr).LookupNetIP(context.Background(), "ip4", "api.example.test")
			if err != nil || !slices.Equal(got, addrs("203.0.113.10")) {
				t.Fatalf("after a forged answer: %v, %v; want the next server's 203.0.113.10", got, err)
			}
			_, err = newStub(t, forged.addr).LookupNetIP(context.Background(), "ip4", "api.example.test")
			if err == nil || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("forged answer alone: %v, want an error saying %q", err, tc.why)
			}
		})
	}
}

// Concurrent lookups through one Stub each get their own answer.
func TestLookupConcurrent(t *testing.T) {
	records := map[string][]string{}
	for i := range 20 {
		records["h"+strconv.Itoa(i)+".example.test."] = []string{"A 203.0.113." + strconv.Itoa(100+i)}
	}
	s := serve(t, zone(records))
	r := newStub(t, s.addr)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := r.LookupNetIP(context.Background(), "ip4", "h"+strconv.Itoa(i)+".example.test")
			if err != nil || !slices.Equal(got, addrs("203.0.113."+strconv.Itoa(100+i))) {
				t.Errorf("h%d: %v, %v", i, got, err)
			}
		}()
	}
	wg.Wait()
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("no servers: want an error")
	}
	if _, err := New(Config{Servers: []netip.AddrPort{{}}}); err == nil {
		t.Error("a zero server: want an error")
	}
	servers := []netip.AddrPort{netip.MustParseAddrPort("203.0.113.53:53"), netip.MustParseAddrPort("[2001:db8::53]:53")}
	r, err := New(Config{Servers: servers})
	if err != nil || !slices.Equal(r.Servers(), servers) || r.timeout != DefaultTimeout {
		t.Errorf("New: %v, %v", r, err)
	}
}

// sameAddrs reports whether got holds the addresses of want, in any order
// (the order depends on this host's routes: see TestSortForDialing).
func sameAddrs(got, want []netip.Addr) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.SortFunc(g, netip.Addr.Compare)
	slices.SortFunc(w, netip.Addr.Compare)
	return slices.Equal(g, w)
}
