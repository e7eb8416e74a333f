package conf

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestNewPolicy(t *testing.T) {
	p, err := NewPolicy(ModeAllowlist, []string{"API.example.com", "*.github.com:443", "10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != ModeAllowlist || len(p.Entries) != 3 {
		t.Fatalf("got %v", p)
	}
	if got, want := strings.Join(p.Hosts(), " "), "api.example.com *.github.com:443 10.0.0.0/8"; got != want {
		t.Errorf("Hosts() = %q, want %q", got, want)
	}
	if got, want := p.String(), "allowlist [api.example.com *.github.com:443 10.0.0.0/8]"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if p.Entries[0].Raw != "API.example.com" {
		t.Errorf("Raw = %q, want the entry as written", p.Entries[0].Raw)
	}
}

func TestNewPolicyEmptyAndModes(t *testing.T) {
	for _, mode := range []Mode{ModeNone, ModeAllowlist, ModeOpen} {
		p, err := NewPolicy(mode, nil)
		if err != nil {
			t.Fatalf("NewPolicy(%q, nil): %v", mode, err)
		}
		if _, ok := p.MatchName("example.com", 443); ok {
			t.Errorf("empty %s policy matches a name", mode)
		}
		if _, ok := p.MatchAddr(netip.MustParseAddr("203.0.113.7"), 443); ok {
			t.Errorf("empty %s policy matches an address", mode)
		}
		// Entries are kept in every mode.
		q, err := NewPolicy(mode, []string{"example.com"})
		if err != nil {
			t.Fatalf("NewPolicy(%q, [example.com]): %v", mode, err)
		}
		if len(q.Entries) != 1 {
			t.Errorf("mode %s lost its entries: %v", mode, q)
		}
	}
}

func TestNewPolicyErrors(t *testing.T) {
	bad := []string{"x.com:0", "*", "https://x.com/"}
	p, err := NewPolicy(ModeAllowlist, append([]string{"ok.example.com"}, bad...))
	if p != nil {
		t.Errorf("NewPolicy returned %v with an error; want nil", p)
	}
	if err == nil {
		t.Fatal("NewPolicy accepted invalid entries")
	}
	// Every bad entry is reported, each as its own *EntryError.
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %T is not joined", err)
	}
	errs := joined.Unwrap()
	if len(errs) != len(bad) {
		t.Fatalf("got %d errors, want %d: %v", len(errs), len(bad), err)
	}
	for i, e := range errs {
		checkEntryError(t, e, bad[i], "")
	}

	p, err = NewPolicy("allow", []string{"x.com", "*"})
	if p != nil || err == nil {
		t.Fatalf("NewPolicy with a bad mode = %v, %v", p, err)
	}
	for _, want := range []string{`invalid mode "allow"`, `"*": a bare * is not allowed`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	// Modes are spelled canonically in a Policy; ParseMode folds case.
	if _, err := NewPolicy("OPEN", nil); err == nil {
		t.Error(`NewPolicy("OPEN") accepted a non-canonical mode`)
	}
	var ee *EntryError
	if _, err := NewPolicy(ModeOpen, []string{""}); !errors.As(err, &ee) {
		t.Errorf("NewPolicy with an empty entry: %v, want an *EntryError", err)
	}
}

func TestDenyAll(t *testing.T) {
	p := DenyAll()
	if p.Mode != ModeNone || len(p.Entries) != 0 {
		t.Errorf("DenyAll() = %v", p)
	}
	q, _ := NewPolicy(ModeNone, nil)
	if !p.Equal(q) {
		t.Errorf("DenyAll() != NewPolicy(none, nil)")
	}
	if p == DenyAll() {
		t.Error("DenyAll returns a shared policy")
	}
}

func TestPolicyMatch(t *testing.T) {
	p, err := NewPolicy(ModeAllowlist, []string{
		"api.example.com:443",
		"*.example.com",
		"api.example.com",
		"203.0.113.0/24:443",
		"[2001:db8::/32]:8000-8999",
		"198.51.100.7",
	})
	if err != nil {
		t.Fatal(err)
	}
	names := []struct {
		name      string
		port      uint16
		wantEntry string // "" for no match
	}{
		{"api.example.com", 443, "api.example.com:443"}, // first match wins
		{"api.example.com", 80, "*.example.com"},
		{"www.example.com", 80, "*.example.com"},
		{"example.com", 443, ""},
		{"api.example.org", 443, ""},
		{"203.0.113.7", 443, ""},
	}
	for _, tt := range names {
		e, ok := p.MatchName(tt.name, tt.port)
		if ok != (tt.wantEntry != "") || (ok && e.String() != tt.wantEntry) {
			t.Errorf("MatchName(%q, %d) = %v, %v; want %q", tt.name, tt.port, e, ok, tt.wantEntry)
		}
	}
	addrs := []struct {
		addr      string
		port      uint16
		wantEntry string
	}{
		{"203.0.113.7", 443, "203.0.113.0/24:443"},
		{"::ffff:203.0.113.7", 443, "203.0.113.0/24:443"},
		{"203.0.113.7", 80, ""},
		{"2001:db8::5", 8080, "[2001:db8::/32]:8000-8999"},
		{"2001:db8::5", 443, ""},
		{"198.51.100.7", 22, "198.51.100.7"},
		{"198.51.100.8", 22, ""},
	}
	for _, tt := range addrs {
		e, ok := p.MatchAddr(netip.MustParseAddr(tt.addr), tt.port)
		if ok != (tt.wantEntry != "") || (ok && e.String() != tt.wantEntry) {
			t.Errorf("MatchAddr(%s, %d) = %v, %v; want %q", tt.addr, tt.port, e, ok, tt.wantEntry)
		}
	}
	// Matching ignores the mode.
	q := &Policy{Mode: ModeNone, Entries: p.Entries}
	if _, ok := q.MatchName("www.example.com", 443); !ok {
		t.Error("MatchName looked at the mode")
	}
	// A nil policy matches nothing.
	var nilPolicy *Policy
	if _, ok := nilPolicy.MatchName("www.example.com", 443); ok {
		t.Error("nil policy matched a name")
	}
	if _, ok := nilPolicy.MatchAddr(netip.MustParseAddr("198.51.100.7"), 443); ok {
		t.Error("nil policy matched an address")
	}
}

func TestPolicyEqual(t *testing.T) {
	mk := func(mode Mode, entries ...string) *Policy {
		t.Helper()
		p, err := NewPolicy(mode, entries)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := mk(ModeAllowlist, "Example.com.", "10.0.0.0/8:443")
	tests := []struct {
		b    *Policy
		want bool
	}{
		{mk(ModeAllowlist, "example.com", "10.0.0.0/8:443"), true},
		{mk(ModeAllowlist, "example.com", "[::ffff:10.0.0.0/104]:443"), true},
		{mk(ModeOpen, "example.com", "10.0.0.0/8:443"), false},
		{mk(ModeAllowlist, "10.0.0.0/8:443", "example.com"), false},
		{mk(ModeAllowlist, "example.com"), false},
		{mk(ModeAllowlist, "example.com", "10.0.0.0/8"), false},
		{mk(ModeAllowlist, "*.example.com", "10.0.0.0/8:443"), false},
		{nil, false},
	}
	for i, tt := range tests {
		if got := a.Equal(tt.b); got != tt.want {
			t.Errorf("%d: %v.Equal(%v) = %v, want %v", i, a, tt.b, got, tt.want)
		}
	}
	var n1, n2 *Policy
	if !n1.Equal(n2) {
		t.Error("nil != nil")
	}
	if n1.Equal(a) {
		t.Error("nil == non-nil")
	}
	if !(&Policy{Mode: ModeNone}).Equal(&Policy{Mode: ModeNone, Entries: []Entry{}}) {
		t.Error("nil and empty entry slices differ")
	}
}
