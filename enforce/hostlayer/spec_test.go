package hostlayer

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables/binaryutil"

	"github.com/doorman-net/doorman/conf"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestSpecNormalized(t *testing.T) {
	s := Spec{
		Key:         "ctr-1_a.b",
		HostIfaces:  []string{"veth2", "veth1", "veth2"},
		Resolvers:   addrs("203.0.113.53", "::ffff:198.51.100.53", "127.0.0.11", "::1", "203.0.113.53", "2001:db8::53"),
		AllowDirect: constEntries("203.0.113.7:443", "[::ffff:203.0.113.0/120]:53", "203.0.113.7:443", "2001:db8::/32"),
	}
	got, err := s.normalized()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"veth1", "veth2"}; !slices.Equal(got.HostIfaces, want) {
		t.Errorf("HostIfaces = %v, want %v", got.HostIfaces, want)
	}
	if want := addrs("198.51.100.53", "203.0.113.53", "2001:db8::53"); !slices.Equal(got.Resolvers, want) {
		t.Errorf("Resolvers = %v, want %v (sorted, unmapped, no loopback, no duplicates)", got.Resolvers, want)
	}
	var direct []string
	for _, e := range got.AllowDirect {
		direct = append(direct, e.String())
	}
	if want := []string{"203.0.113.7:443", "203.0.113.0/24:53", "2001:db8::/32"}; !slices.Equal(direct, want) {
		t.Errorf("AllowDirect = %q, want %q", direct, want)
	}
}

func TestSpecErrors(t *testing.T) {
	name := constEntries("api.example.com")
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Key: "", HostIfaces: []string{"v"}}, `sandbox key ""`},
		{Spec{Key: "-x", HostIfaces: []string{"v"}}, `sandbox key "-x"`},
		{Spec{Key: "a/b", HostIfaces: []string{"v"}}, `sandbox key "a/b"`},
		{Spec{Key: strings.Repeat("k", 202), HostIfaces: []string{"v"}}, "at most 201"},
		{Spec{Key: "x"}, "neither host interfaces nor the sandbox's namespace"},
		{Spec{Key: "x", HostIfaces: []string{"veth0", ""}}, `host interface "": empty name`},
		{Spec{Key: "x", HostIfaces: []string{"a-very-long-name0"}}, "longer than 15 bytes"},
		{Spec{Key: "x", HostIfaces: []string{"a/b"}}, "not a valid interface name"},
		{Spec{Key: "x", HostIfaces: []string{"v"}, Resolvers: []netip.Addr{{}}}, "resolver #1"},
		{Spec{Key: "x", HostIfaces: []string{"v"}, Resolvers: addrs("fe80::1%eth0")}, "scoped address"},
		{Spec{Key: "x", HostIfaces: []string{"v"}, Resolvers: addrs("0.0.0.0")}, "unspecified"},
		{Spec{Key: "x", HostIfaces: []string{"v"}, Resolvers: addrs("203.0.113.1", "ff02::1")}, `resolver #2 "ff02::1": multicast`},
		{Spec{Key: "x", HostIfaces: []string{"v"}, AllowDirect: name}, `allowDirect entry #1 "api.example.com": a name entry cannot bypass the proxy`},
		{Spec{Key: "x", HostIfaces: []string{"v"}, AllowDirect: []conf.Entry{{Kind: conf.KindPrefix}}}, "no valid IP prefix"},
	} {
		_, err := tc.spec.normalized()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("normalized(%+v): %v, want an error containing %q", tc.spec, err, tc.want)
		}
	}
}

func TestIfaceMACKey(t *testing.T) {
	mac, _ := net.ParseMAC("02:42:ac:11:00:02")
	k := ifaceMACKey(7, mac)
	want := append(binaryutil.NativeEndian.PutUint32(7), 0x02, 0x42, 0xac, 0x11, 0x00, 0x02, 0, 0)
	if !bytes.Equal(k, want) || len(k) != int(typeIfaceMAC.Bytes) {
		t.Errorf("ifaceMACKey = %x, want %x (%d bytes)", k, want, typeIfaceMAC.Bytes)
	}
}

