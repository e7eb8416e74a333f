package decisionlog

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy/internal/logtest"
)

// lockedBuffer is a bytes.Buffer safe for the aggregator's flush loop.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newTestAggregator returns a logger through an Aggregator that flushes
// only when told (its interval is an hour), and the buffer it writes to.
func newTestAggregator(t *testing.T, maxDistinct int) (*slog.Logger, *Aggregator, *lockedBuffer) {
	t.Helper()
	buf := &lockedBuffer{}
	a := NewAggregator(slog.NewJSONHandler(buf, nil), AggregatorConfig{Interval: time.Hour, MaxDistinct: maxDistinct})
	t.Cleanup(a.Close)
	return slog.New(a), a, buf
}

func deniedConn(port uint16, name string) Connection {
	return Connection{
		Sandbox: "sb", Client: netip.AddrPortFrom(netip.MustParseAddr("10.88.0.5"), port),
		Dst: netip.MustParseAddrPort("203.0.113.7:443"), Proto: "tls", Name: name,
		Verdict: Deny, Reason: ReasonNameNotAllowed,
	}
}

func deniedQuery(port uint16, name string) DNSQuery {
	return DNSQuery{
		Sandbox: "sb", Proto: "udp", Client: netip.AddrPortFrom(netip.MustParseAddr("10.88.0.5"), port),
		Name: name, QType: "A", Verdict: Deny, Reason: ReasonNameNotAllowed, Rcode: "REFUSED",
	}
}

// Within an interval the first denial of a key is written as logged, its
// repeats (other client ports) only counted and written as one denials
// line at the end; allowed lines all pass; a cap's refusals likewise.
// After the flush a new interval writes the first again.
func TestAggregatorCountsRepeats(t *testing.T) {
	ctx := context.Background()
	l, a, buf := newTestAggregator(t, 0)
	allowed := deniedConn(40000, "api.example.com")
	allowed.Verdict, allowed.Reason, allowed.Rule = Allow, "", "api.example.com"
	for i := range 3 {
		allowed.Client = netip.AddrPortFrom(allowed.Client.Addr(), uint16(40000+i))
		allowed.Log(ctx, l)
	}
	for i := range 5 {
		deniedConn(uint16(41000+i), "evil.example").Log(ctx, l)
	}
	deniedConn(42000, "other.example").Log(ctx, l)
	for i := range 3 {
		deniedQuery(uint16(43000+i), "evil.example").Log(ctx, l)
	}
	for range 5 {
		Limit{Sandbox: "sb", Limit: LimitConnections, Max: 4096}.Log(ctx, l)
	}
	PolicyLoad{Sandbox: "sb", Path: "/p", Mode: "allowlist", Entries: 1}.Log(ctx, l)
	a.Flush()
	deniedConn(44000, "evil.example").Log(ctx, l)

	lines := logtest.Lines(buf.String(), "duration_ms", "first", "last")
	conn := func(port int, name, verdict, rule, reason string) string {
		level := "WARN"
		if verdict == Allow {
			level = "INFO"
		}
		return fmt.Sprintf(`{"level":"%s","msg":"connection","sandbox":"sb","client":"10.88.0.5:%d","dst":"203.0.113.7:443","proto":"tls","name":"%s","rule":"%s","verdict":"%s","reason":"%s","bytes_up":0,"bytes_down":0,"duration_ms":_}`,
			level, port, name, rule, verdict, reason)
	}
	logtest.Check(t, lines,
		conn(40000, "api.example.com", Allow, "api.example.com", ""),
		conn(40001, "api.example.com", Allow, "api.example.com", ""),
		conn(40002, "api.example.com", Allow, "api.example.com", ""),
		conn(41000, "evil.example", Deny, "", ReasonNameNotAllowed),
		conn(42000, "other.example", Deny, "", ReasonNameNotAllowed),
		`{"level":"WARN","msg":"dns","sandbox":"sb","proto":"udp","client":"10.88.0.5:43000","name":"evil.example","qtype":"A","verdict":"deny","rule":"","reason":"name not allowed","rcode":"REFUSED","upstream":"","ech_removed":false,"private_removed":0,"duration_ms":_}`,
		`{"level":"WARN","msg":"limit","sandbox":"sb","limit":"connections","max":4096,"count":1}`,
		`{"level":"INFO","msg":"policy loaded","sandbox":"sb","path":"/p","mode":"allowlist","entries":1}`,
		`{"level":"WARN","msg":"denials","sandbox":"sb","kind":"connection","proto":"tls","name":"evil.example","dst":"203.0.113.7:443","rule":"","verdict":"deny","reason":"name not allowed","count":4,"first":_,"last":_}`,
		`{"level":"WARN","msg":"denials","sandbox":"sb","kind":"dns","proto":"udp","name":"evil.example","qtype":"A","rcode":"REFUSED","rule":"","verdict":"deny","reason":"name not allowed","count":2,"first":_,"last":_}`,
		`{"level":"WARN","msg":"limit","sandbox":"sb","limit":"connections","max":4096,"count":4,"first":_,"last":_}`,
		conn(44000, "evil.example", Deny, "", ReasonNameNotAllowed),
	)

	// Read back, the lines count every denial and refusal logged.
	var c Counts
	Scan(strings.NewReader(buf.String()), func(d Decision) error { c.Add(d); return nil })
	want := Counts{Allowed: 3, Denied: 7, DNS: DNSCounts{Denied: 3}, Limited: 5}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
}

