package otlplog_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/doorman-net/doorman/proxy"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/otlplog"
	"github.com/doorman-net/doorman/spec"
)

// connectionRecord is a slog record as proxy.(*Proxy).log writes it.
func connectionRecord(t time.Time) slog.Record {
	rec := proxy.Record{
		Sandbox:  "sb-42",
		Client:   netip.MustParseAddrPort("10.88.0.5:40000"),
		Dst:      netip.MustParseAddrPort("203.0.113.7:443"),
		Proto:    "tls",
		Name:     "api.example.com",
		Rule:     "api.example.com",
		Verdict:  proxy.Allow,
		Reason:   "allowed by api.example.com",
		Upstream: netip.MustParseAddrPort("203.0.113.7:443"),
		BytesUp:  1234,
		BytesDn:  5678,
		Duration: 1500 * time.Microsecond,
	}
	r := slog.NewRecord(t, slog.LevelInfo, "connection", 0)
	r.AddAttrs(rec.LogValue().Group()...)
	return r
}

// dnsRecord is a slog record as dnsfilter.(*Filter).log writes it for a
// denied query.
func dnsRecord(t time.Time) slog.Record {
	r := slog.NewRecord(t, slog.LevelWarn, "dns", 0)
	r.AddAttrs(
		slog.String("sandbox", "sb-42"),
		slog.String("proto", "udp"),
		slog.String("client", "10.88.0.5:5353"),
		slog.String("name", "exfil.example.net"),
		slog.String("qtype", "TXT"),
		slog.String("verdict", "deny"),
		slog.String("rule", ""),
		slog.String("reason", "no entry admits exfil.example.net"),
		slog.String("rcode", "REFUSED"),
		slog.String("upstream", ""),
		slog.Bool("ech_removed", false),
		slog.Float64("duration_ms", 0.25),
	)
	return r
}

// requestRecord is a slog record as decisionlog.Request.Log writes it for
// a refused request on an inspected host.
func requestRecord(t time.Time) slog.Record {
	r := slog.NewRecord(t, slog.LevelWarn, decisionlog.KindRequest, 0)
	r.AddAttrs(decisionlog.Request{
		Sandbox: "sb-42", Client: netip.MustParseAddrPort("10.88.0.5:40000"), Dst: netip.MustParseAddrPort("203.0.113.10:443"),
		Proto: "h2", Name: "api.example.com", Method: "POST", Path: "/v1/messages",
		Rule: "deny POST /v1/messages json:tools[].type=web_search*", Verdict: decisionlog.Deny, Status: 403,
		BytesUp: 78, Duration: time.Millisecond,
	}.Attrs()...)
	return r
}

