package hostconf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
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

// FuzzParseLimits checks that ParseLimits never panics and that what it
// accepts is valid and encodes and decodes again to equal caps.
func FuzzParseLimits(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLimits(data)
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("accepted %q, which is not valid: %v", data, err)
		}
		again, err := json.Marshal(l)
		if err != nil {
			t.Fatalf("accepted %q, but it does not encode: %v", data, err)
		}
		back, err := ParseLimits(again)
		if err != nil || !reflect.DeepEqual(back, l) {
			t.Fatalf("%q: encodes to %s, which decodes to %+v, %v; want %+v", data, again, back, err, l)
		}
	})
}
