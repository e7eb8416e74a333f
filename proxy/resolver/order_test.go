package resolver

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// netnsWith makes a throwaway network namespace with an interface d0 (a
// veth whose peer stays in the namespace) configured by the `ip` commands
// in setup (each run with -n NS), deleted when the test ends.
func netnsWith(t *testing.T, setup ...string) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := "dm-order-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	for _, c := range append([]string{"link set lo up", "link add d0 type veth peer name d1", "link set d1 up", "link set d0 up"}, setup...) {
		if out, err := exec.Command("ip", append([]string{"-n", name}, strings.Fields(c)...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", name, c, err, out)
		}
	}
	n, err := ns.GetNS("/var/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestSortForDialing checks the order in which the addresses of a name
// are dialed against the routes and source addresses of a namespace.
func TestSortForDialing(t *testing.T) {
	const v4, v6, ula, other4 = "198.51.100.7", "2001:db8:5::7", "fd00:5::7", "203.0.113.7"
	for _, tc := range []struct {
		name  string
		setup []string
		in    []string
		want  []string
	}{
		{"both families routed: IPv6 first",
			[]string{"addr add 198.51.100.1/24 dev d0", "addr add 2001:db8::1/64 dev d0 nodad", "route add default dev d0", "-6 route add default dev d0"},
			[]string{v4, v6}, []string{v6, v4}},
		{"no IPv6 route: IPv4 first",
			[]string{"addr add 198.51.100.1/24 dev d0", "route add default dev d0"},
			[]string{v6, v4}, []string{v4, v6}},
		{"no route at all to one: it goes last, the rest keep their order",
			[]string{"addr add 198.51.100.1/24 dev d0"},
			[]string{other4, v4, "198.51.100.8"}, []string{v4, "198.51.100.8", other4}},
		{"IPv6 from a ULA source only: IPv4 first",
			[]string{"addr add 198.51.100.1/24 dev d0", "addr add fd00::1/64 dev d0 nodad", "route add default dev d0", "-6 route add default dev d0"},
			[]string{v6, v4}, []string{v4, v6}},
		{"a ULA destination after IPv4 (lower precedence)",
			[]string{"addr add 198.51.100.1/24 dev d0", "addr add fd00::1/64 dev d0 nodad", "route add default dev d0", "-6 route add default dev d0"},
			[]string{ula, v4}, []string{v4, ula}},
		{"loopback: ::1 before 127.0.0.1",
			nil,
			[]string{"127.0.0.1", "::1"}, []string{"::1", "127.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := netnsWith(t, tc.setup...)
			got := addrs(tc.in...)
			if err := n.Do(func(ns.NetNS) error { sortForDialing(got); return nil }); err != nil {
				t.Fatal(err)
			}
			if want := addrs(tc.want...); !slices.Equal(got, want) {
				t.Errorf("sortForDialing(%v) = %v, want %v", tc.in, got, want)
			}
		})
	}
}
