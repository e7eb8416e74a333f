package main

import (
	"bytes"
	"fmt"
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

// --resolver takes every form resolver.ParseServer does, repeated in
// order; a bad one is a usage error naming the flag, the value and why.
func TestParseResolvers(t *testing.T) {
	got, err := parseResolvers([]string{"203.0.113.53", "[2001:db8::53]:5353", "198.51.100.53:53"})
	if err != nil || fmt.Sprint(got) != "[203.0.113.53:53 [2001:db8::53]:5353 198.51.100.53:53]" {
		t.Errorf("parseResolvers: %v, %v", got, err)
	}
	var stderr bytes.Buffer
	code := runProxy([]string{"--sandbox", "sb", "--policy", "/nonexistent", "--listen", "127.0.0.1:0", "--resolver", "203.0.113.53", "--resolver", "dns.example"}, &stderr, &stderr)
	const want = `doorman proxy: --resolver "dns.example": not an IP address (name the server by its address); want addr or addr:port, such as 203.0.113.53, 203.0.113.53:5353, 2001:db8::53 or [2001:db8::53]:5353` + "\n"
	if code != 1 || stderr.String() != want {
		t.Errorf("bad --resolver: exit %d, stderr %q; want 1, %q", code, stderr.String(), want)
	}
}
