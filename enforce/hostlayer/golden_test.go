package hostlayer

import (
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/enforce/nft/nfttest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/layer.golden from the layer the code builds now")

// TestLayerGolden pins both tables of the layer to the expressions, byte
// for byte as netlink attributes, and the elements that Apply installs:
// Check of a release compares the installed layer with what it would
// install, so a sandbox enforced by the previous release reads back as
// exactly this unless the layer itself changed (as with the frame shapes,
// the forward rule and the port isolation of issue 24: Check then reports
// the older layer until a second ADD or the hook applies it again).
func TestLayerGolden(t *testing.T) {
	mac, _ := net.ParseMAC("02:42:c6:33:64:02")
	routed := hostIface{name: "veth-r", index: 7, pin: Pin{HostIface: "veth-r", HostIndex: 7,
		Addrs: addrs("198.51.100.2", "2001:db8::2", "fe80::2")}}
	bridged := hostIface{name: "veth-b", index: 9, bridge: "br0", bridgeIndex: 3, mac: mac, peerMAC: mac, brnf4: true,
		isolated: true, isolationOwned: true,
		pin: Pin{HostIface: "veth-b", HostIndex: 9, MAC: mac, Addrs: addrs("203.0.113.2", "2001:db8:1::2", "fe80::42:c6ff:fe33:6402")}}
	specs := []struct {
		name   string
		spec   Spec
		ifaces []hostIface
	}{
		{"everything", Spec{Key: "sbx-a", HostIfaces: []string{"veth-r", "veth-b"}, AllowICMP: true,
			Resolvers: addrs("203.0.113.53", "::ffff:198.51.100.53", "2001:db8::53", "127.0.0.11"),
			AllowDirect: constEntries("203.0.113.0/28:5432", "203.0.113.0/28", "198.51.100.7:8000-8080",
				"[::ffff:198.51.100.0/120]:53", "2001:db8::/64", "[2001:db8:1::1]:1-65535", "0.0.0.0/0:853", "::/0")},
			[]hostIface{routed, bridged}},
		{"routed, nothing allowed", Spec{Key: "b", HostIfaces: []string{"veth-r"}}, []hostIface{routed}},
		{"bridged, no icmp", Spec{Key: "c", HostIfaces: []string{"veth-b"}, Resolvers: addrs("203.0.113.53"),
			AllowDirect: constEntries("198.51.100.0/24")}, []hostIface{bridged}},
		{"bridged, redirected", Spec{Key: "d", HostIfaces: []string{"veth-b"}, AllowDirect: constEntries("198.51.100.0/24:5432"),
			Redirect: Redirect{TCP4: 40001, TCP6: 40001, DNS4: 40003, DNS6: 40004, DNSResolvers: addrs("203.0.113.53", "2001:db8::53", "127.0.0.11")}},
			[]hostIface{bridged}},
	}
	var b strings.Builder
	for _, sp := range specs {
		s, err := sp.spec.normalized()
		if err != nil {
			t.Fatalf("%s: %v", sp.name, err)
		}
		fmt.Fprintf(&b, "spec %s\n", sp.name)
		for _, l := range layouts() {
			fmt.Fprintf(&b, "%s\n", l)
			for _, ss := range l.sets {
				fmt.Fprintf(&b, "set %s key %s map %v\n", ss.name, ss.keyType.Name, ss.verdicts)
			}
			for _, base := range l.bases {
				ch := l.baseChain(base)
				if ch.Hooknum == nil {
					fmt.Fprintf(&b, "chain %s\n", ch.Name)
				} else {
					fmt.Fprintf(&b, "chain %s type %s hook %d priority %d policy %d\n", ch.Name, ch.Type, *ch.Hooknum, *ch.Priority, *ch.Policy)
				}
				for _, r := range base.rules {
					fmt.Fprintf(&b, "  rule %q\n", r.Comment)
					nfttest.WriteExprs(t, &b, l.table.Family, r.Exprs)
				}
			}
			chain := chainName(s.Key)
			fmt.Fprintf(&b, "chain %s\n", chain)
			for _, r := range l.rules(s, sp.ifaces) {
				fmt.Fprintf(&b, "  rule %q\n", r.Comment)
				nfttest.WriteExprs(t, &b, l.table.Family, r.Exprs)
			}
			els := l.elements(chain, s, sp.ifaces)
			names := make([]string, 0, len(els))
			for name := range els {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				for _, e := range els[name] {
					fmt.Fprintf(&b, "element %s %s : %q\n", name, hex.EncodeToString(e.key), e.chain)
				}
			}
		}
	}
	nfttest.Compare(t, "testdata/layer.golden", b.String(), *updateGolden)
}
