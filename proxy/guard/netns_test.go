package guard

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// newNetns makes a network namespace for the test, with a veth pair
// inside it (both ends, so that its link is up), and returns its path.
// setup runs `ip -n <netns> ...` commands in it.
func newNetns(t *testing.T, setup ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var b [4]byte
	rand.Read(b[:])
	name := "dm-guard-" + hex.EncodeToString(b[:])
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ip("-n", name, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
	for _, l := range []string{"lo", "veth0", "veth1"} {
		ip("-n", name, "link", "set", l, "up")
	}
	for _, s := range setup {
		ip(append([]string{"-n", name}, strings.Fields(s)...)...)
	}
	return filepath.Join("/var/run/netns", name)
}

// TestConnectedSubnets reads the routes of a namespace the test made: its
// connected subnets, and not the routes through a gateway, are refused,
// along with its own addresses; an address it is not connected to stays
// public.
func TestConnectedSubnets(t *testing.T) {
	path := newNetns(t,
		"addr add 198.51.100.5/24 dev veth0",
		"addr add 2001:db8:5::1/64 dev veth0 nodad",
		"route add 203.0.113.64/26 dev veth0",          // connected, no address of its own
		"route add 203.0.113.0/28 via 198.51.100.1",    // through a router
		"route add default via 198.51.100.1",           // the way out
		"route add 2001:db8:77::/64 via 2001:db8:5::2", // through a router
		"route add 2001:db8:78::/64 dev veth0",         // connected
		"route add unreachable 198.51.100.128/25",      // not unicast
		"route add 203.0.113.128/25 dev veth0 table 7", // not the main table
	)
	var subnets []netip.Prefix
	results := map[string]string{}
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		if subnets, err = ConnectedSubnets(); err != nil {
			return err
		}
		g := New(Config{})
		for _, a := range []string{
			"198.51.100.77", "198.51.100.5", "203.0.113.70", "203.0.113.5", "198.51.100.130",
			"2001:db8:5::9", "2001:db8:5::1", "2001:db8:78::1", "2001:db8:77::5", "203.0.113.200",
		} {
			if r := g.Check(nil, netip.MustParseAddr(a), 443); r != nil {
				results[a] = r.String()
			} else {
				results[a] = ""
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("203.0.113.64/26"),
		netip.MustParsePrefix("2001:db8:5::/64"),
		netip.MustParsePrefix("2001:db8:78::/64"),
		netip.MustParsePrefix("fe80::/64"),
	}
	for _, w := range want {
		if !slices.Contains(subnets, w) {
			t.Errorf("ConnectedSubnets() = %v, want %v among them", subnets, w)
		}
	}
	for _, s := range subnets {
		if !slices.Contains(want, s) {
			t.Errorf("ConnectedSubnets() = %v: %v is not connected", subnets, s)
		}
	}
	for a, w := range map[string]string{
		"198.51.100.77":  "198.51.100.77: connected subnet 198.51.100.0/24 of the proxy's host",
		"198.51.100.5":   "198.51.100.5: an address of the proxy's host",
		"203.0.113.70":   "203.0.113.70: connected subnet 203.0.113.64/26 of the proxy's host",
		"2001:db8:5::9":  "2001:db8:5::9: connected subnet 2001:db8:5::/64 of the proxy's host",
		"2001:db8:5::1":  "2001:db8:5::1: an address of the proxy's host",
		"2001:db8:78::1": "2001:db8:78::1: connected subnet 2001:db8:78::/64 of the proxy's host",
		"203.0.113.5":    "",
		"203.0.113.200":  "",
		"198.51.100.130": "198.51.100.130: connected subnet 198.51.100.0/24 of the proxy's host",
		"2001:db8:77::5": "",
	} {
		if results[a] != w {
			t.Errorf("in the namespace, %s: refusal %q, want %q", a, results[a], w)
		}
	}
}
