package decisionlog_test

// The tests here write lines through the proxy's own writers and read
// them back: they cannot be in package decisionlog, which those writers
// import.

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy"
	. "github.com/doorman-net/doorman/proxy/decisionlog"
)

// logRecord writes r as the proxy does (see proxy.Proxy.log).
func logRecord(logger *slog.Logger, r proxy.Record) {
	level := slog.LevelInfo
	if r.Verdict == proxy.Deny {
		level = slog.LevelWarn
	}
	logger.LogAttrs(context.Background(), level, "connection", r.LogValue().Group()...)
}

// The reader reads what the proxy writes, field for field.
func TestParseProxyRecord(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	rec := proxy.Record{
		Sandbox: "ctr1", Client: netip.MustParseAddrPort("127.0.0.1:40000"),
		Dst: netip.MustParseAddrPort("[2001:db8::10]:443"), Proto: "tls", Name: "api.example.test",
		Rule: "api.example.test", Verdict: proxy.Allow, Reason: "name allowed",
		Upstream: netip.MustParseAddrPort("[2001:db8::10]:443"), BytesUp: 517, BytesDn: 4120,
		Duration: 1500 * time.Microsecond,
	}
	logRecord(logger, rec)
	logRecord(logger, proxy.Record{Sandbox: "ctr1", Verdict: proxy.Deny, Reason: "no original destination"})
	logger.Info("policy loaded", "sandbox", "ctr1", "mode", "allowlist", "entries", 1)

	var got []Decision
	if _, err := Scan(&buf, func(d Decision) error { got = append(got, d); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d decisions, want 2: %+v", len(got), got)
	}
	d := got[0]
	want := Decision{
		Level: "INFO", Kind: KindConnection, Sandbox: "ctr1", Client: "127.0.0.1:40000", Dst: "[2001:db8::10]:443", Proto: "tls",
		Name: "api.example.test", Rule: "api.example.test", Verdict: Allow, Reason: "name allowed",
		Upstream: "[2001:db8::10]:443", BytesUp: 517, BytesDown: 4120, DurationMS: 1.5,
	}
	d.Time, d.Raw = time.Time{}, nil
	if !reflect.DeepEqual(d, want) {
		t.Errorf("decision\n got %+v\nwant %+v", d, want)
	}
	if time.Since(got[0].Time) > time.Minute {
		t.Errorf("time %v", got[0].Time)
	}
	if ap, ok := got[0].DstAddrPort(); !ok || ap != rec.Dst {
		t.Errorf("DstAddrPort = %v, %v", ap, ok)
	}
	if got[1].Level != "WARN" || got[1].Verdict != Deny {
		t.Errorf("denial: %+v", got[1])
	}
	if _, ok := got[1].DstAddrPort(); ok {
		t.Error("an unread destination parsed")
	}
	if !bytes.HasPrefix(got[0].Raw, []byte("{")) || bytes.HasSuffix(got[0].Raw, []byte("\n")) {
		t.Errorf("raw line %q", got[0].Raw)
	}
}

// WaitPolicy sees the proxy's own policy watcher lines.
func TestWaitPolicy(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "s.log")
	policy := filepath.Join(dir, "policy")
	os.WriteFile(policy, []byte("mode: allowlist\napi.example.test\n"), 0o644)
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logger := slog.New(slog.NewJSONHandler(logFile, nil))
	p := proxy.New(proxy.Config{Sandbox: "s", Logger: logger})
	if _, err := proxy.NewPolicyWatcher(p, policy, logger); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ev, err := WaitPolicy(ctx, logPath, 0)
	if err != nil || !ev.Loaded || ev.Mode != "allowlist" || ev.Entries != 1 {
		t.Fatalf("loaded: %+v, %v", ev, err)
	}

	// From the end of the log on, nothing yet: times out.
	fi, _ := os.Stat(logPath)
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if ev, err := WaitPolicy(short, logPath, fi.Size()); err == nil {
		t.Fatalf("no new load: got %+v", ev)
	}

	// A rejected file is reported as such.
	os.WriteFile(policy, []byte("mode: allowlist\nbad entry\n"), 0o644)
	if _, err := proxy.NewPolicyWatcher(p, policy, logger); err == nil {
		t.Fatal("bad policy loaded")
	}
	ev, err = WaitPolicy(ctx, logPath, fi.Size())
	if err != nil || ev.Loaded || !strings.Contains(ev.Err, "bad entry") {
		t.Fatalf("rejected: %+v, %v", ev, err)
	}
}
