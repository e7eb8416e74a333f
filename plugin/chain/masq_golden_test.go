package chain

import (
	"encoding/hex"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
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
		for _, e := range masqExprs(tc.bridge, netip.MustParsePrefix(tc.prefix)) {
			data, err := expr.Marshal(byte(nftables.TableFamilyINet), e)
			if err != nil {
				t.Fatalf("marshal %T: %v", e, err)
			}
			fmt.Fprintf(&b, "    %-10s %s\n", strings.TrimPrefix(fmt.Sprintf("%T", e), "*expr."), hex.EncodeToString(data))
		}
	}
	const path = "testdata/masq.golden"
	if *updateGolden {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("masquerade rules differ from %s:\n%s\nwant\n%s", path, got, want)
	}
}
