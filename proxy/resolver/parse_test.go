package resolver

import (
	"net/netip"
	"testing"
)

func TestParseServer(t *testing.T) {
	good := []struct{ in, want string }{
		{"203.0.113.53", "203.0.113.53:53"},
		{"203.0.113.53:5353", "203.0.113.53:5353"},
		{" 203.0.113.53:53 ", "203.0.113.53:53"},
		{"2001:db8::53", "[2001:db8::53]:53"},
		{"[2001:db8::53]:53", "[2001:db8::53]:53"},
		{"[2001:db8::53]:5353", "[2001:db8::53]:5353"},
		{"[2001:db8::53]", "[2001:db8::53]:53"},
		{"::ffff:203.0.113.53", "203.0.113.53:53"},
		{"[::ffff:203.0.113.53]:54", "203.0.113.53:54"},
		// The proxy runs in the host's namespace: the host's own stub
		// is reachable from there.
		{"127.0.0.53", "127.0.0.53:53"},
		{"203.0.113.53:65535", "203.0.113.53:65535"},
	}
	for _, tc := range good {
		got, err := ParseServer(tc.in)
		if err != nil || got != netip.MustParseAddrPort(tc.want) {
			t.Errorf("ParseServer(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	const want = "; want addr or addr:port, such as 203.0.113.53, 203.0.113.53:5353, 2001:db8::53 or [2001:db8::53]:5353"
	bad := []struct{ in, err string }{
		{"", `"": empty`},
		{"   ", `"": empty`},
		{"dns.example", `"dns.example": not an IP address (name the server by its address)`},
		{"dns.example:53", `"dns.example:53": "dns.example" is not an IP address (name the server by its address)`},
		{"203.0.113.53:", `"203.0.113.53:": the port after the colon is empty`},
		{"203.0.113.53:0", `"203.0.113.53:0": port "0" is not a number from 1 to 65535`},
		{"203.0.113.53:65536", `"203.0.113.53:65536": port "65536" is not a number from 1 to 65535`},
		{"203.0.113.53:dns", `"203.0.113.53:dns": port "dns" is not a number from 1 to 65535`},
		{"203.0.113.53:-1", `"203.0.113.53:-1": port "-1" is not a number from 1 to 65535`},
		{"203.0.113.999", `"203.0.113.999": not an IP address (name the server by its address)`},
		{"2001:db8::53:5353x", `"2001:db8::53:5353x": not an IP address (an IPv6 address with a port goes in brackets)`},
		{"[2001:db8::53]:", `"[2001:db8::53]:": the port after the colon is empty`},
		{"[203.0.113.53]:53", `"[203.0.113.53]:53": brackets are for IPv6 addresses`},
		{"[203.0.113.53]", `"[203.0.113.53]": "203.0.113.53" in brackets is not an IPv6 address`},
		{"[dns.example]", `"[dns.example]": "dns.example" in brackets is not an IPv6 address`},
		{"203.0.113.53:53:53", `"203.0.113.53:53:53": not an IP address (an IPv6 address with a port goes in brackets)`},
		{"[2001:db8::53", `"[2001:db8::53": not an IP address with a port`},
		{"0.0.0.0", `"0.0.0.0": the unspecified address is no server's`},
		{"[::]:53", `"[::]:53": the unspecified address is no server's`},
		{"224.0.0.251:5353", `"224.0.0.251:5353": a multicast address is no server's`},
		{"fe80::1%eth0", `"fe80::1%eth0": an address with a zone is not supported`},
		{"[fe80::1%eth0]:53", `"[fe80::1%eth0]:53": an address with a zone is not supported`},
		{"203.0.113.53,198.51.100.53", `"203.0.113.53,198.51.100.53": not an IP address (name the server by its address)`},
	}
	for _, tc := range bad {
		got, err := ParseServer(tc.in)
		if err == nil || err.Error() != tc.err+want {
			t.Errorf("ParseServer(%q) = %v, %v;\nwant the error %s", tc.in, got, err, tc.err+want)
		}
	}
}

// FuzzParseServer: whatever ParseServer accepts is a server address that
// reads back as itself.
func FuzzParseServer(f *testing.F) {
	for _, s := range []string{"203.0.113.53", "203.0.113.53:5353", "[2001:db8::53]:53", "2001:db8::53", "[2001:db8::53]", "dns.example", "fe80::1%eth0", "::ffff:203.0.113.53"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := ParseServer(s)
		if err != nil {
			if ap.IsValid() {
				t.Fatalf("ParseServer(%q): error %v with a valid address %v", s, err, ap)
			}
			return
		}
		if !ap.IsValid() || ap.Port() == 0 || ap.Addr().IsUnspecified() || ap.Addr().IsMulticast() || ap.Addr().Is4In6() {
			t.Fatalf("ParseServer(%q) = %v: not a server address", s, ap)
		}
		again, err := ParseServer(ap.String())
		if err != nil || again != ap {
			t.Fatalf("ParseServer(%q) = %v, which reads back as %v, %v", s, ap, again, err)
		}
	})
}