// Past MaxDistinct keys an interval writes no more denials one by one: a
// workload that asks for ever new names (data encoded into them) adds one
// line per kind, with the count. 20,000 such queries write a bounded
// number of lines.
func TestAggregatorBoundsDistinctDenials(t *testing.T) {
	ctx := context.Background()
	l, a, buf := newTestAggregator(t, 8)
	for i := range 20000 {
		deniedQuery(uint16(i), fmt.Sprintf("x%05d.tunnel.example", i)).Log(ctx, l)
	}
	deniedConn(1, "evil.example").Log(ctx, l)
	a.Flush()
	lines := logtest.Lines(buf.String(), "first", "last", "duration_ms", "client")
	if len(lines) != 10 {
		t.Fatalf("%d lines, want 8 queries and a summary per kind:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, line := range lines[:8] {
		if !strings.Contains(line, fmt.Sprintf(`"name":"x%05d.tunnel.example"`, i)) {
			t.Errorf("line %d: %s", i, line)
		}
	}
	logtest.Check(t, lines[8:],
		`{"level":"WARN","msg":"denials","sandbox":"sb","kind":"connection","proto":"","name":"","dst":"","rule":"","verdict":"deny","reason":"more distinct denials than one interval logs","count":1,"first":_,"last":_}`,
		`{"level":"WARN","msg":"denials","sandbox":"sb","kind":"dns","proto":"","name":"","qtype":"","rcode":"","rule":"","verdict":"deny","reason":"more distinct denials than one interval logs","count":19992,"first":_,"last":_}`,
	)
	var c Counts
	Scan(strings.NewReader(buf.String()), func(d Decision) error { c.Add(d); return nil })
	if want := (Counts{Denied: 1, DNS: DNSCounts{Denied: 20000}}); c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	if n := len(buf.String()); n > 8*400+2*400 {
		t.Errorf("20,000 denied queries wrote %d bytes", n)
	}
}

// Format writes a summary as the denial it repeats and the count, and a
// limit line as the cap and its refusals.
func TestFormatSummaries(t *testing.T) {
	ctx := context.Background()
	l, a, buf := newTestAggregator(t, 1)
	deniedQuery(1, "evil.example").Log(ctx, l)
	deniedQuery(2, "evil.example").Log(ctx, l)
	deniedQuery(3, "other.example").Log(ctx, l)
	Limit{Sandbox: "sb", Limit: LimitDNSRate, Max: 2000}.Log(ctx, l)
	Limit{Sandbox: "sb", Limit: LimitDNSRate, Max: 2000}.Log(ctx, l)
	a.Flush()
	var got []string
	Scan(strings.NewReader(buf.String()), func(d Decision) error {
		// Times vary: keep what follows them.
		s := Format(d)
		got = append(got, s[len(TimeLayout)+1:])
		return nil
	})
	want := []string{
		"deny  dns/udp evil.example A answered REFUSED, name not allowed",
		"limit dnsQueriesPerSecond: 1 refused over the cap of 2000",
		"deny  dns/udp evil.example A answered REFUSED, name not allowed (and 1 more from ",
		"deny  1 DNS queries denied, not logged one by one: more distinct denials than one interval logs (from ",
		"limit dnsQueriesPerSecond: 1 refused over the cap of 2000 (from ",
	}
	if len(got) != len(want) {
		t.Fatalf("got\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d\n got %s\nwant %s...", i, got[i], want[i])
		}
	}
}
