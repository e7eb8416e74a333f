package plugin

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/kube/agentclient"
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
		s, err := ParseEntry([]byte(`{"upstreamResolver": "` + tc.in + `"}`))
		if err != nil || !slices.Equal(s.UpstreamResolvers, []netip.AddrPort{netip.MustParseAddrPort(tc.want)}) {
			t.Errorf("upstreamResolver %q: %v, %v; want %s", tc.in, s.UpstreamResolvers, err, tc.want)
		}
	}
	for _, entry := range []string{`{}`, `{"upstreamResolver": ""}`} {
		if s, err := ParseEntry([]byte(entry)); s.UpstreamResolvers != nil || err != nil {
			t.Errorf("%s: %v, %v; want none (the sandbox's resolvers)", entry, s.UpstreamResolvers, err)
		}
	}
	_, err := ParseEntry([]byte(`{"upstreamResolver": "dns.example:53"}`))
	const want = `upstreamResolver "dns.example:53": "dns.example" is not an IP address (name the server by its address); want addr or addr:port, such as 203.0.113.53, 203.0.113.53:5353, 2001:db8::53 or [2001:db8::53]:5353`
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

// netConf parses entry (with runtimeConfig) as parseNetConf does at ADD.
func netConf(t *testing.T, entry string) *NetConf {
	t.Helper()
	n, err := parseNetConf([]byte(entry))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.valid(); err != nil {
		t.Fatal(err)
	}
	if n.runtimeErr != nil {
		t.Fatal(n.runtimeErr)
	}
	return n
}

// The resolvers: the network's key, else the pod's dns capability (what
// its resolv.conf names), else prevResult's, else the conflist's dns.
func TestResolversPrecedence(t *testing.T) {
	prev := &current.Result{DNS: types.DNS{Nameservers: []string{"198.51.100.53"}}}
	for _, tc := range []struct {
		entry string
		prev  *current.Result
		want  string
	}{
		{`{"resolvers": ["203.0.113.1"], "runtimeConfig": {"dns": {"Servers": ["203.0.113.2"]}}, "dns": {"nameservers": ["203.0.113.3"]}}`, prev, "203.0.113.1"},
		{`{"runtimeConfig": {"dns": {"Servers": ["203.0.113.2"]}}, "dns": {"nameservers": ["203.0.113.3"]}}`, prev, "203.0.113.2"},
		{`{"runtimeConfig": {"dns": {"servers": ["2001:db8::2"]}}}`, prev, "2001:db8::2"},
		{`{"runtimeConfig": {"dns": {"Servers": []}}, "dns": {"nameservers": ["203.0.113.3"]}}`, prev, "198.51.100.53"},
		{`{"runtimeConfig": {"dns": null}, "dns": {"nameservers": ["203.0.113.3"]}}`, nil, "203.0.113.3"},
	} {
		got, err := netConf(t, tc.entry).resolvers(tc.prev)
		if err != nil || len(got) != 1 || got[0].String() != tc.want {
			t.Errorf("%s: %v, %v; want %s", tc.entry, got, err, tc.want)
		}
	}
	_, err := netConf(t, `{"runtimeConfig": {"dns": {"Servers": ["10.96.0.10", "kube-dns"]}}}`).resolvers(prev)
	if err == nil || !strings.Contains(err.Error(), `runtimeConfig dns.servers "kube-dns": not an IP address`) {
		t.Errorf("a bad server in the dns capability: %v", err)
	}
}