func TestExportsConnectionAndDNSRecords(t *testing.T) {
	rc := startReceiver(t, nil)
	var local syncBuffer
	h, shutdown, err := otlplog.NewHandler(slog.NewJSONHandler(&local, nil), otlplog.Config{
		// http://127.0.0.1:port, no path
		Sandbox: "sb-42",
		OTLP:    spec.OTLP{Endpoint: rc.URL, Headers: map[string]string{"Authorization": "Bearer t0ken"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	for _, r := range []slog.Record{
		connectionRecord(t0),
		slog.NewRecord(t0, slog.LevelInfo, "policy loaded", 0), // local only
		dnsRecord(t0.Add(time.Second)),
		requestRecord(t0.Add(2 * time.Second)),
	} {
		if err := h.Handle(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	got := rc.records()
	if len(got) != 3 {
		t.Fatalf("collector got %d records, want 3 (connection, dns and request, not \"policy loaded\")", len(got))
	}
	rc.mu.Lock()
	for i, hd := range rc.headers {
		if a := hd.Get("Authorization"); a != "Bearer t0ken" {
			t.Errorf("request %d: Authorization %q, want the configured header", i, a)
		}
		if ct := hd.Get("Content-Type"); ct != "application/x-protobuf" {
			t.Errorf("request %d: Content-Type %q", i, ct)
		}
		if p := rc.paths[i]; p != "/v1/logs" {
			t.Errorf("request %d: path %q, want /v1/logs", i, p)
		}
	}
	rc.mu.Unlock()

	lines := local.lines(t)
	for i, want := range []struct {
		msg      string
		sev      logspb.SeverityNumber
		sevText  string
		time     time.Time
		localIdx int
	}{
		{"connection", logspb.SeverityNumber_SEVERITY_NUMBER_INFO, "INFO", t0, 0},
		{"dns", logspb.SeverityNumber_SEVERITY_NUMBER_WARN, "WARN", t0.Add(time.Second), 2},
		{"request", logspb.SeverityNumber_SEVERITY_NUMBER_WARN, "WARN", t0.Add(2 * time.Second), 3},
	} {
		e := got[i]
		if s := e.resource["service.name"].GetStringValue(); s != "doorman" {
			t.Errorf("%s: resource service.name %q, want doorman", want.msg, s)
		}
		if s := e.resource[otlplog.SandboxKey].GetStringValue(); s != "sb-42" {
			t.Errorf("%s: resource %s %q, want sb-42", want.msg, otlplog.SandboxKey, s)
		}
		if e.scope == "" {
			t.Errorf("%s: no instrumentation scope name", want.msg)
		}
		lr := e.record
		if b := lr.GetBody().GetStringValue(); b != want.msg {
			t.Errorf("record %d: body %q, want %q", i, b, want.msg)
		}
		if lr.GetSeverityNumber() != want.sev || lr.GetSeverityText() != want.sevText {
			t.Errorf("%s: severity %v %q, want %v %q", want.msg, lr.GetSeverityNumber(), lr.GetSeverityText(), want.sev, want.sevText)
		}
		if ts := lr.GetTimeUnixNano(); ts != uint64(want.time.UnixNano()) {
			t.Errorf("%s: time_unix_nano %d, want %d", want.msg, ts, want.time.UnixNano())
		}
		if lr.GetObservedTimeUnixNano() == 0 {
			t.Errorf("%s: no observed time", want.msg)
		}
		// Every field of the local JSON line is an attribute, nothing more.
		l := lines[want.localIdx]
		if l["msg"] != want.msg {
			t.Fatalf("local line %d is %v, want msg %q", want.localIdx, l, want.msg)
		}
		var localKeys, otlpKeys []string
		for k := range l {
			if k != "time" && k != "level" && k != "msg" {
				localKeys = append(localKeys, k)
			}
		}
		for k := range e.attrs {
			otlpKeys = append(otlpKeys, k)
		}
		sort.Strings(localKeys)
		sort.Strings(otlpKeys)
		if strings.Join(localKeys, ",") != strings.Join(otlpKeys, ",") {
			t.Errorf("%s: OTLP attributes %v, want the local line's fields %v", want.msg, otlpKeys, localKeys)
		}
	}

	// Types follow the slog attributes.
	conn, dns := got[0].attrs, got[1].attrs
	checks := []struct {
		name string
		got  *commonpb.AnyValue
		want *commonpb.AnyValue
	}{
		{"connection sandbox", conn["sandbox"], str("sb-42")},
		{"connection dst", conn["dst"], str("203.0.113.7:443")},
		{"connection verdict", conn["verdict"], str("allow")},
		{"connection upstream", conn["upstream"], str("203.0.113.7:443")},
		{"connection bytes_up", conn["bytes_up"], &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 1234}}},
		{"connection bytes_down", conn["bytes_down"], &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 5678}}},
		{"connection duration_ms", conn["duration_ms"], &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 1.5}}},
		{"dns name", dns["name"], str("exfil.example.net")},
		{"dns rule (empty)", dns["rule"], str("")},
		{"dns ech_removed", dns["ech_removed"], &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: false}}},
		{"dns duration_ms", dns["duration_ms"], &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.25}}},
	}
	for _, c := range checks {
		if !proto.Equal(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}

	// The local log has every record, and the summary of the exporter.
	if n := len(withMsg(lines, "policy loaded")); n != 1 {
		t.Errorf("local log has %d \"policy loaded\" lines, want 1", n)
	}
	otlpLines := withMsg(lines, "otlp")
	if len(otlpLines) != 1 || num(otlpLines[0], "exported") != 3 || num(otlpLines[0], "dropped") != 0 {
		t.Errorf("otlp lines %v, want one with exported 3, dropped 0", otlpLines)
	}
}

