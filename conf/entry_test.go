package conf

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func TestParseEntryValid(t *testing.T) {
	pfx := netip.MustParsePrefix
	tests := []struct {
		in        string
		kind      Kind
		name      string
		prefix    netip.Prefix
		ports     PortRange
		canonical string
	}{
		// Names: case, IDNA, trailing dot, underscores, hyphens.
		{in: "example.com", kind: KindName, name: "example.com", canonical: "example.com"},
		{in: "  Example.COM  ", kind: KindName, name: "example.com", canonical: "example.com"},
		{in: "example.com.", kind: KindName, name: "example.com", canonical: "example.com"},
		{in: "localhost", kind: KindName, name: "localhost", canonical: "localhost"},
		{in: "bücher.de", kind: KindName, name: "xn--bcher-kva.de", canonical: "xn--bcher-kva.de"},
		{in: "BÜCHER.de", kind: KindName, name: "xn--bcher-kva.de", canonical: "xn--bcher-kva.de"},
		{in: "xn--bcher-kva.de", kind: KindName, name: "xn--bcher-kva.de", canonical: "xn--bcher-kva.de"},
		{in: "ＥＸＡＭＰＬＥ．ｃｏｍ", kind: KindName, name: "example.com", canonical: "example.com"},
		{in: "example。com", kind: KindName, name: "example.com", canonical: "example.com"},
		{in: "_acme-challenge.example.com", kind: KindName, name: "_acme-challenge.example.com", canonical: "_acme-challenge.example.com"},
		{in: "r3---sn-abc.googlevideo.com", kind: KindName, name: "r3---sn-abc.googlevideo.com", canonical: "r3---sn-abc.googlevideo.com"},
		{in: "foo-.blogspot.com", kind: KindName, name: "foo-.blogspot.com", canonical: "foo-.blogspot.com"},
		{in: "mode", kind: KindName, name: "mode", canonical: "mode"},
		{in: "3com.com", kind: KindName, name: "3com.com", canonical: "3com.com"},
		{in: "1.2.3.example", kind: KindName, name: "1.2.3.example", canonical: "1.2.3.example"},
		{in: strings.Repeat("a", 63) + ".com", kind: KindName, name: strings.Repeat("a", 63) + ".com", canonical: strings.Repeat("a", 63) + ".com"},
		{in: name253, kind: KindName, name: name253, canonical: name253},
		{in: name253 + ".", kind: KindName, name: name253, canonical: name253},
		// Names with ports.
		{in: "example.com:443", kind: KindName, name: "example.com", ports: PortRange{443, 443}, canonical: "example.com:443"},
		{in: "example.com:0443", kind: KindName, name: "example.com", ports: PortRange{443, 443}, canonical: "example.com:443"},
		{in: "example.com.:443", kind: KindName, name: "example.com", ports: PortRange{443, 443}, canonical: "example.com:443"},
		{in: "example.com:8000-8999", kind: KindName, name: "example.com", ports: PortRange{8000, 8999}, canonical: "example.com:8000-8999"},
		{in: "example.com:80-80", kind: KindName, name: "example.com", ports: PortRange{80, 80}, canonical: "example.com:80"},
		{in: "example.com:1-65535", kind: KindName, name: "example.com", ports: PortRange{1, 65535}, canonical: "example.com:1-65535"},
		{in: "mode:443", kind: KindName, name: "mode", ports: PortRange{443, 443}, canonical: "mode:443"},
		// Wildcards.
		{in: "*.example.com", kind: KindWildcard, name: "example.com", canonical: "*.example.com"},
		{in: "*.EXAMPLE.com.", kind: KindWildcard, name: "example.com", canonical: "*.example.com"},
		{in: "*.example.com:443", kind: KindWildcard, name: "example.com", ports: PortRange{443, 443}, canonical: "*.example.com:443"},
		{in: "*.bücher.de:8000-8999", kind: KindWildcard, name: "xn--bcher-kva.de", ports: PortRange{8000, 8999}, canonical: "*.xn--bcher-kva.de:8000-8999"},
		{in: "*.com", kind: KindWildcard, name: "com", canonical: "*.com"},
		{in: "*._tcp.example.com", kind: KindWildcard, name: "_tcp.example.com", canonical: "*._tcp.example.com"},
		// IPv4.
		{in: "203.0.113.7", kind: KindPrefix, prefix: pfx("203.0.113.7/32"), canonical: "203.0.113.7"},
		{in: "203.0.113.7/32", kind: KindPrefix, prefix: pfx("203.0.113.7/32"), canonical: "203.0.113.7"},
		{in: "203.0.113.7:443", kind: KindPrefix, prefix: pfx("203.0.113.7/32"), ports: PortRange{443, 443}, canonical: "203.0.113.7:443"},
		{in: "203.0.113.7:8000-8999", kind: KindPrefix, prefix: pfx("203.0.113.7/32"), ports: PortRange{8000, 8999}, canonical: "203.0.113.7:8000-8999"},
		{in: "10.0.0.0/8", kind: KindPrefix, prefix: pfx("10.0.0.0/8"), canonical: "10.0.0.0/8"},
		{in: "10.0.0.0/08", kind: KindPrefix, prefix: pfx("10.0.0.0/8"), canonical: "10.0.0.0/8"},
		{in: "10.0.0.0/8:443", kind: KindPrefix, prefix: pfx("10.0.0.0/8"), ports: PortRange{443, 443}, canonical: "10.0.0.0/8:443"},
		{in: "0.0.0.0/0", kind: KindPrefix, prefix: pfx("0.0.0.0/0"), canonical: "0.0.0.0/0"},
		// IPv6.
		{in: "2001:db8::1", kind: KindPrefix, prefix: pfx("2001:db8::1/128"), canonical: "2001:db8::1"},
		{in: "2001:DB8:0::1", kind: KindPrefix, prefix: pfx("2001:db8::1/128"), canonical: "2001:db8::1"},
		{in: "2001:db8::1:443", kind: KindPrefix, prefix: pfx("2001:db8::1:443/128"), canonical: "2001:db8::1:443"},
		{in: "2001:db8::/32", kind: KindPrefix, prefix: pfx("2001:db8::/32"), canonical: "2001:db8::/32"},
		{in: "[2001:db8::1]", kind: KindPrefix, prefix: pfx("2001:db8::1/128"), canonical: "2001:db8::1"},
		{in: "[2001:db8::1]:443", kind: KindPrefix, prefix: pfx("2001:db8::1/128"), ports: PortRange{443, 443}, canonical: "[2001:db8::1]:443"},
		{in: "[2001:db8::/32]:443", kind: KindPrefix, prefix: pfx("2001:db8::/32"), ports: PortRange{443, 443}, canonical: "[2001:db8::/32]:443"},
		{in: "[2001:db8::/32]:8000-8999", kind: KindPrefix, prefix: pfx("2001:db8::/32"), ports: PortRange{8000, 8999}, canonical: "[2001:db8::/32]:8000-8999"},
		{in: "::/0", kind: KindPrefix, prefix: pfx("::/0"), canonical: "::/0"},
		{in: "::1", kind: KindPrefix, prefix: pfx("::1/128"), canonical: "::1"},
		// IPv4-mapped IPv6 becomes IPv4.
		{in: "::ffff:203.0.113.7", kind: KindPrefix, prefix: pfx("203.0.113.7/32"), canonical: "203.0.113.7"},
		{in: "[::ffff:203.0.113.7]:443", kind: KindPrefix, prefix: pfx("203.0.113.7/32"), ports: PortRange{443, 443}, canonical: "203.0.113.7:443"},
		{in: "::ffff:10.0.0.0/104", kind: KindPrefix, prefix: pfx("10.0.0.0/8"), canonical: "10.0.0.0/8"},
		{in: "::ffff:0:0/96", kind: KindPrefix, prefix: pfx("0.0.0.0/0"), canonical: "0.0.0.0/0"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, err := ParseEntry(tt.in)
			if err != nil {
				t.Fatalf("ParseEntry(%q): %v", tt.in, err)
			}
			if e.Raw != strings.TrimSpace(tt.in) {
				t.Errorf("Raw = %q, want %q", e.Raw, strings.TrimSpace(tt.in))
			}
			if e.Kind != tt.kind || e.Name != tt.name || e.Prefix != tt.prefix || e.Ports != tt.ports {
				t.Errorf("got {%v %q %v %v}, want {%v %q %v %v}",
					e.Kind, e.Name, e.Prefix, e.Ports, tt.kind, tt.name, tt.prefix, tt.ports)
			}
			if got := e.String(); got != tt.canonical {
				t.Errorf("String() = %q, want %q", got, tt.canonical)
			}
			// The canonical form parses back to an equal entry with the
			// same canonical form.
			back, err := ParseEntry(e.String())
			if err != nil {
				t.Fatalf("re-parse of %q: %v", e.String(), err)
			}
			if !back.Equal(e) || back.String() != e.String() {
				t.Errorf("re-parse of %q = %+v, want %+v", e.String(), back, e)
			}
		})
	}
}

