package decisionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/build"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy/internal/logtest"
)

// jsonKeys returns the keys of the JSON tags of struct type t's fields,
// without those tagged "-".
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}

// lineKeys writes one line with log and returns its keys, msg and slog's
// own time and level aside.
func lineKeys(t *testing.T, log func(*slog.Logger)) []string {
	t.Helper()
	var buf bytes.Buffer
	log(slog.New(slog.NewJSONHandler(&buf, nil)))
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("line %q: %v", buf.String(), err)
	}
	var keys []string
	for k := range m {
		switch k {
		case slog.TimeKey, slog.LevelKey, slog.MessageKey:
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// The reader's JSON tags are the writers' keys: every field a decision
// line is written with is read into Decision, and every field Decision
// reads is written by one of the two kinds. A key spelt one way in a
// writer and another in the reader fails here. The lines are a pod's
// (WithPod), which carry every key.
func TestDecisionReadsWhatIsWritten(t *testing.T) {
	ctx := context.Background()
	conn := lineKeys(t, func(l *slog.Logger) {
		Connection{Verdict: Allow, ECH: true, Upstream: netip.MustParseAddrPort("203.0.113.7:443")}.Log(ctx, WithPod(l, "0b1c"))
	})
	query := lineKeys(t, func(l *slog.Logger) { DNSQuery{Verdict: Deny}.Log(ctx, WithPod(l, "0b1c")) })
	request := lineKeys(t, func(l *slog.Logger) {
		Request{Verdict: Deny, RuleSet: "closed-book@1", Tools: []string{"t"}, Removed: []string{"t"}, Evidence: []string{"e"},
			Declared: []string{"d"}}.Log(ctx, WithPod(l, "0b1c"))
	})
	denials := lineKeys(t, func(l *slog.Logger) { Denials{Kind: KindConnection, Count: 2}.Log(ctx, l) })
	dnsDenials := lineKeys(t, func(l *slog.Logger) { Denials{Kind: KindDNS, Count: 2}.Log(ctx, l) })
	limit := lineKeys(t, func(l *slog.Logger) {
		Limit{Limit: LimitConnections, Max: 1, Count: 2, First: time.Now(), Last: time.Now()}.Log(ctx, l)
	})
	hostDrop := lineKeys(t, func(l *slog.Logger) {
		HostDrop{Src: "198.51.100.2", Dst: "203.0.113.9", Proto: "icmp", ICMPType: 8}.Log(ctx, l)
	})
	read := jsonKeys(reflect.TypeFor[Decision]())
	written := slices.Concat(conn, query, request, denials, dnsDenials, limit, hostDrop)
	for _, k := range written {
		if !slices.Contains(read, k) {
			t.Errorf("decision lines are written with %q, which Decision does not read", k)
		}
	}
	for _, k := range read {
		switch k {
		case slog.TimeKey, slog.LevelKey:
		default:
			if !slices.Contains(written, k) {
				t.Errorf("Decision reads %q, which no decision line is written with", k)
			}
		}
	}
}

// PolicyEvent reads what the policy lines are written with.
func TestPolicyEventReadsWhatIsWritten(t *testing.T) {
	ctx := context.Background()
	loaded := lineKeys(t, func(l *slog.Logger) { PolicyLoad{}.Log(ctx, l) })
	rejected := lineKeys(t, func(l *slog.Logger) { PolicyLoad{Err: errors.New("x")}.Log(ctx, l) })
	for _, k := range jsonKeys(reflect.TypeFor[PolicyEvent]()) {
		if k != slog.TimeKey && !slices.Contains(loaded, k) && !slices.Contains(rejected, k) {
			t.Errorf("PolicyEvent reads %q, which no policy line is written with", k)
		}
	}
}

// Each typed line reads back as what was written.
func TestTypedLinesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	ctx := context.Background()
	Connection{
		Sandbox: "sb", Client: netip.MustParseAddrPort("10.88.0.5:40000"), Dst: netip.MustParseAddrPort("203.0.113.7:443"),
		Proto: "tls", Name: "api.example.com", ECH: true, Rule: "api.example.com", Verdict: Error, Reason: "dial: refused",
		Upstream: netip.MustParseAddrPort("203.0.113.8:443"), BytesUp: 1, BytesDown: 2, Duration: 1500 * time.Microsecond,
	}.Log(ctx, l)
	DNSQuery{
		Sandbox: "sb", Proto: "udp", Client: netip.MustParseAddrPort("10.88.0.5:5353"), Name: "api.example.com", QType: "A",
		Verdict: Allow, Rule: "api.example.com", Reason: "name allowed", Rcode: "NOERROR",
		Upstream: netip.MustParseAddrPort("198.51.100.53:53"), ECHRemoved: true, PrivateRemoved: 3, Duration: time.Millisecond,
	}.Log(ctx, l)
	PolicyLoad{Sandbox: "sb", Path: "/p", Mode: "allowlist", Entries: 4}.Log(ctx, l)
	PolicyLoad{Sandbox: "sb", Path: "/p", Err: errors.New("bad entry")}.Log(ctx, l)

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines: %q", len(lines), lines)
	}
	want := []Decision{
		{Level: "ERROR", Kind: KindConnection, Sandbox: "sb", Client: "10.88.0.5:40000", Dst: "203.0.113.7:443", Proto: "tls",
			Name: "api.example.com", ECH: true, Rule: "api.example.com", Verdict: Error, Reason: "dial: refused", Upstream: "203.0.113.8:443",
			BytesUp: 1, BytesDown: 2, DurationMS: 1.5},
		{Level: "INFO", Kind: KindDNS, Sandbox: "sb", Client: "10.88.0.5:5353", Proto: "udp", Name: "api.example.com",
			Rule: "api.example.com", Verdict: Allow, Reason: "name allowed", Upstream: "198.51.100.53:53", DurationMS: 1,
			QType: "A", Rcode: "NOERROR", ECHRemoved: true, PrivateRemoved: 3},
	}
	for i, w := range want {
		d, ok := Parse([]byte(lines[i]))
		if !ok {
			t.Fatalf("line %d not a decision: %s", i, lines[i])
		}
		d.Time, d.Raw = time.Time{}, nil
		if !reflect.DeepEqual(d, w) {
			t.Errorf("line %d\n got %+v\nwant %+v", i, d, w)
		}
	}
	if ev, ok := parsePolicyEvent([]byte(lines[2])); !ok || !ev.Loaded || ev.Mode != "allowlist" || ev.Entries != 4 {
		t.Errorf("policy loaded: %+v, %v", ev, ok)
	}
	if ev, ok := parsePolicyEvent([]byte(lines[3])); !ok || ev.Loaded || ev.Err != "bad entry" {
		t.Errorf("policy rejected: %+v, %v", ev, ok)
	}
}

