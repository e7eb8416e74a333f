package testnet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheckServerAddr(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		wantErr string // "" = accepted
	}{
		{"203.0.113.10", ""},
		{"2001:db8:100::10", ""},
		{"203.0.113.53", "DNS server"},
		{"2001:db8:100::54", "DNS server"},
		{"198.51.100.7", "outside the fake internet"},
		{"192.0.2.1", "outside the fake internet"},
		{"2001:db8:101::1", "outside the fake internet"},
		{"::ffff:203.0.113.10", "IPv4-mapped"},
		{"203.0.113.0", "network or broadcast"},
		{"203.0.113.255", "network or broadcast"},
	} {
		err := checkServerAddr(netip.MustParseAddr(tc.addr))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("checkServerAddr(%s) = %v, want accepted", tc.addr, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("checkServerAddr(%s) = %v, want an error mentioning %q", tc.addr, err, tc.wantErr)
		case err != nil && !strings.Contains(err.Error(), netip.MustParseAddr(tc.addr).String()):
			t.Errorf("checkServerAddr(%s) = %v: the error does not name the address", tc.addr, err)
		}
	}
}

func TestCheckHostName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"API.Example.Test.", "api.example.test"},
		{"a.b", "a.b"},
		{"", ""},
		{"*.example.test", ""},
		{"bad name.test", ""},
		{"a..b", ""},
	} {
		got, err := checkHostName(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("checkHostName(%q) = %q, want an error", tc.in, got)
			} else if tc.in != "" && !strings.Contains(err.Error(), tc.in) {
				t.Errorf("checkHostName(%q): error %q does not name the input", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("checkHostName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