// name253 is a name exactly 253 bytes long, the most DNS allows.
var name253 = strings.Repeat(strings.Repeat("a", 62)+".", 4)[:252] + "b"

func TestParseEntryErrors(t *testing.T) {
	tests := []struct {
		in     string
		reason string // a substring of the reason
	}{
		{"", "empty entry"},
		{"   ", "empty entry"},
		{"*", "a bare * is not allowed (use mode: open)"},
		{"*:443", "a bare * is not allowed (use mode: open)"},
		{"*.", "empty label"},
		{"*.:443", "empty label"},
		{"a*b.com", "wildcard only allowed as the whole first label"},
		{"*example.com", "wildcard only allowed as the whole first label"},
		{"**.example.com", "wildcard only allowed as the whole first label"},
		{"*.*.com", "wildcard only allowed as the whole first label"},
		{"a.*.com", "wildcard only allowed as the whole first label"},
		{"example.*", "wildcard only allowed as the whole first label"},
		{"*.1.2.3.4", "a wildcard cannot cover an IP address"},
		{"x.com:0", "port out of range"},
		{"x.com:65536", "port out of range"},
		{"x.com:99999999999999999999", "port out of range"},
		{"x.com:0-80", "port out of range"},
		{"x.com:9-3", "port range reversed"},
		{"x.com:", "empty port"},
		{"x.com:https", `bad port "https"`},
		{"x.com:+443", `bad port "+443"`},
		{"x.com:-443", `bad port "-443"`},
		{"x.com:443-", `bad port "443-"`},
		{"x.com:1-2-3", `bad port "1-2-3"`},
		{"x.com:1:2", "more than one ':'"},
		{":443", "missing host before ':'"},
		{"a b.com", "whitespace inside the entry"},
		{"a.com\tb.com", "whitespace inside the entry"},
		{"a.com,b.com", "bad character ','"},
		{"x..com", "empty label"},
		{".x.com", "empty label"},
		{"x.com..", "empty label"},
		{".", "empty label"},
		{"xn--.com", "empty label"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{name253 + "c", "longer than 253"},
		{"https://x.com/", "give the host, not a URL (e.g. x.com)"},
		{"http://x.com:8080/path", "give the host, not a URL (e.g. x.com:8080)"},
		{"x.com/path", "give the host, not a URL"},
		{"x.com?q", "give the host, not a URL"},
		{"user@x.com", "give the host, not a URL"},
		{"x.com#frag", "give the host, not a URL"},
		{"ex!ample.com", "bad character '!'"},
		{"exa\x00mple.com", "bad character"},
		{"xn--abc.com", "not a valid international name"},
		{"a\u200db.com", "not a valid international name"},
		{"x\xffy.com", "not valid UTF-8"},
		{"x\ufffdy.com", "not a valid international name"},
		{"１.２.３.４", "ends in a numeric label"},
		{"fe80::1%eth0", "zone (%eth0) is not allowed"},
		{"[fe80::1%eth0]:443", "zone (%eth0) is not allowed"},
		{"10.0.0.1%eth0", "zone (%eth0) is not allowed"},
		{"10.1.2.3/8", "host bits set in prefix (did you mean 10.0.0.0/8"},
		{"2001:db8::1/32", "host bits set in prefix (did you mean 2001:db8::/32"},
		{"10.0.0.0/33", "prefix length 33 out of range (0-32)"},
		{"2001:db8::/129", "prefix length 129 out of range (0-128)"},
		{"10.0.0.0/", `bad prefix length ""`},
		{"10.0.0.0/x", `bad prefix length "x"`},
		{"10.0.0.0/-1", `bad prefix length "-1"`},
		{"1.2.3", "not a valid IP address"},
		{"256.1.1.1", "not a valid IP address"},
		{"010.0.0.1", "not a valid IP address"},
		{"0x7f.1", "not a valid IP address"},
		{"123", "not a valid IP address"},
		{"1.2.3.4.", "not a valid IP address"},
		{"2001:db8::g", "not a valid IP address"},
		{"2001:db8:::1", "not a valid IP address"},
		{"[10.0.0.1]:443", "brackets are only for IPv6 addresses (write 10.0.0.1:443)"},
		{"[10.0.0.0/8]", "brackets are only for IPv6 addresses (write 10.0.0.0/8)"},
		{"[x.com]:443", "brackets are only for IPv6 addresses"},
		{"[2001:db8::1", "missing ']'"},
		{"[2001:db8::1]443", "unexpected \"443\" after ']'"},
		{"[2001:db8::1]:", "empty port"},
		{"[2001:db8::1]:0", "port out of range"},
		{"[]:443", "empty brackets"},
		{"2001:db8::1]:443", "not a valid IP address"},
		{"2001:db8::/32:443", "an IPv6 address with a port goes in brackets"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, err := ParseEntry(tt.in)
			if err == nil {
				t.Fatalf("ParseEntry(%q) = %v, want an error", tt.in, e)
			}
			checkEntryError(t, err, tt.in, tt.reason)
		})
	}
}

