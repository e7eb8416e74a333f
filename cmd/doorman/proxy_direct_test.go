package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseAllowDirect(t *testing.T) {
	got, err := parseAllowDirect([]string{"203.0.113.7:5432", "198.51.100.0/24", "[2001:db8::1]:443"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].String() != "203.0.113.7:5432" || got[1].String() != "198.51.100.0/24" {
		t.Errorf("parsed %v", got)
	}
	for _, bad := range []string{"db.example.com:5432", "203.0.113.7:99999", "*.example.com"} {
		_, err := parseAllowDirect([]string{bad})
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: want an error naming it, got %v", bad, err)
		}
	}
}

// A bad --allow-direct is a usage error: the proxy does not start.
func TestProxyRejectsBadAllowDirect(t *testing.T) {
	var stderr bytes.Buffer
	code := runProxy([]string{"--sandbox", "sb", "--policy", "/nonexistent", "--listen", "127.0.0.1:0", "--allow-direct", "db.example.com"}, &stderr, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "db.example.com") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