// A pod's lines (WithPod) carry its uid, which reads back; other
// sandboxes' lines have no such field.
func TestPodLines(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	ctx := context.Background()
	Connection{Sandbox: "team-a/web-0", Verdict: Deny}.Log(ctx, WithPod(l, "0b1c2d3e-0000-4000-8000-000000000001"))
	Connection{Sandbox: "3f2a", Verdict: Deny}.Log(ctx, WithPod(l, ""))
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), lines)
	}
	if d, ok := Parse([]byte(lines[0])); !ok || d.Sandbox != "team-a/web-0" || d.PodUID != "0b1c2d3e-0000-4000-8000-000000000001" {
		t.Errorf("a pod's line reads back as %+v (%v): %s", d, ok, lines[0])
	}
	if strings.Contains(lines[1], PodUIDKey) {
		t.Errorf("a line without a pod: %s", lines[1])
	}
}

// The resolver line is fixed to the byte, as the proxy has written it
// since its start: with servers, and the warning without.
func TestResolverLineGolden(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	ctx := context.Background()
	Resolver{Sandbox: "sb-golden", Servers: []netip.AddrPort{
		netip.MustParseAddrPort("10.89.7.1:53"), netip.MustParseAddrPort("[2001:db8::53]:53"),
	}}.Log(ctx, l)
	Resolver{Sandbox: "sb-golden", ResolvConf: "/etc/resolv.conf",
		Why: "no --resolver given: names admitted by name rules resolve with this host's resolv.conf, not the sandbox's resolvers"}.Log(ctx, l)
	logtest.Check(t, logtest.Lines(buf.String()),
		`{"level":"INFO","msg":"resolver","sandbox":"sb-golden","servers":["10.89.7.1:53","[2001:db8::53]:53"]}`,
		`{"level":"WARN","msg":"resolver","sandbox":"sb-golden","servers":[],"resolvConf":"/etc/resolv.conf","why":"no --resolver given: names admitted by name rules resolve with this host's resolv.conf, not the sandbox's resolvers"}`,
	)
}

// Every writer in the proxy imports this package: it must not bring
// anything into the proxy beyond the standard library.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkg.Imports {
		if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
			t.Errorf("imports %s", p)
		}
	}
}
