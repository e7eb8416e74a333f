package runner

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/doorman-net/doorman/enforce/nft/nfttest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/masq.golden from the rules the code builds now")

// TestMasqGolden pins the masquerade rules to the expressions, byte for
// byte as netlink attributes, that earlier releases installed.
func TestMasqGolden(t *testing.T) {
	var b strings.Builder
	for _, tc := range []struct {
		bridge string
		prefix string
	}{
		{"doorman-run0", "10.89.7.0/24"},
		{"br", "198.51.100.7/32"},
		{"a-fifteen-bytes", "0.0.0.0/0"},
		{"doorman-run0", "fd00:89:7::/64"},
		{"br", "2001:db8::1/128"},
		{"br", "2001:db8::/29"},
	} {
		fmt.Fprintf(&b, "masquerade %s from %s\n", tc.bridge, tc.prefix)
		nfttest.WriteExprs(t, &b, nftables.TableFamilyINet, masqExprs(tc.bridge, netip.MustParsePrefix(tc.prefix)))
	}
	nfttest.Compare(t, "testdata/masq.golden", b.String(), *updateGolden)
}
