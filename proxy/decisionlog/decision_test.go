package decisionlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSkips(t *testing.T) {
	for _, line := range []string{
		``,
		`not json`,
		`{"msg":"policy loaded","mode":"open"}`,
		`{"msg":"connection"}`, // no verdict
		`{"time":"yesterday","msg":"connection","verdict":"allow"}`,
		`{"msg":"connection","verdict":"allow"`, // cut short
		`{"msg":"connectionX","verdict":"allow"}`,
	} {
		if d, ok := Parse([]byte(line)); ok {
			t.Errorf("Parse(%q) = %+v, want skipped", line, d)
		}
	}
}

const (
	lineAllow = `{"time":"2025-06-01T12:00:00.123+02:00","level":"INFO","msg":"connection","sandbox":"s","client":"127.0.0.1:1","dst":"203.0.113.10:443","proto":"tls","name":"api.example.test","rule":"api.example.test","verdict":"allow","reason":"name allowed","upstream":"203.0.113.10:443","bytes_up":517,"bytes_down":4120,"duration_ms":120.4}`
	lineDeny  = `{"time":"2025-06-01T12:00:01.456+02:00","level":"WARN","msg":"connection","sandbox":"s","client":"127.0.0.1:2","dst":"203.0.113.20:80","proto":"http","name":"evil.example.test","rule":"","verdict":"deny","reason":"name not allowed","bytes_up":0,"bytes_down":0,"duration_ms":0.3}`
	lineError = `{"time":"2025-06-01T12:00:02+02:00","level":"INFO","msg":"connection","sandbox":"s","client":"127.0.0.1:3","dst":"203.0.113.30:22","proto":"unknown","name":"","rule":"203.0.113.30","verdict":"error","reason":"dial 203.0.113.30 port 22: connection refused","bytes_up":0,"bytes_down":0,"duration_ms":2}`
	lineEvent = `{"time":"2025-06-01T12:00:03+02:00","level":"INFO","msg":"policy loaded","sandbox":"s","path":"/run/doorman/s/policy","mode":"allowlist","entries":2}`
)

func writeLog(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadFile(t *testing.T) {
	full := lineAllow + "\n" + lineEvent + "\n" + lineDeny + "\n" + lineError + "\n"
	partial := lineDeny[:40] // a line still being written
	path := writeLog(t, full, partial)

	all, off, err := ReadFile(path, Filter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("ReadFile: %d decisions, %v", len(all), err)
	}
	if off != int64(len(full)) {
		t.Errorf("offset %d, want %d (the end of the last complete line)", off, len(full))
	}
	denied, _, _ := ReadFile(path, Filter{Denied: true})
	if len(denied) != 1 || denied[0].Name != "evil.example.test" {
		t.Errorf("--denied: %+v", denied)
	}
	// The denial's own time (12:00:01.456+02:00) is included, a
	// millisecond later is not.
	since := time.Date(2025, 6, 1, 10, 0, 1, 456e6, time.UTC)
	recent, _, _ := ReadFile(path, Filter{Since: since})
	if len(recent) != 2 || recent[0].Verdict != Deny {
		t.Errorf("since the denial: %d decisions, want 2", len(recent))
	}
	recent, _, _ = ReadFile(path, Filter{Since: since.Add(time.Millisecond)})
	if len(recent) != 1 || recent[0].Verdict != Error {
		t.Errorf("since just after the denial: %d decisions, want 1", len(recent))
	}
	if got, _, _ := ReadFile(path, Filter{Since: since, Denied: true}); len(got) != 1 {
		t.Errorf("since and denied: %d decisions, want 1", len(got))
	}
	if got := Last(all, 2); len(got) != 2 || got[1].Verdict != Error {
		t.Errorf("Last 2: %+v", got)
	}
	if got := Last(all, 0); len(got) != 3 {
		t.Errorf("Last 0: %d", len(got))
	}

	c, err := CountFile(path, time.Time{})
	if err != nil || c != (Counts{Allowed: 1, Denied: 1, Errors: 1}) {
		t.Errorf("CountFile: %+v, %v", c, err)
	}
	c, _ = CountFile(path, since)
	if c != (Counts{Denied: 1, Errors: 1}) {
		t.Errorf("CountFile since: %+v", c)
	}

	none, off, err := ReadFile(filepath.Join(t.TempDir(), "missing.log"), Filter{})
	if err != nil || len(none) != 0 || off != 0 {
		t.Errorf("missing log: %v, %d, %v", none, off, err)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct{ line, want string }{
		{lineAllow, "2025-06-01 12:00:00.123 allow tls     api.example.test 203.0.113.10:443 rule api.example.test (up 517 B, down 4.1 kB, 120ms)"},
		{lineDeny, "2025-06-01 12:00:01.456 deny  http    evil.example.test 203.0.113.20:80 name not allowed"},
		{lineError, "2025-06-01 12:00:02.000 error unknown (no name) 203.0.113.30:22 upstream failed: dial 203.0.113.30 port 22: connection refused"},
	}
	for _, tt := range tests {
		d, ok := Parse([]byte(tt.line))
		if !ok {
			t.Fatalf("parse %s", tt.line)
		}
		if got := Format(d); got != tt.want {
			t.Errorf("Format\n got %q\nwant %q", got, tt.want)
		}
	}
	ech, _ := Parse([]byte(strings.Replace(lineAllow, `"name":"api.example.test",`, `"name":"api.example.test","ech":true,`, 1)))
	if got, want := Format(ech), " allow tls     api.example.test (ECH) 203.0.113.10:443 rule api.example.test (up"; !ech.ECH || !strings.Contains(got, want) {
		t.Errorf("a hello with ECH: %q (ECH %v), want it to contain %q", got, ech.ECH, want)
	}
	open, _ := Parse([]byte(strings.Replace(strings.Replace(lineAllow, `"rule":"api.example.test"`, `"rule":""`, 1), "name allowed", "mode open", 1)))
	if got := Format(open); !strings.Contains(got, " 203.0.113.10:443 mode open (up") {
		t.Errorf("mode open: %q", got)
	}
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 4_120_000: "4.1 MB", 7e12: "7.0 TB", 7e15: "7000.0 TB"} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
	for ms, want := range map[float64]string{0.3: "300µs", 120.4: "120ms", 61234: "1m1.2s"} {
		if got := duration(ms); got != want {
			t.Errorf("duration(%v) = %q, want %q", ms, got, want)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"15m":                       now.Add(-15 * time.Minute),
		"90s":                       now.Add(-90 * time.Second),
		"1h30m":                     now.Add(-90 * time.Minute),
		"2d":                        now.Add(-48 * time.Hour),
		"0.5d":                      now.Add(-12 * time.Hour),
		"2025-05-31T08:00:00Z":      time.Date(2025, 5, 31, 8, 0, 0, 0, time.UTC),
		"2025-05-31T10:00:00+02:00": time.Date(2025, 5, 31, 8, 0, 0, 0, time.UTC),
		"2025-05-31 08:00:00":       time.Date(2025, 5, 31, 8, 0, 0, 0, time.Local),
		"2025-05-31":                time.Date(2025, 5, 31, 0, 0, 0, 0, time.Local),
	} {
		got, err := ParseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "-5m", "5", "-1d"} {
		if got, err := ParseSince(in, now); err == nil {
			t.Errorf("ParseSince(%q) = %v, want an error", in, got)
		} else if !strings.Contains(err.Error(), "--since") {
			t.Errorf("ParseSince(%q) error %q does not name the flag", in, err)
		}
	}
}