// The policy: the pod's annotations, else a policyDir file, else the
// network's. Annotations that do not parse refuse the pod, naming the
// annotation and the value.
func TestPolicyPrecedence(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "team-a_web-0"), []byte("mode: open\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := &skel.CmdArgs{ContainerID: "3f2a", Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0;K8S_POD_UID=0b1c"}
	for _, tc := range []struct{ entry, want string }{
		{`{"mode": "none", "policyDir": "` + dir + `", "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"doorman.io/allowed-hosts": "api.example.com"}}}`, "allowlist api.example.com"},
		{`{"mode": "none", "policyDir": "` + dir + `", "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"example.com/team": "ci"}}}`, "open"},
		{`{"mode": "none", "policyDir": "` + dir + `", "runtimeConfig": {"io.kubernetes.cri.pod-annotations": null}}`, "open"},
		{`{"mode": "none", "allowedHosts": ["x.example.com"]}`, "none x.example.com"},
	} {
		p, err := netConf(t, tc.entry).policy(args)
		if err != nil {
			t.Fatalf("%s: %v", tc.entry, err)
		}
		if got := strings.Join(append([]string{string(p.Mode)}, p.Hosts()...), " "); got != tc.want {
			t.Errorf("%s: policy %q, want %q", tc.entry, got, tc.want)
		}
	}
	_, err := netConf(t, `{"runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"doorman.io/mode": "permissive"}}}`).policy(args)
	if err == nil || !strings.Contains(err.Error(), `doorman: pod team-a/web-0: annotation doorman.io/mode: invalid mode "permissive"`) {
		t.Errorf("a bad mode annotation: %v", err)
	}
	n := netConf(t, `{"name": "k8s", "allowDirect": ["203.0.113.7"], "nat64Prefixes": ["2001:db8:64::/96"], "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"doorman.io/allow-direct": "198.51.100.7:5432"}}}`)
	s, err := n.spec(args, &current.Result{DNS: types.DNS{Nameservers: []string{"198.51.100.53"}}})
	if err != nil || len(s.AllowDirect) != 2 || s.AllowDirect[0].String() != "203.0.113.7" || s.AllowDirect[1].String() != "198.51.100.7:5432" {
		t.Errorf("allowDirect: the network's and the pod's: %v, %v", s.AllowDirect, err)
	}
	if len(s.NAT64Prefixes) != 1 || s.NAT64Prefixes[0].String() != "2001:db8:64::/96" {
		t.Errorf("nat64Prefixes: %v", s.NAT64Prefixes)
	}
	_, err = netConf(t, `{"name": "k8s", "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"doorman.io/allow-direct": "db.example.com"}}}`).spec(args, nil)
	if err == nil || !strings.Contains(err.Error(), `pod team-a/web-0: annotation doorman.io/allow-direct "db.example.com"`) {
		t.Errorf("a bad allow-direct annotation: %v", err)
	}
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
		{`{"connections":-3}`, "limits.connections: -3 is negative"},
		{`{"idle":"1h"}`, `limits "idle": unknown key`},
	} {
		n, err := parseNetConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"doorman","limits":` + tc.limits + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := n.valid(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("limits %s: %v, want %q", tc.limits, err, tc.want)
		}
	}
}

// With the "agent" key a pod's policy is the agent's: its file when it
// does not answer; with neither, the ADD is refused (the kubelet retries)
// or, with withoutAgent "default", the network's policy narrowed by the
// pod's annotations, never widened.
func TestPolicyFromAgent(t *testing.T) {
	dir := t.TempDir()
	args := &skel.CmdArgs{ContainerID: "3f2a", Args: "K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0;K8S_POD_UID=u1"}
	prev := &current.Result{DNS: types.DNS{Nameservers: []string{"198.51.100.53"}}}
	ann := `"runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"doorman.io/mode": "open", "doorman.io/allow-direct": "203.0.113.9"}}`
	entry := func(without string) string {
		return `{"name": "k8s", "mode": "allowlist", "allowedHosts": ["api.example.com"], "allowDirect": ["203.0.113.7"], "agent": {"dir": "` + dir + `", "wait": "200ms", "withoutAgent": "` + without + `"}, ` + ann + `}`
	}
	// Neither agent nor file: refused, try again later.
	_, err := netConf(t, entry("refuse")).spec(args, prev)
	var cerr *types.Error
	if !errors.As(err, &cerr) || cerr.Code != types.ErrTryAgainLater || !strings.Contains(cerr.Msg, "pod team-a/web-0: no policy from the doorman node agent") {
		t.Fatalf("no agent: %v", err)
	}
	// withoutAgent default: the network's policy; mode open in the
	// annotation means what is granted, and allow-direct outside the
	// network's is dropped.
	s, err := netConf(t, entry("default")).spec(args, prev)
	if err != nil || s.Policy.String() != "allowlist [api.example.com]" || len(s.AllowDirect) != 0 {
		t.Errorf("withoutAgent default: %v %v, %v", s.Policy, s.AllowDirect, err)
	}
	// The file the agent wrote.
	p, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"www.example.com:443"})
	data, _ := json.Marshal(agentclient.Answer{Namespace: "team-a", Name: "web-0", UID: "u1", Policy: p, AllowICMP: true})
	os.MkdirAll(filepath.Join(dir, "pods", "team-a"), 0o755)
	if err := os.WriteFile(agentclient.PodFile(dir, "team-a", "web-0"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = netConf(t, entry("refuse")).spec(args, prev)
	if err != nil || !s.Policy.Equal(p) || !s.AllowICMP || len(s.AllowDirect) != 0 {
		t.Errorf("from the agent's file: %v %v %v, %v", s.Policy, s.AllowDirect, s.AllowICMP, err)
	}
}
