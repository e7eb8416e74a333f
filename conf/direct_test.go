package conf

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseDirect(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"203.0.113.7:5432", "203.0.113.7:5432"},
		{" 198.51.100.0/24 ", "198.51.100.0/24"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"2001:db8::/64", "2001:db8::/64"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"10.0.0.0/8:8000-8999", "10.0.0.0/8:8000-8999"},
	} {
		d, err := ParseDirect(tc.in)
		if err != nil || d.String() != tc.want {
			t.Errorf("ParseDirect(%q) = %v, %v; want %s", tc.in, d, err, tc.want)
		}
		if e := d.Entry(); e.Kind != KindPrefix || e.Prefix != d.Prefix || e.Ports != d.Ports || e.Raw != tc.want {
			t.Errorf("%v as an entry: %+v", d, e)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"db.example.com:5432", `"db.example.com:5432": only an IP address or CIDR (with an optional port) can bypass the proxy`},
		{"*.example.com", `"*.example.com": only an IP address or CIDR (with an optional port) can bypass the proxy`},
		{"203.0.113.7:99999", `"203.0.113.7:99999": port out of range: 99999 (want 1-65535)`},
		{"", `"": empty entry`},
	} {
		_, err := ParseDirect(tc.in)
		var ee *EntryError
		if err == nil || err.Error() != tc.want || !errors.As(err, &ee) {
			t.Errorf("ParseDirect(%q): %v; want %s", tc.in, err, tc.want)
		}
	}
}

// A Direct is its canonical string in JSON; a bad one does not decode.
func TestDirectJSON(t *testing.T) {
	var got []Direct
	if err := json.Unmarshal([]byte(`["10.0.0.5:5432","2001:db8::/64"]`), &got); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(got)
	if err != nil || string(data) != `["10.0.0.5:5432","2001:db8::/64"]` {
		t.Errorf("round trip: %s, %v", data, err)
	}
	if err := json.Unmarshal([]byte(`["db.example"]`), &got); err == nil || !strings.Contains(err.Error(), `"db.example"`) {
		t.Errorf("a name in JSON: %v", err)
	}
}

// FuzzParseDirect checks that ParseDirect accepts exactly the prefix
// entries ParseEntry accepts, names the entry in its errors, and that an
// accepted Direct's canonical form parses back to an equal one.
func FuzzParseDirect(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDirect(s)
		e, entryErr := ParseEntry(s)
		if err != nil {
			var ee *EntryError
			if !errors.As(err, &ee) || !strings.HasPrefix(err.Error(), strconv.Quote(strings.TrimSpace(s))+": ") {
				t.Fatalf("ParseDirect(%q) error %q does not name the entry", s, err)
			}
			if entryErr == nil && e.Kind == KindPrefix {
				t.Fatalf("ParseDirect(%q) refuses a prefix entry: %v", s, err)
			}
			return
		}
		if entryErr != nil || e.Kind != KindPrefix || e.Prefix != d.Prefix || e.Ports != d.Ports {
			t.Fatalf("ParseDirect(%q) = %v, but ParseEntry gives %+v, %v", s, d, e, entryErr)
		}
		back, err := ParseDirect(d.String())
		if err != nil || back != d {
			t.Fatalf("%q: canonical %q parses to %v, %v", s, d.String(), back, err)
		}
		text, _ := d.MarshalText()
		var u Direct
		if err := u.UnmarshalText(text); err != nil || u != d {
			t.Fatalf("%q: text %q unmarshals to %v, %v", s, text, u, err)
		}
	})
}
