package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPrefixMinus(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"10.0.0.0/8", "10.0.0.0/9", "10.128.0.0/9"},
		{"10.0.0.0/30", "10.0.0.1/32", "10.0.0.2/31 10.0.0.0/32"},
		{"10.0.0.0/8", "11.0.0.0/8", "10.0.0.0/8"},
		{"10.0.0.0/8", "0.0.0.0/0", ""},
		{"2001:db8::/32", "10.0.0.0/8", "2001:db8::/32"},
	} {
		var got []string
		for _, p := range prefixMinus(netip.MustParsePrefix(tc.a), netip.MustParsePrefix(tc.b)) {
			got = append(got, p.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s - %s = %v, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}
