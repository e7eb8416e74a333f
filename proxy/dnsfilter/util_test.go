package dnsfilter

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
)

// zone is what a test upstream knows: records by name (lower case, with the
// trailing dot).
type zone map[string][]dns.RR

// testZone holds the records most tests ask for.
func testZone(t testing.TB) zone {
	z := zone{}
	for _, s := range []string{
		"api.example.com. 300 IN CNAME edge.cdn.example.net.",
		"edge.cdn.example.net. 300 IN CNAME edge2.cdn.example.net.",
		"edge2.cdn.example.net. 60 IN A 198.51.100.7",
		"edge2.cdn.example.net. 60 IN AAAA 2001:db8::7",
		"raw.deep.github.test. 300 IN A 198.51.100.8",
		"github.test. 300 IN A 198.51.100.9",
		"evil.test. 300 IN A 203.0.113.66",
		"x1.tunnel.test. 300 IN TXT \"secret data\"",
		"svc.example.com. 300 IN HTTPS 1 . alpn=h2,h3 ech=AEj+DQBEAQAgACBNPm8ILXGhjzeFZrT6IEXnRnAAvp2Q5L4uj/hBg6XcTAAEAAEAAQAVY2xvdWRmbGFyZS1lY2guY29tAAA=",
		"svc.example.com. 300 IN HTTPS 2 svc2.example.com. mandatory=alpn,ech alpn=h2 port=8443 ech=AEj+DQBEAQAgACBNPm8ILXGhjzeFZrT6IEXnRnAAvp2Q5L4uj/hBg6XcTAAEAAEAAQAVY2xvdWRmbGFyZS1lY2guY29tAAA=",
		"_8443._https.svc.example.com. 300 IN SVCB 1 svc.example.com. ech=AEj+DQBEAQAgACBNPm8ILXGhjzeFZrT6IEXnRnAAvp2Q5L4uj/hBg6XcTAAEAAEAAQAVY2xvdWRmbGFyZS1lY2guY29tAAA= port=8443",
		"plain.example.com. 300 IN HTTPS 1 . alpn=h2",
		// Allowed names whose owners point them at private addresses.
		"rebind.example.com. 300 IN A 10.0.0.5",
		"rebind.example.com. 300 IN AAAA fd00::5",
		"mixed.example.com. 300 IN A 10.0.0.5",
		"mixed.example.com. 300 IN A 203.0.113.77",
		"mixed.example.com. 300 IN AAAA fd00::5",
		"mixed.example.com. 300 IN AAAA 2001:db8::77",
		"alias.example.com. 300 IN CNAME rebind.example.net.",
		"rebind.example.net. 300 IN A 10.0.0.5",
		"neighbour.example.com. 300 IN A 198.51.100.130",
		"nat64.example.com. 300 IN AAAA 64:ff9b::10.0.0.5",
		// 10.66.77.203 in the local-use NAT64 prefix's /56 layout, the
		// suffix spelling 203.0.113.7; and Teredo naming 10.0.0.5 as
		// its client.
		"nat64-56.example.com. 300 IN AAAA 64:ff9b:1:a:42:4dcb:cb00:7107",
		"teredo.example.com. 300 IN AAAA 2001:0:4136:e378:8000:63bf:f5ff:fffa",
		"hints.example.com. 300 IN HTTPS 1 . alpn=h2 ipv4hint=10.0.0.5,203.0.113.77 ipv6hint=fd00::5",
		"hintsonly.example.com. 300 IN HTTPS 1 . mandatory=ipv4hint ipv4hint=169.254.169.254 ipv6hint=2001:db8::77",
		"7.113.0.203.in-addr.arpa. 300 IN PTR host.example.com.",
		"8.8.8.8.in-addr.arpa. 300 IN PTR dns.google.",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa. 300 IN PTR v6host.example.com.",
	} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("bad test record %q: %v", s, err)
		}
		z.add(rr)
	}
	for i := range 40 {
		rr, _ := dns.NewRR("big.example.com. 300 IN A 198.51.100." + strconv.Itoa(i+10))
		z.add(rr)
	}
	return z
}

func (z zone) add(rr dns.RR) {
	name := strings.ToLower(rr.Header().Name)
	z[name] = append(z[name], rr)
}

// resolve answers q from z, following CNAMEs within z, like a recursive
// resolver would.
func (z zone) resolve(q dns.Question) (answer []dns.RR, rcode int) {
	name := strings.ToLower(q.Name)
	for range 8 {
		rrs, ok := z[name]
		if !ok {
			if len(answer) == 0 {
				return nil, dns.RcodeNameError
			}
			return answer, dns.RcodeSuccess
		}
		var cname string
		for _, rr := range rrs {
			switch {
			case rr.Header().Rrtype == q.Qtype:
				answer = append(answer, dns.Copy(rr))
			case rr.Header().Rrtype == dns.TypeCNAME:
				answer = append(answer, dns.Copy(rr))
				cname = strings.ToLower(rr.(*dns.CNAME).Target)
			}
		}
		if cname == "" || q.Qtype == dns.TypeCNAME {
			return answer, dns.RcodeSuccess
		}
		name = cname
	}
	return answer, dns.RcodeSuccess
}

// upstream is a test resolver on 127.0.0.1, UDP and TCP on one port.
type upstream struct {
	addr    netip.AddrPort
	zone    zone
	queries atomic.Int64

	mu      sync.Mutex
	seen    []*dns.Msg
	handler func(w dns.ResponseWriter, r *dns.Msg) // nil: answer from zone

	inFlight, maxInFlight atomic.Int64
	delay                 atomic.Int64 // nanoseconds to wait before answering
}

