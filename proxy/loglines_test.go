package proxy

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy/internal/logtest"
)

// The connection lines are fixed to the byte: field names, order and
// types, the level of each verdict, upstream only when one was dialed.
func TestConnectionLinesGolden(t *testing.T) {
	var buf bytes.Buffer
	p := New(Config{Sandbox: "sb-golden", Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	p.log(Record{
		Sandbox:  "sb-golden",
		Client:   netip.MustParseAddrPort("10.88.0.5:40000"),
		Dst:      netip.MustParseAddrPort("203.0.113.7:443"),
		Proto:    "tls",
		Name:     "api.example.com",
		Rule:     "api.example.com:443",
		Verdict:  Allow,
		Reason:   "name allowed",
		Upstream: netip.MustParseAddrPort("203.0.113.8:443"),
		BytesUp:  517,
		BytesDn:  4100,
		Duration: 1234567 * time.Microsecond,
	})
	p.log(Record{
		Sandbox:  "sb-golden",
		Client:   netip.MustParseAddrPort("[2001:db8::5]:40001"),
		Dst:      netip.MustParseAddrPort("[2001:db8::7]:80"),
		Proto:    "http",
		Name:     "evil.example",
		Verdict:  Deny,
		Reason:   "name not allowed",
		Duration: 400 * time.Microsecond,
	})
	p.log(Record{
		Sandbox:  "sb-golden",
		Client:   netip.MustParseAddrPort("10.88.0.5:40002"),
		Dst:      netip.MustParseAddrPort("203.0.113.9:443"),
		Proto:    "unknown",
		Rule:     "203.0.113.9",
		Verdict:  VerdictError,
		Reason:   "dial 203.0.113.9:443: connection refused",
		Upstream: netip.MustParseAddrPort("203.0.113.9:443"),
		BytesUp:  12,
		Duration: time.Millisecond,
	})
	p.log(Record{Sandbox: "sb-golden", Verdict: Deny, Reason: "no original destination", Duration: 1500})
	logtest.Check(t, logtest.Lines(buf.String()),
		`{"level":"INFO","msg":"connection","sandbox":"sb-golden","client":"10.88.0.5:40000","dst":"203.0.113.7:443","proto":"tls","name":"api.example.com","rule":"api.example.com:443","verdict":"allow","reason":"name allowed","upstream":"203.0.113.8:443","bytes_up":517,"bytes_down":4100,"duration_ms":1234.567}`,
		`{"level":"WARN","msg":"connection","sandbox":"sb-golden","client":"[2001:db8::5]:40001","dst":"[2001:db8::7]:80","proto":"http","name":"evil.example","rule":"","verdict":"deny","reason":"name not allowed","bytes_up":0,"bytes_down":0,"duration_ms":0.4}`,
		`{"level":"ERROR","msg":"connection","sandbox":"sb-golden","client":"10.88.0.5:40002","dst":"203.0.113.9:443","proto":"unknown","name":"","rule":"203.0.113.9","verdict":"error","reason":"dial 203.0.113.9:443: connection refused","upstream":"203.0.113.9:443","bytes_up":12,"bytes_down":0,"duration_ms":1}`,
		`{"level":"WARN","msg":"connection","sandbox":"sb-golden","client":"invalid AddrPort","dst":"invalid AddrPort","proto":"","name":"","rule":"","verdict":"deny","reason":"no original destination","bytes_up":0,"bytes_down":0,"duration_ms":0.001}`,
	)
}

// The policy watcher's lines: loaded, rejected, and a directory it cannot
// watch.
func TestPolicyLinesGolden(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	dir := t.TempDir()
	path := filepath.Join(dir, "policy")
	if err := os.WriteFile(path, []byte("mode: allowlist\napi.example.com\n*.example.org:443\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := New(Config{Sandbox: "sb-golden", Logger: logger})
	if _, err := NewPolicyWatcher(p, path, logger); err != nil {
		t.Fatal(err)
	}
	// The error is the file system's, not the parser's: the line's
	// shape is what is fixed here, not conf's wording.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := NewPolicyWatcher(p, path, logger); err == nil {
		t.Fatal("a missing policy loaded")
	}
	missing := filepath.Join(dir, "gone", "policy")
	w, _ := NewPolicyWatcher(p, missing, slog.New(slog.DiscardHandler))
	w.logger = logger
	ctx, cancel := contextWithCancel()
	cancel()
	w.Run(ctx)
	got := logtest.Lines(buf.String())
	for i := range got {
		got[i] = strings.ReplaceAll(got[i], dir, "DIR")
	}
	logtest.Check(t, got,
		`{"level":"INFO","msg":"policy loaded","sandbox":"sb-golden","path":"DIR/policy","mode":"allowlist","entries":2}`,
		`{"level":"ERROR","msg":"policy rejected, denying everything","sandbox":"sb-golden","path":"DIR/policy","err":"policy file DIR/policy: open DIR/policy: no such file or directory"}`,
		`{"level":"WARN","msg":"cannot watch policy directory, polling only","path":"DIR/gone/policy","err":"no such file or directory"}`,
	)
}

// failingListener fails its first Accept with err, then is closed.
type failingListener struct {
	net.Listener
	err error
}

func (l *failingListener) Accept() (net.Conn, error) {
	if err := l.err; err != nil {
		l.err = nil
		return nil, err
	}
	return nil, net.ErrClosed
}

// The line for an accept that failed.
func TestAcceptLineGolden(t *testing.T) {
	var buf bytes.Buffer
	p := New(Config{Sandbox: "sb-golden", Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err := p.Serve(&failingListener{err: errors.New("accept4: too many open files")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Serve: %v", err)
	}
	logtest.Check(t, logtest.Lines(buf.String()),
		`{"level":"ERROR","msg":"accept","sandbox":"sb-golden","err":"accept4: too many open files"}`,
	)
}
