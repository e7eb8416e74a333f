package hostconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The host-wide limits file: absent is the defaults, present is read
// strictly, and an error names the file, the key and the value.
func TestLimitsFile(t *testing.T) {
	dir := t.TempDir()
	if l, err := Limits(filepath.Join(dir, "absent.json")); err != nil || l.Connections != 0 {
		t.Fatalf("absent file: %+v, %v", l, err)
	}
	path := filepath.Join(dir, "limits.json")
	os.WriteFile(path, []byte(`{"connections": 4096, "idleTimeout": "0s", "dnsQueriesPerSecond": 50}`), 0o644)
	l, err := Limits(path)
	if err != nil || l.Connections != 4096 || l.IdleTimeout == nil || time.Duration(*l.IdleTimeout) != 0 || l.DNSQueriesPerSecond != 50 {
		t.Fatalf("read %+v, %v", l, err)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"conections": 1}`, `limits "conections": unknown key`},
		{`{"connections": -1}`, "limits.connections: -1 is negative"},
		{`{"idleTimeout": "an hour"}`, `limits.idleTimeout "an hour": want a duration`},
		{`{"sniffTimeout": "ten seconds"}`, `limits.sniffTimeout "ten seconds": want a duration`},
	} {
		os.WriteFile(path, []byte(tc.json), 0o644)
		if _, err := Limits(path); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s and containing %q", tc.json, err, path, tc.want)
		}
	}
}

// The OTLP settings file: absent is no export from OTLP and an error
// from LoadOTLP; a bad one is an error naming the file and the value.
func TestOTLPFile(t *testing.T) {
	dir := t.TempDir()
	if o, err := OTLP(filepath.Join(dir, "absent.json")); err != nil || o.Endpoint != "" {
		t.Errorf("absent file: %+v, %v", o, err)
	}
	if _, err := LoadOTLP(filepath.Join(dir, "absent.json")); err == nil || !strings.Contains(err.Error(), "absent.json") {
		t.Errorf("absent file: %v", err)
	}
	path := filepath.Join(dir, "otlp.json")
	for body, want := range map[string]string{
		`{"endpoint": "ftp://127.0.0.1:4318"}`:                  `"ftp://127.0.0.1:4318"`,
		`{"endpoint": "http://127.0.0.1:4318", "endpont": "x"}`: `"endpont"`,
	} {
		os.WriteFile(path, []byte(body), 0o600)
		if _, err := OTLP(path); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s and %s", body, err, path, want)
		}
	}
	os.WriteFile(path, []byte(`{"endpoint": "otel.example.com:4318", "headers": {"Authorization": "Bearer t0ken"}}`), 0o600)
	if o, err := OTLP(path); err != nil || o.Endpoint != "otel.example.com:4318" || o.Headers["Authorization"] != "Bearer t0ken" {
		t.Errorf("read %+v, %v", o, err)
	}
}