func TestJumpTarget(t *testing.T) {
	// NFTA_VERDICT_CODE = NFT_JUMP (-3), NFTA_VERDICT_CHAIN = "sbx-x".
	jump := []byte{8, 0, 1, 0, 0xff, 0xff, 0xff, 0xfd, 10, 0, 2, 0, 's', 'b', 'x', '-', 'x', 0, 0, 0}
	if got := jumpTarget(jump); got != "sbx-x" {
		t.Errorf("jumpTarget(jump sbx-x) = %q", got)
	}
	accept := []byte{8, 0, 1, 0, 0, 0, 0, 1}
	if got := jumpTarget(accept); got != "" {
		t.Errorf("jumpTarget(accept) = %q, want \"\"", got)
	}
	if got := jumpTarget([]byte{200, 0, 1, 0}); got != "" {
		t.Errorf("jumpTarget(garbage) = %q, want \"\"", got)
	}
}

func TestNewPin(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x02}
	p := peer{name: "eth0", mac: mac, addrs: addrs("198.51.100.10", "198.51.100.13", "2001:db8:2::10", "fe80::1", "::ffff:198.51.100.14")}
	hi := hostIface{name: "veth-a", index: 7}
	eui := "fe80::42:acff:fe11:2"
	for _, tc := range []struct {
		name string
		ipam map[string][]netip.Addr
		want []netip.Addr
	}{
		{"read", nil, addrs("198.51.100.10", "198.51.100.13", "198.51.100.14", "2001:db8:2::10", "fe80::1", eui)},
		{"ipam of both families", map[string][]netip.Addr{"eth0": addrs("198.51.100.10", "2001:db8:2::11")},
			addrs("198.51.100.10", "2001:db8:2::11", "fe80::1", eui)},
		{"ipam of ipv4 only", map[string][]netip.Addr{"eth0": addrs("198.51.100.10")},
			addrs("198.51.100.10", "2001:db8:2::10", "fe80::1", eui)},
		{"ipam of another interface", map[string][]netip.Addr{"eth1": addrs("203.0.113.1")},
			addrs("198.51.100.10", "198.51.100.13", "198.51.100.14", "2001:db8:2::10", "fe80::1", eui)},
	} {
		got := newPin(hi, p, tc.ipam)
		if !slices.Equal(got.Addrs, sortedAddrs(tc.want)) || got.HostIface != "veth-a" || got.HostIndex != 7 ||
			got.SandboxIface != "eth0" || got.MAC.String() != mac.String() {
			t.Errorf("%s: pin %+v, want addresses %v", tc.name, got, sortedAddrs(tc.want))
		}
	}
}

func sortedAddrs(a []netip.Addr) []netip.Addr {
	out := slices.Clone(a)
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func TestPickLogGroup(t *testing.T) {
	own, err := pickLogGroup("sbx-1", nil)
	if err != nil || own < LogGroupBase {
		t.Fatalf("pickLogGroup: %d, %v", own, err)
	}
	// Its own group again, wherever it is; a taken group is skipped.
	if g, err := pickLogGroup("sbx-1", []element{{key: logGroupKey(7), chain: chainName("sbx-1")}}); g != 7 || err != nil {
		t.Errorf("with its own group 7 recorded: %d, %v", g, err)
	}
	if g, err := pickLogGroup("sbx-1", []element{{key: logGroupKey(own), chain: chainName("other")}}); g == own || err != nil {
		t.Errorf("with its group %d taken: %d, %v", own, g, err)
	}
	var all []element
	for g := range LogGroupSpan {
		all = append(all, element{key: logGroupKey(uint16(LogGroupBase + g)), chain: chainName(fmt.Sprint("s", g))})
	}
	if g, err := pickLogGroup("sbx-1", all); err == nil {
		t.Errorf("every group taken: %d, want an error", g)
	}
}