// checkEntryError checks that err is an *EntryError naming entry (as
// trimmed) whose text holds reason.
func checkEntryError(t *testing.T, err error, entry, reason string) {
	t.Helper()
	var ee *EntryError
	if !errors.As(err, &ee) {
		t.Fatalf("error %v (%T) is not an *EntryError", err, err)
	}
	trimmed := strings.TrimSpace(entry)
	if ee.Entry != trimmed {
		t.Errorf("EntryError.Entry = %q, want %q", ee.Entry, trimmed)
	}
	msg := err.Error()
	if !strings.Contains(msg, strconv.Quote(trimmed)+": ") {
		t.Errorf("error %q does not name the entry %q", msg, trimmed)
	}
	if !strings.Contains(msg, reason) {
		t.Errorf("error %q does not say %q", msg, reason)
	}
}

func TestEntryMatchName(t *testing.T) {
	tests := []struct {
		entry string
		name  string
		port  uint16
		want  bool
	}{
		{"example.com", "example.com", 443, true},
		{"example.com", "example.com", 1, true},
		{"example.com", "www.example.com", 443, false},
		{"example.com", "example.org", 443, false},
		{"example.com", "badexample.com", 443, false},
		{"EXAMPLE.com.", "example.com", 80, true},
		{"example.com:443", "example.com", 443, true},
		{"example.com:443", "example.com", 80, false},
		{"example.com:8000-8999", "example.com", 7999, false},
		{"example.com:8000-8999", "example.com", 8000, true},
		{"example.com:8000-8999", "example.com", 8500, true},
		{"example.com:8000-8999", "example.com", 8999, true},
		{"example.com:8000-8999", "example.com", 9000, false},
		{"*.example.com", "a.example.com", 443, true},
		{"*.example.com", "a.b.example.com", 443, true},
		{"*.example.com", "a.b.c.d.example.com", 80, true},
		{"*.example.com", "example.com", 443, false},
		{"*.example.com", "badexample.com", 443, false},
		{"*.example.com", "a.badexample.com", 443, false},
		{"*.example.com", ".example.com", 443, false},
		{"*.example.com", "a.example.com.evil.net", 443, false},
		{"*.example.com", "com", 443, false},
		{"*.example.com", "", 443, false},
		{"*.example.com:443", "a.example.com", 443, true},
		{"*.example.com:443", "a.example.com", 8443, false},
		{"*.bücher.de", "www.xn--bcher-kva.de", 443, true},
		{"bücher.de", "xn--bcher-kva.de", 443, true},
		// IP entries never match names, even names that spell an address.
		{"203.0.113.7", "203.0.113.7", 443, false},
		{"10.0.0.0/8", "10.0.0.1", 443, false},
	}
	for _, tt := range tests {
		e, err := ParseEntry(tt.entry)
		if err != nil {
			t.Fatalf("ParseEntry(%q): %v", tt.entry, err)
		}
		if got := e.MatchName(tt.name, tt.port); got != tt.want {
			t.Errorf("ParseEntry(%q).MatchName(%q, %d) = %v, want %v", tt.entry, tt.name, tt.port, got, tt.want)
		}
	}
}

