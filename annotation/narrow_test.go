package annotation

import (
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
)

func TestNarrow(t *testing.T) {
	for _, tc := range []struct {
		granted, asked string // policy files' lines, ";"-separated
		want           string // the result's String
		dropped        []string
	}{
		{"*.example.com", "api.example.com", "allowlist [api.example.com]", nil},
		{"*.example.com:443", "api.example.com", "allowlist [api.example.com:443]", []string{"api.example.com (only api.example.com:443)"}},
		{"*.example.com", "*.api.example.com", "allowlist [*.api.example.com]", nil},
		{"*.api.example.com", "*.example.com", "allowlist [*.api.example.com]", []string{"*.example.com (only *.api.example.com)"}},
		{"*.example.com", "example.com", "allowlist []", []string{"example.com"}},
		{"example.com", "*.example.com", "allowlist []", []string{"*.example.com"}},
		{"api.example.com:8000-8999", "api.example.com:8500-9500", "allowlist [api.example.com:8500-8999]", []string{"api.example.com:8500-9500 (only api.example.com:8500-8999)"}},
		{"api.example.com:443", "api.example.com:80", "allowlist []", []string{"api.example.com:80"}},
		{"203.0.113.0/24", "203.0.113.7:443", "allowlist [203.0.113.7:443]", nil},
		{"203.0.113.7", "203.0.113.0/24", "allowlist [203.0.113.7]", []string{"203.0.113.0/24 (only 203.0.113.7)"}},
		{"203.0.113.0/24", "api.example.com", "allowlist []", []string{"api.example.com"}},
		{"api.example.com", "203.0.113.7", "allowlist []", []string{"203.0.113.7"}},
		{"mode: open", "api.example.com;10.0.0.0/8;0.0.0.0/0", "allowlist [0.0.0.0/0 api.example.com]", []string{"10.0.0.0/8"}},
		{"mode: none", "api.example.com", "none []", nil},
		{"api.example.com", "mode: none", "none []", nil},
		{"api.example.com", "mode: open", "allowlist [api.example.com]", nil},
		{"a.example.com;b.example.com", "mode: allowlist", "allowlist []", nil},
		// Rule sets refuse, never admit: the grant's stay.
		{"api.example.com;ruleset closed-book", "api.example.com", "allowlist [api.example.com] ruleset closed-book", nil},
		{"api.example.com;ruleset closed-book strip", "mode: none", "none [] ruleset closed-book strip", nil},
	} {
		g, err := conf.ParseFile([]byte(strings.ReplaceAll(tc.granted, ";", "\n")))
		if err != nil {
			t.Fatal(err)
		}
		a, err := conf.ParseFile([]byte(strings.ReplaceAll(tc.asked, ";", "\n")))
		if err != nil {
			t.Fatal(err)
		}
		got, dropped := Narrow(g, a)
		if got.String() != tc.want || !slices.Equal(dropped, tc.dropped) {
			t.Errorf("Narrow(%q, %q) = %v, dropped %q; want %v, %q", tc.granted, tc.asked, got, dropped, tc.want, tc.dropped)
		}
		// Narrowing never widens: whatever the result admits, granted
		// admits.
		for _, e := range got.Entries {
			if g.Mode == conf.ModeOpen {
				continue
			}
			if !slices.ContainsFunc(g.Entries, func(f conf.Entry) bool { return Covers(f, e) }) {
				t.Errorf("Narrow(%q, %q) admits %v beyond the grant", tc.granted, tc.asked, e)
			}
		}
	}
}
