package enforce

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
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
//	nested ──(203.0.113.0/24, 2001:db8:2::/64)── sandbox ──(198.51.100.0/24, 2001:db8:1::/64)── inet
//
// inet also holds the resolver addresses on its loopback.
const (
	inetAddr4    = "198.51.100.1"
	inetAddr6    = "2001:db8:1::1"
	sandboxAddr4 = "198.51.100.2"
	sandboxAddr6 = "2001:db8:1::2"
	resolver4    = "203.0.113.53"
	resolver6    = "2001:db8:53::53"

	nestGW4     = "203.0.113.129"
	nestedAddr4 = "203.0.113.130"
	nestGW6     = "2001:db8:2::1"
	nestedAddr6 = "2001:db8:2::2"
)

// testNS is a named throwaway network namespace.
type testNS struct {
	name, path string
	ns.NetNS
}

// newTestNS creates namespace dm-<purpose>-<hex> with loopback up and
// deletes it when the test ends.
func newTestNS(t *testing.T, purpose string) *testNS {
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

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// ip runs `ip -n NS` with the whitespace-separated arguments of line.
func (n *testNS) ip(t *testing.T, line string) {
	t.Helper()
	run(t, "ip", append([]string{"-n", n.name}, strings.Fields(line)...)...)
}

// waitLinkUp waits until dev is operationally up. Until then (linkwatch
// may take up to a second after `ip link set up`) the device drops what it
// sends, and the first neighbour solicitation would be lost.
func (n *testNS) waitLinkUp(t *testing.T, dev string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", n.name, "-o", "link", "show", "dev", dev).CombinedOutput()
		if err == nil && strings.Contains(string(out), " state UP ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s is not up: %s %v", dev, n.name, out, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sysctl writes a sysctl of the namespace (path below /proc/sys).
func (n *testNS) sysctl(t *testing.T, key, value string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		return os.WriteFile(filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")), []byte(value), 0o644)
	})
	if err != nil {
		t.Fatalf("sysctl %s=%s in %s: %v", key, value, n.name, err)
	}
}

// topology is a sandbox namespace whose only way out is a veth to an
// "internet" namespace, and optionally a nested namespace routed through
// the sandbox, standing in for the containers of a daemon inside it.
type topology struct {
	sandbox, inet, nested *testNS
}

func newTopology(t *testing.T, withNested bool) *topology {
	t.Helper()
	tp := &topology{sandbox: newTestNS(t, "sbx"), inet: newTestNS(t, "inet")}
	sb, in := tp.sandbox, tp.inet

	sb.ip(t, "link add eth0 type veth peer name eth0 netns "+in.name)
	sb.ip(t, "addr add "+sandboxAddr4+"/24 dev eth0")
	sb.ip(t, "addr add "+sandboxAddr6+"/64 dev eth0 nodad")
	sb.ip(t, "link set eth0 up")
	sb.ip(t, "route add default via "+inetAddr4)
	sb.ip(t, "-6 route add default via "+inetAddr6)

	in.ip(t, "addr add "+inetAddr4+"/24 dev eth0")
	in.ip(t, "addr add "+inetAddr6+"/64 dev eth0 nodad")
	in.ip(t, "link set eth0 up")
	in.ip(t, "addr add "+resolver4+"/32 dev lo")
	in.ip(t, "addr add "+resolver6+"/128 dev lo nodad")

	sb.waitLinkUp(t, "eth0")
	in.waitLinkUp(t, "eth0")

	if withNested {
		tp.nested = newTestNS(t, "nest")
		ne := tp.nested
		sb.ip(t, "link add nest0 type veth peer name eth0 netns "+ne.name)
		sb.ip(t, "addr add "+nestGW4+"/25 dev nest0")
		sb.ip(t, "addr add "+nestGW6+"/64 dev nest0 nodad")
		sb.ip(t, "link set nest0 up")
		sb.sysctl(t, "net.ipv4.ip_forward", "1")
		sb.sysctl(t, "net.ipv6.conf.all.forwarding", "1")
		ne.ip(t, "addr add "+nestedAddr4+"/25 dev eth0")
		ne.ip(t, "addr add "+nestedAddr6+"/64 dev eth0 nodad")
		ne.ip(t, "link set eth0 up")
		ne.ip(t, "route add default via "+nestGW4)
		ne.ip(t, "-6 route add default via "+nestGW6)
		sb.waitLinkUp(t, "nest0")
		ne.waitLinkUp(t, "eth0")
		in.ip(t, "route add 203.0.113.128/25 via "+sandboxAddr4)
		in.ip(t, "-6 route add 2001:db8:2::/64 via "+sandboxAddr6)
	}
	return tp
}