func str(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

// A host:port endpoint with Insecure, and attributes and groups added
// with With and WithGroup.
func TestHostPortEndpointAndDerivedHandlers(t *testing.T) {
	rc := startReceiver(t, nil)
	var local syncBuffer
	h, shutdown, err := otlplog.NewHandler(slog.NewJSONHandler(&local, nil), otlplog.Config{
		Sandbox: "sb-7",
		OTLP:    spec.OTLP{Endpoint: rc.Listener.Addr().String(), Insecure: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(h).With("run", "r1")
	logger.Info("connection", "bytes_up", 7)
	logger.WithGroup("tls").Warn("dns", "sni", "a.example.com", "n", 3)
	logger.Info("something else", "k", "v")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	got := rc.records()
	if len(got) != 2 {
		t.Fatalf("collector got %d records, want 2", len(got))
	}
	if s := got[0].resource[otlplog.SandboxKey].GetStringValue(); s != "sb-7" {
		t.Errorf("sandbox resource %q, want sb-7", s)
	}
	if !proto.Equal(got[0].attrs["run"], str("r1")) || got[0].attrs["bytes_up"].GetIntValue() != 7 {
		t.Errorf("connection attributes %v, want run=r1 and bytes_up=7", got[0].attrs)
	}
	if !proto.Equal(got[1].attrs["run"], str("r1")) {
		t.Errorf("dns attributes %v, want run=r1 from With", got[1].attrs)
	}
	tlsGroup := attrMapOf(got[1].attrs["tls"].GetKvlistValue().GetValues())
	if !proto.Equal(tlsGroup["sni"], str("a.example.com")) || tlsGroup["n"].GetIntValue() != 3 {
		t.Errorf("dns group tls = %v, want a map with sni and n", got[1].attrs["tls"])
	}
	// The local handler saw the same attributes.
	lines := local.lines(t)
	if len(lines) < 3 || lines[0]["run"] != "r1" || lines[1]["tls"] == nil {
		t.Errorf("local lines %v lack the With/WithGroup attributes", lines)
	}
}

func attrMapOf(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue { return attrMap(kvs) }

func TestNoEndpointIsTheLocalHandler(t *testing.T) {
	local := slog.NewJSONHandler(io.Discard, nil)
	before := runtime.NumGoroutine()
	h, shutdown, err := otlplog.NewHandler(local, otlplog.Config{Sandbox: "x", OTLP: spec.OTLP{Headers: map[string]string{"a": "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if h != slog.Handler(local) {
		t.Fatalf("handler is %T, want the local handler itself", h)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if n := runtime.NumGoroutine(); n != before {
		t.Errorf("goroutines %d after NewHandler, %d before", n, before)
	}
	allocs := testing.AllocsPerRun(100, func() {
		otlplog.NewHandler(local, otlplog.Config{Sandbox: "x"})
	})
	if allocs != 0 {
		t.Errorf("NewHandler without an endpoint allocates %v times, want 0", allocs)
	}
}

// logMany sends n connection records through h and returns how long it
// took.
func logMany(t *testing.T, h slog.Handler, n int) time.Duration {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := h.Handle(ctx, connectionRecord(time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	return time.Since(start)
}

func TestSlowCollectorNeverBlocksHandle(t *testing.T) {
	release := make(chan struct{})
	rc := startReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		select { // a collector that takes 10 s to answer
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before rc.Close
	var local syncBuffer
	const queue = 100
	h, shutdown, err := otlplog.NewHandler(slog.NewJSONHandler(&local, nil), otlplog.Config{
		// longer than the burst: no room is freed during it
		Sandbox:        "sb-slow",
		ExportTimeout:  2 * time.Second,
		ReportInterval: 50 * time.Millisecond,
		OTLP:           spec.OTLP{Endpoint: rc.URL, QueueSize: queue},
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	took := logMany(t, h, n)
	t.Logf("%d records handled in %v with the collector stalled", n, took)
	if took > time.Second*raceSlowdown {
		t.Errorf("handling %d records took %v: Handle waits for the collector", n, took)
	}
	select {
	case <-rc.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no export request reached the collector")
	}
	// At most `queue` records were accepted; the rest were dropped at
	// once, and the accepted ones are lost when their export times out.
	l := waitLine(t, &local, 10*time.Second, "reporting all records dropped", func(l map[string]any) bool {
		return l["msg"] == "otlp" && num(l, "dropped") == n
	})
	if qf := num(l, "queue_full"); qf < n-queue {
		t.Errorf("queue_full %d, want at least %d: %v", qf, n-queue, l)
	}
	if l["sandbox"] != "sb-slow" || l["level"] != "WARN" || l["last_error"] == nil {
		t.Errorf("otlp line %v: want sandbox, level WARN and last_error", l)
	}
	if got := len(withMsg(local.lines(t), "connection")); got != n {
		t.Errorf("local log has %d connection lines, want all %d", got, n)
	}

	// Shutdown with a stalled collector returns by its deadline.
	more := logMany(t, h, 50) // queued, never sent
	_ = more
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	shutdown(ctx)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("shutdown took %v with a 500ms deadline", d)
	}
	final := withMsg(local.lines(t), "otlp")
	last := final[len(final)-1]
	if num(last, "dropped") != n+50 || num(last, "exported") != 0 {
		t.Errorf("final otlp line %v: want dropped %d, exported 0", last, n+50)
	}
	// Nothing is exported after shutdown, and Handle still writes locally.
	if err := h.Handle(context.Background(), connectionRecord(time.Now())); err != nil {
		t.Fatal(err)
	}
	if got := len(withMsg(local.lines(t), "connection")); got != n+51 {
		t.Errorf("local log has %d connection lines, want %d", got, n+51)
	}
}

func TestAbsentCollectorCountsFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	var local syncBuffer
	h, shutdown, err := otlplog.NewHandler(slog.NewJSONHandler(&local, nil), otlplog.Config{
		Sandbox:        "sb-down",
		ExportTimeout:  200 * time.Millisecond,
		ReportInterval: 50 * time.Millisecond,
		OTLP:           spec.OTLP{Endpoint: "http://" + addr, QueueSize: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	const n = 10000
	took := logMany(t, h, n)
	t.Logf("%d records handled in %v with no collector", n, took)
	if took > time.Second*raceSlowdown {
		t.Errorf("handling %d records took %v with no collector", n, took)
	}
	l := waitLine(t, &local, 10*time.Second, "reporting all records dropped", func(l map[string]any) bool {
		return l["msg"] == "otlp" && num(l, "dropped") == n
	})
	// Records were accepted while there was room, and each was lost
	// when its export failed; the others were refused at once.
	if f, qf := num(l, "export_failed"), num(l, "queue_full"); f < 1 || qf < 1 || f+qf != n {
		t.Errorf("export_failed %d + queue_full %d, want both > 0, adding up to %d: %v", f, qf, n, l)
	}
	if e, _ := l["last_error"].(string); !strings.Contains(e, "refused") {
		t.Errorf("last_error %q, want the connection refusal", e)
	}
}

// A collector that is briefly unavailable gets the batch again; one that
// rejects records (partial success) has them counted as dropped.
func TestRetryAndPartialSuccess(t *testing.T) {
	rc := startReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 0:
			http.Error(w, "starting up", http.StatusServiceUnavailable)
		default:
			writeResponse(w, &collogspb.ExportLogsServiceResponse{
				PartialSuccess: &collogspb.ExportLogsPartialSuccess{RejectedLogRecords: 1, ErrorMessage: "too old"},
			})
		}
	})
	var local syncBuffer
	h, shutdown, err := otlplog.NewHandler(slog.NewJSONHandler(&local, nil), otlplog.Config{
		Sandbox: "sb-r",
		OTLP:    spec.OTLP{Endpoint: rc.URL + "/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	logMany(t, h, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	reqs := len(rc.requests)
	rc.mu.Unlock()
	if reqs != 2 {
		t.Errorf("collector got %d requests, want 2 (a 503, then the retry)", reqs)
	}
	final := withMsg(local.lines(t), "otlp")
	if len(final) == 0 {
		t.Fatal("no otlp line")
	}
	last := final[len(final)-1]
	if num(last, "exported") != 2 || num(last, "export_failed") != 1 || !strings.Contains(last["last_error"].(string), "too old") {
		t.Errorf("otlp line %v: want exported 2, export_failed 1, the collector's message", last)
	}
}

func TestBadConfig(t *testing.T) {
	local := slog.NewJSONHandler(io.Discard, nil)
	for _, c := range []struct {
		cfg  otlplog.Config
		want string // in the error
	}{
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "ftp://127.0.0.1:4318"}}, `"ftp://127.0.0.1:4318"`},
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "http://"}}, "no host"},
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "127.0.0.1"}}, `"127.0.0.1"`},
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "collector:0"}}, `port "0"`},
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "http://collector:99999"}}, `port "99999"`},
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "https://collector:4318", Insecure: true}}, "insecure"},
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "http://u:p@collector:4318"}}, "user info"},
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "collector:4318", Headers: map[string]string{"bad key": "v"}}}, `"bad key"`},
		{otlplog.Config{OTLP: spec.OTLP{Endpoint: "collector:4318", QueueSize: -1}}, "-1"},
		{otlplog.Config{ExportTimeout: -time.Second, OTLP: spec.OTLP{Endpoint: "collector:4318"}}, "-1s"},
	} {
		_, _, err := otlplog.NewHandler(local, c.cfg)
		if err == nil {
			t.Errorf("%+v: no error", c.cfg)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %q does not say %q", c.cfg, err, c.want)
		}
	}
}

// BenchmarkHandle measures a connection record through the local JSON
// handler alone, and with export to a collector that never answers in
// time (the queue stays full: the cost of a drop) and one that answers.
func BenchmarkHandle(b *testing.B) {
	stall := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	defer func() { close(stall); slow.Close() }()
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer fast.Close()
	for _, c := range []struct{ name, endpoint string }{
		{"local", ""},
		{"collector", fast.URL},
		{"stalled", slow.URL},
	} {
		b.Run(c.name, func(b *testing.B) {
			h, shutdown, err := otlplog.NewHandler(slog.NewJSONHandler(io.Discard, nil), otlplog.Config{
				Sandbox:       "b",
				ExportTimeout: time.Second,
				OTLP:          spec.OTLP{Endpoint: c.endpoint},
			})
			if err != nil {
				b.Fatal(err)
			}
			r := connectionRecord(time.Now())
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h.Handle(ctx, r)
			}
			b.StopTimer()
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			shutdown(sctx)
		})
	}
}
