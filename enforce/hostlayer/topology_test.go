package hostlayer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// Addresses of the test topology (documentation ranges only):
//
//	sbxA (.10) ─┐
//	            ├─ br0 198.51.100.1/25, 2001:db8:2::1/64 ─┐
//	sbxB (.20) ─┘                                          │
//	                                                  runtime ── up0 203.0.113.1/24, 2001:db8:1::1/64 ── inet 203.0.113.2, 2001:db8:1::2
//	sbxC (.130) ── veth-c 198.51.100.129/25, 2001:db8:3::1/64 (routed, no bridge)
//
// inet also holds the resolvers on its loopback. The runtime plays the
// host: it routes between the sandboxes and inet, and it is where the
// layer goes.
const (
	gw4       = "198.51.100.1"
	gw6       = "2001:db8:2::1"
	sbxA4     = "198.51.100.10"
	sbxA6     = "2001:db8:2::10"
	sbxB4     = "198.51.100.20"
	sbxB6     = "2001:db8:2::20"
	gwC4      = "198.51.100.129"
	gwC6      = "2001:db8:3::1"
	sbxC4     = "198.51.100.130"
	sbxC6     = "2001:db8:3::2"
	uplink4   = "203.0.113.1"
	uplink6   = "2001:db8:1::1"
	inet4     = "203.0.113.2"
	inet6     = "2001:db8:1::2"
	resolver4 = "203.0.113.53"
	resolver6 = "2001:db8:53::53"
)

// testNS is a named throwaway network namespace.
type testNS struct {
	name, path string
	ns.NetNS
}

// newTestNS creates namespace dm-<purpose>-<hex> with loopback up and
// deletes it when the test ends.
func newTestNS(t testing.TB, purpose string) *testNS {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("dm-%s-%s", purpose, hex.EncodeToString(b[:]))
	run(t, "ip", "netns", "add", name)
	path := filepath.Join("/var/run/netns", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	n, err := ns.GetNS(path)
	if err != nil {
		t.Fatalf("open netns %s: %v", path, err)
	}
	t.Cleanup(func() { n.Close() })
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return &testNS{name: name, path: path, NetNS: n}
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// ip runs `ip -n NS` with the whitespace-separated arguments of line.
func (n *testNS) ip(t testing.TB, line string) {
	t.Helper()
	run(t, "ip", append([]string{"-n", n.name}, strings.Fields(line)...)...)
}

// sysctl writes a sysctl of the namespace (path below /proc/sys).
func (n *testNS) sysctl(t testing.TB, key, value string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		return os.WriteFile(filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")), []byte(value), 0o644)
	})
	if err != nil {
		t.Fatalf("sysctl %s=%s in %s: %v", key, value, n.name, err)
	}
}

// link returns interface dev of the namespace.
func (n *testNS) link(t testing.TB, dev string) *net.Interface {
	t.Helper()
	var ifc *net.Interface
	err := n.Do(func(ns.NetNS) (err error) { ifc, err = net.InterfaceByName(dev); return err })
	if err != nil {
		t.Fatalf("interface %s in %s: %v", dev, n.name, err)
	}
	return ifc
}

// waitLinksUp waits until every dev is operationally up. Until then
// (linkwatch may take up to a second after `ip link set up`) the device
// drops what it sends.
func (n *testNS) waitLinksUp(t testing.TB, devs ...string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for _, dev := range devs {
		for {
			out, err := exec.Command("ip", "-n", n.name, "-o", "link", "show", "dev", dev).CombinedOutput()
			if err == nil && strings.Contains(string(out), " state UP ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s in %s is not up: %s %v", dev, n.name, out, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// topology is the layout drawn above.
type topology struct {
	runtime, inet, a, b, c *testNS
}

func newTopology(t testing.TB) *topology {
	t.Helper()
	tp := &topology{
		runtime: newTestNS(t, "hrt"),
		inet:    newTestNS(t, "hinet"),
		a:       newTestNS(t, "hsbxa"),
		b:       newTestNS(t, "hsbxb"),
		c:       newTestNS(t, "hsbxc"),
	}
	rt, in := tp.runtime, tp.inet

	rt.sysctl(t, "net.ipv4.ip_forward", "1")
	rt.sysctl(t, "net.ipv6.conf.all.forwarding", "1")
	// The kernel has br_netfilter built in or loaded: say explicitly what
	// the layer relies on, whatever the defaults are.
	rt.sysctl(t, "net.bridge.bridge-nf-call-iptables", "1")
	rt.sysctl(t, "net.bridge.bridge-nf-call-ip6tables", "1")

	rt.ip(t, "link add br0 type bridge forward_delay 0")
	rt.ip(t, "addr add "+gw4+"/25 dev br0")
	rt.ip(t, "addr add "+gw6+"/64 dev br0 nodad")
	rt.ip(t, "link set br0 up")

	for _, s := range []struct {
		sbx            *testNS
		host, a4, a6   string
		gwv4, gwv6     string
		bridged        bool
		hostA4, hostA6 string
	}{
		{tp.a, "veth-a", sbxA4 + "/25", sbxA6 + "/64", gw4, gw6, true, "", ""},
		{tp.b, "veth-b", sbxB4 + "/25", sbxB6 + "/64", gw4, gw6, true, "", ""},
		{tp.c, "veth-c", sbxC4 + "/25", sbxC6 + "/64", gwC4, gwC6, false, gwC4 + "/25", gwC6 + "/64"},
	} {
		rt.ip(t, "link add "+s.host+" type veth peer name eth0 netns "+s.sbx.name)
		if s.bridged {
			rt.ip(t, "link set "+s.host+" master br0")
		} else {
			rt.ip(t, "addr add "+s.hostA4+" dev "+s.host)
			rt.ip(t, "addr add "+s.hostA6+" dev "+s.host+" nodad")
		}
		rt.ip(t, "link set "+s.host+" up")
		s.sbx.ip(t, "addr add "+s.a4+" dev eth0")
		s.sbx.ip(t, "addr add "+s.a6+" dev eth0 nodad")
		s.sbx.ip(t, "link set eth0 up")
		s.sbx.ip(t, "route add default via "+s.gwv4)
		s.sbx.ip(t, "-6 route add default via "+s.gwv6)
	}

	rt.ip(t, "link add up0 type veth peer name eth0 netns "+in.name)
	rt.ip(t, "addr add "+uplink4+"/24 dev up0")
	rt.ip(t, "addr add "+uplink6+"/64 dev up0 nodad")
	rt.ip(t, "link set up0 up")
	rt.ip(t, "route add default via "+inet4)
	rt.ip(t, "-6 route add default via "+inet6)
	in.ip(t, "addr add "+inet4+"/24 dev eth0")
	in.ip(t, "addr add "+inet6+"/64 dev eth0 nodad")
	in.ip(t, "link set eth0 up")
	in.ip(t, "addr add "+resolver4+"/32 dev lo")
	in.ip(t, "addr add "+resolver6+"/128 dev lo nodad")
	in.ip(t, "route add 198.51.100.0/24 via "+uplink4)
	in.ip(t, "-6 route add 2001:db8:2::/64 via "+uplink6)
	in.ip(t, "-6 route add 2001:db8:3::/64 via "+uplink6)

	rt.waitLinksUp(t, "veth-a", "veth-b", "veth-c", "up0", "br0")
	for _, s := range []*testNS{tp.a, tp.b, tp.c, in} {
		s.waitLinksUp(t, "eth0")
	}
	return tp
}
