package conf

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/.

// FuzzParseEntry checks that ParseEntry never panics, that its errors name
// the entry, and that an accepted entry's canonical form parses back to an
// equal entry with the same canonical form.
func FuzzParseEntry(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEntry(s)
		if err != nil {
			var ee *EntryError
			if !errors.As(err, &ee) || ee.Entry != strings.TrimSpace(s) ||
				!strings.HasPrefix(err.Error(), strconv.Quote(strings.TrimSpace(s))+": ") {
				t.Fatalf("ParseEntry(%q) error %q does not name the entry", s, err)
			}
			return
		}
		checkEntryRoundTrip(t, e)
		// Matching must not panic, and an entry matches what it names.
		switch e.Kind {
		case KindName:
			if !e.MatchName(e.Name, e.Ports.Lo) {
				t.Fatalf("%v does not match its own name", e)
			}
		case KindWildcard:
			if !e.MatchName("x."+e.Name, e.Ports.Hi) || e.MatchName(e.Name, e.Ports.Hi) {
				t.Fatalf("%v matches wrongly around its suffix", e)
			}
		case KindPrefix:
			if !e.MatchAddr(e.Prefix.Addr(), e.Ports.Lo) {
				t.Fatalf("%v does not match its own address", e)
			}
		}
		e.MatchAddr(netip.MustParseAddr("203.0.113.7"), 443)
		e.MatchName("example.com", 443)
	})
}

// checkEntryRoundTrip checks that e's canonical form re-parses equal and
// is a fixed point.
func checkEntryRoundTrip(t *testing.T, e Entry) {
	t.Helper()
	c := e.String()
	back, err := ParseEntry(c)
	if err != nil {
		t.Fatalf("canonical form %q of %q does not parse: %v", c, e.Raw, err)
	}
	if !back.Equal(e) {
		t.Fatalf("canonical form %q of %q parses to %+v, want %+v", c, e.Raw, back, e)
	}
	if c2 := back.String(); c2 != c {
		t.Fatalf("canonical form is not idempotent: %q -> %q -> %q", e.Raw, c, c2)
	}
	if e.Kind == KindPrefix && e.Prefix != e.Prefix.Masked() {
		t.Fatalf("%q: prefix %v is not masked", e.Raw, e.Prefix)
	}
	if e.Kind == KindPrefix && e.Prefix.Addr().Is4In6() && e.Prefix.Bits() >= 96 {
		t.Fatalf("%q: prefix %v is IPv4-mapped", e.Raw, e.Prefix)
	}
	if e.Kind != KindPrefix {
		if n, err := NormalizeName(e.Name); err != nil || n != e.Name {
			t.Fatalf("%q: name %q is not normalized (%q, %v)", e.Raw, e.Name, n, err)
		}
	}
}

// checkPolicyRoundTrip checks that p survives the file form and the JSON
// form, and that the file form is a fixed point.
func checkPolicyRoundTrip(t *testing.T, p *Policy) {
	t.Helper()
	if !p.Mode.valid() {
		t.Fatalf("policy with invalid mode %q", p.Mode)
	}
	for _, e := range p.Entries {
		checkEntryRoundTrip(t, e)
	}
	file := p.MarshalFile()
	q, err := ParseFile(file)
	if err != nil {
		t.Fatalf("MarshalFile output does not parse: %v\n%s", err, file)
	}
	if !q.Equal(p) {
		t.Fatalf("ParseFile(MarshalFile(p)) = %v, want %v", q, p)
	}
	if file2 := q.MarshalFile(); string(file2) != string(file) {
		t.Fatalf("MarshalFile is not a fixed point:\n%s\nvs\n%s", file, file2)
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseJSON(data)
	if err != nil || !r.Equal(p) {
		t.Fatalf("ParseJSON(json.Marshal(p)) = %v, %v; want %v", r, err, p)
	}
}

// FuzzParseJSON checks that ParseJSON never panics and that an accepted
// policy round-trips through the file and JSON forms.
func FuzzParseJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseJSON(data)
		if err != nil {
			if p != nil {
				t.Fatalf("ParseJSON returned a policy and an error")
			}
			return
		}
		checkPolicyRoundTrip(t, p)
	})
}

// FuzzParseFile checks that ParseFile never panics and that an accepted
// policy round-trips through the file and JSON forms.
func FuzzParseFile(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseFile(data)
		if err != nil {
			if p != nil {
				t.Fatalf("ParseFile returned a policy and an error")
			}
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("ParseFile error %q names no line", err)
			}
			return
		}
		checkPolicyRoundTrip(t, p)
	})
}