func TestEntryMatchAddr(t *testing.T) {
	tests := []struct {
		entry string
		addr  string
		port  uint16
		want  bool
	}{
		{"203.0.113.7", "203.0.113.7", 443, true},
		{"203.0.113.7", "203.0.113.8", 443, false},
		{"203.0.113.7", "::ffff:203.0.113.7", 443, true}, // unmapped first
		{"::ffff:203.0.113.7", "203.0.113.7", 443, true},
		{"203.0.113.7:443", "203.0.113.7", 443, true},
		{"203.0.113.7:443", "203.0.113.7", 80, false},
		{"203.0.113.7:8000-8999", "203.0.113.7", 8999, true},
		{"203.0.113.7:8000-8999", "203.0.113.7", 9000, false},
		{"10.0.0.0/8", "10.255.255.255", 1, true},
		{"10.0.0.0/8", "11.0.0.0", 1, false},
		{"10.0.0.0/8", "::ffff:10.1.2.3", 1, true},
		{"0.0.0.0/0", "198.51.100.1", 22, true},
		{"0.0.0.0/0", "2001:db8::1", 22, false},
		{"2001:db8::/32", "2001:db8:1::1", 443, true},
		{"2001:db8::/32", "2001:db9::1", 443, false},
		{"2001:db8::/32", "fe80::1%eth0", 443, false},
		{"fe80::/10", "fe80::1%eth0", 443, true}, // zone dropped
		{"[2001:db8::1]:443", "2001:db8::1", 443, true},
		{"[2001:db8::1]:443", "2001:db8::1", 80, false},
		{"::/0", "203.0.113.7", 443, false}, // mapped addresses are IPv4
		// Name entries never match addresses.
		{"example.com", "203.0.113.7", 443, false},
		{"*.example.com", "203.0.113.7", 443, false},
	}
	for _, tt := range tests {
		e, err := ParseEntry(tt.entry)
		if err != nil {
			t.Fatalf("ParseEntry(%q): %v", tt.entry, err)
		}
		a := netip.MustParseAddr(tt.addr)
		if got := e.MatchAddr(a, tt.port); got != tt.want {
			t.Errorf("ParseEntry(%q).MatchAddr(%v, %d) = %v, want %v", tt.entry, a, tt.port, got, tt.want)
		}
	}
	if (Entry{Kind: KindPrefix, Prefix: netip.MustParsePrefix("10.0.0.0/8")}).MatchAddr(netip.Addr{}, 443) {
		t.Error("MatchAddr of the zero Addr = true, want false")
	}
}

func TestEntryEqualIgnoresRaw(t *testing.T) {
	a, _ := ParseEntry("Example.COM.:0443")
	b, _ := ParseEntry("example.com:443")
	if !a.Equal(b) {
		t.Errorf("%+v and %+v differ", a, b)
	}
	c, _ := ParseEntry("example.com:444")
	if a.Equal(c) {
		t.Errorf("%+v and %+v are equal", a, c)
	}
	d, _ := ParseEntry("*.example.com:443")
	if a.Equal(d) {
		t.Errorf("name and wildcard entries are equal")
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindName: "name", KindWildcard: "wildcard", KindPrefix: "prefix", Kind(7): "Kind(7)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}