// startUpstream starts a test resolver answering from z; it stops when the
// test ends.
func startUpstream(t testing.TB, z zone) *upstream {
	t.Helper()
	u := &upstream{zone: z}
	var pc net.PacketConn
	var ln net.Listener
	for attempt := 0; ; attempt++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		if attempt == 20 {
			t.Fatalf("no port free for UDP and TCP: %v", err)
		}
	}
	u.addr = pc.LocalAddr().(*net.UDPAddr).AddrPort()
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: ln, Handler: u}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return u
}

// ServeDNS implements dns.Handler.
func (u *upstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	u.queries.Add(1)
	n := u.inFlight.Add(1)
	// The query is no longer in flight once the answer is on its way.
	done := sync.OnceFunc(func() { u.inFlight.Add(-1) })
	defer done()
	w = &answeringWriter{w, done}
	for {
		m := u.maxInFlight.Load()
		if n <= m || u.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	u.mu.Lock()
	u.seen = append(u.seen, r.Copy())
	h := u.handler
	u.mu.Unlock()
	time.Sleep(time.Duration(u.delay.Load()))
	if h != nil {
		h(w, r)
		return
	}
	u.answerFromZone(w, r)
}

// answerFromZone answers r from the upstream's zone, truncating over UDP
// as a real server does.
func (u *upstream) answerFromZone(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if len(r.Question) == 1 {
		m.Answer, m.Rcode = u.zone.resolve(r.Question[0])
	}
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(opt.UDPSize(), opt.Do())
	}
	if _, udp := w.LocalAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			size = max(size, int(opt.UDPSize()))
		}
		m.Truncate(size)
	}
	w.WriteMsg(m)
}

// answeringWriter calls done before the first answer is written.
type answeringWriter struct {
	dns.ResponseWriter
	done func()
}

func (w *answeringWriter) WriteMsg(m *dns.Msg) error {
	w.done()
	return w.ResponseWriter.WriteMsg(m)
}

func (u *upstream) setHandler(h func(w dns.ResponseWriter, r *dns.Msg)) {
	u.mu.Lock()
	u.handler = h
	u.mu.Unlock()
}

// seenNames returns the question names the upstream was asked, in order.
func (u *upstream) seenNames() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var names []string
	for _, m := range u.seen {
		for _, q := range m.Question {
			names = append(names, q.Name)
		}
	}
	return names
}

// lastSeen returns the last query the upstream received.
func (u *upstream) lastSeen() *dns.Msg {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil
	}
	return u.seen[len(u.seen)-1]
}

// logBuffer collects JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the log records written so far.
func (b *logBuffer) records(t testing.TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var recs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}

// last returns the last log record, waiting a little for it: the filter
// logs after it has sent the answer.
func (b *logBuffer) last(t testing.TB, n int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		recs := b.records(t)
		if len(recs) >= n {
			return recs[len(recs)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d log records, want %d", len(recs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testFilter is a filter serving UDP and TCP on 127.0.0.1.
type testFilter struct {
	*Filter
	udp, tcp string
	logs     *logBuffer
}

// testGuard is the guard of a host with no address of its own and one
// connected subnet, 198.51.100.128/25 (a bridge with other sandboxes on
// it): the root namespace the tests run in must not change what they see.
func testGuard() *guard.Guard {
	return guard.New(guard.Config{
		OwnAddrs: func() ([]netip.Addr, error) { return nil, nil },
		ConnectedSubnets: func() ([]netip.Prefix, error) {
			return []netip.Prefix{netip.MustParsePrefix("198.51.100.128/25")}, nil
		},
	})
}

// startFilter starts a filter with cfg (Logger set to a buffer, Guard to
// testGuard unless set) and policy p on 127.0.0.1; it shuts down when the
// test ends.
func startFilter(t testing.TB, cfg Config, p *conf.Policy) *testFilter {
	t.Helper()
	if cfg.Guard == nil {
		cfg.Guard = testGuard()
	}
	logs := &logBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Sandbox == "" {
		cfg.Sandbox = "sb-test"
	}
	f := New(cfg, p)
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
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		for range 2 {
			if err := <-served; err != ErrClosed {
				t.Errorf("Serve returned %v, want ErrClosed", err)
			}
		}
	})
	return &testFilter{Filter: f, udp: pc.LocalAddr().String(), tcp: ln.Addr().String(), logs: logs}
}

// policy builds a policy or fails the test.
func policy(t testing.TB, mode conf.Mode, entries ...string) *conf.Policy {
	t.Helper()
	p, err := conf.NewPolicy(mode, entries)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ask sends m to the filter over proto and returns the answer.
func (tf *testFilter) ask(t testing.TB, proto string, m *dns.Msg) *dns.Msg {
	t.Helper()
	addr := tf.udp
	if proto == "tcp" {
		addr = tf.tcp
	}
	c := dns.Client{Net: proto, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %v: %v", proto, m.Question, err)
	}
	return r
}

// query asks the filter for name and qtype over proto.
func (tf *testFilter) query(t testing.TB, proto, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return tf.ask(t, proto, m)
}

// rrStrings renders records for comparison.
func rrStrings(rrs []dns.RR) []string {
	var s []string
	for _, rr := range rrs {
		s = append(s, rr.String())
	}
	return s
}

// wantRcode fails the test if r does not have rcode.
func wantRcode(t testing.TB, r *dns.Msg, rcode int) {
	t.Helper()
	if r.Rcode != rcode {
		t.Fatalf("rcode %s, want %s\n%v", dns.RcodeToString[r.Rcode], dns.RcodeToString[rcode], r)
	}
}
