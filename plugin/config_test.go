package plugin

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/doorman-net/doorman/hostconf"
)

func TestPolicyNames(t *testing.T) {
	const hex = "2940e863f32ff9e81b5cf14592eb78083d271e51b99139085f9c970266d0fde2"
	for _, tc := range []struct {
		id, args string
		want     []string
	}{
		{"abc123", "", []string{"abc123"}},
		{"abc123", "IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=web", []string{"abc123", "team_web", "web"}},
		{"abc123", "K8S_POD_NAME=web", []string{"abc123", "web"}},
		{"default-" + hex, "IgnoreUnknown=1", []string{"default-" + hex, hex}}, // nerdctl's
		{"default-3f4e", "", []string{"default-3f4e"}},
		{"abc123", "K8S_POD_NAME=../etc", []string{"abc123"}}, // would leave the directory
	} {
		got := policyNames(&skel.CmdArgs{ContainerID: tc.id, Args: tc.args})
		if !slices.Equal(got, tc.want) {
			t.Errorf("policyNames(%q, %q) = %q, want %q", tc.id, tc.args, got, tc.want)
		}
	}
}

// A network config naming no resolvers reads this host's, as
// hostconf.Resolvers does.
func TestHostResolvers(t *testing.T) {
	want, wantErr := hostconf.Resolvers()
	if got, err := (&NetConf{}).resolvers(nil); !slices.Equal(got, want) || (err == nil) != (wantErr == nil) {
		t.Errorf("a config without resolvers: %v, %v; hostconf.Resolvers: %v, %v", got, err, want, wantErr)
	}
}

// upstreamResolver takes what resolver.ParseServer takes; a bad value is
// an error naming the key, the value and why.
func TestUpstreamResolver(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"203.0.113.53", "203.0.113.53:53"},
		{"203.0.113.53:5353", "203.0.113.53:5353"},
		{"2001:db8::53", "[2001:db8::53]:53"},
		{"[2001:db8::53]:53", "[2001:db8::53]:53"},
	} {
		got, err := (&NetConf{UpstreamResolver: tc.in}).upstreamResolver()
		if err != nil || !slices.Equal(got, []netip.AddrPort{netip.MustParseAddrPort(tc.want)}) {
			t.Errorf("upstreamResolver %q: %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if got, err := (&NetConf{}).upstreamResolver(); got != nil || err != nil {
		t.Errorf("no upstreamResolver: %v, %v; want none (the sandbox's resolvers)", got, err)
	}
	_, err := (&NetConf{UpstreamResolver: "dns.example:53"}).upstreamResolver()
	const want = `doorman: upstreamResolver "dns.example:53": "dns.example" is not an IP address (name the server by its address); want addr or addr:port, such as 203.0.113.53, 203.0.113.53:5353, 2001:db8::53 or [2001:db8::53]:5353`
	if err == nil || err.Error() != want {
		t.Errorf("bad upstreamResolver: %v\nwant %s", err, want)
	}
}

func TestIPAMAddrs(t *testing.T) {
	idx := func(i int) *int { return &i }
	prev := &current.Result{
		Interfaces: []*current.Interface{
			{Name: "cni0"}, {Name: "veth1234"}, {Name: "eth0", Sandbox: "/var/run/netns/x"}, {Name: "eth1", Sandbox: "/var/run/netns/x"},
		},
		IPs: []*current.IPConfig{
			{Interface: idx(2), Address: mustIPNet(t, "198.51.100.10/24")},
			{Interface: idx(2), Address: mustIPNet(t, "2001:db8:2::10/64")},
			{Interface: idx(3), Address: mustIPNet(t, "203.0.113.10/24")},  // another interface
			{Interface: idx(0), Address: mustIPNet(t, "198.51.100.1/24")},  // the bridge's
			{Address: mustIPNet(t, "198.51.100.99/24")},                    // no interface named
			{Interface: idx(9), Address: mustIPNet(t, "198.51.100.98/24")}, // out of range
		},
	}
	want := []netip.Addr{netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("2001:db8:2::10")}
	if got := ipamAddrs(prev, "eth0"); !slices.Equal(got, want) {
		t.Errorf("ipamAddrs(eth0) = %v, want %v", got, want)
	}
	if got := ipamAddrs(prev, "veth1234"); got != nil {
		t.Errorf("ipamAddrs of a host interface = %v, want none", got)
	}
}

func mustIPNet(t *testing.T, s string) net.IPNet {
	t.Helper()
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return *n
}

// A network's limits win key by key over the host's file; a bad key or
// value is an invalid-config error that names it.
func TestLimits(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "limits.json")
	os.WriteFile(host, []byte(`{"connections": 100, "dnsQueriesPerSecond": 20}`), 0o644)
	n, err := parseNetConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"doorman","limits":{"connections":300,"idleTimeout":"0s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.limits(host)
	if err != nil || l.Connections != 300 || l.DNSQueriesPerSecond != 20 || l.IdleTimeout == nil || *l.IdleTimeout != 0 {
		t.Fatalf("limits %+v, %v", l, err)
	}
	for _, tc := range []struct{ limits, want string }{
		{`{"connections":-3}`, "doorman: limits.connections: -3 is negative"},
		{`{"idle":"1h"}`, `unknown field "idle"`},
	} {
		n, err := parseNetConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"doorman","limits":` + tc.limits + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.limits(host); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("limits %s: %v, want %q", tc.limits, err, tc.want)
		}
	}
}
