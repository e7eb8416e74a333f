package runner

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/spec"
)

func mustPolicy(t *testing.T, mode conf.Mode, entries ...string) *conf.Policy {
	t.Helper()
	p, err := conf.NewPolicy(mode, entries)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{Spec: spec.Spec{Policy: mustPolicy(t, conf.ModeAllowlist), Resolvers: addrs("203.0.113.53")}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Name, "run-") || len(c.Name) != len("run-")+8 || CheckName(c.Name) != nil {
		t.Errorf("default name %q: want run-<8 hex digits>", c.Name)
	}
	if c.Bridge != DefaultBridge || len(c.Subnets) != 1 || c.Subnets[0].String() != DefaultSubnet {
		t.Errorf("defaults: bridge %q, subnets %v", c.Bridge, c.Subnets)
	}
	if c.StateDir != "/run/doorman" || c.LogDir != "/var/log/doorman" || c.RunDir != DefaultRunDir || c.Logf == nil {
		t.Errorf("default dirs: %q %q %q", c.StateDir, c.LogDir, c.RunDir)
	}
	other, _ := Config{Spec: spec.Spec{Policy: c.Policy, Resolvers: c.Resolvers}}.withDefaults()
	if other.Name == c.Name {
		t.Errorf("two default names are the same: %q", c.Name)
	}
}

func TestConfigRefuses(t *testing.T) {
	pol := mustPolicy(t, conf.ModeAllowlist, "example.com")
	v4 := addrs("203.0.113.53")
	for _, tc := range []struct {
		cfg  Config
		want string // in the error
	}{
		{Config{Spec: spec.Spec{Resolvers: v4}}, "no policy"},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: v4}, Name: "../etc"}, `"../etc"`},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: v4}, Name: "-x"}, `"-x"`},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: v4}, Bridge: "a-very-long-bridge-name"}, `"a-very-long-bridge-name"`},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: v4}, Bridge: "br/0"}, `"br/0"`},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: v4}, Subnets: prefixes("10.1.2.3/24")}, "did you mean 10.1.2.0/24"},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: v4}, Subnets: prefixes("10.1.2.0/30")}, "too small"},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: v4}, Subnets: prefixes("10.1.2.0/24", "10.1.3.0/24")}, "at most one IPv4"},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: addrs("127.0.0.53")}}, "127.0.0.53: a loopback address"},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: addrs("fe80::1")}}, "fe80::1: link-local"},
		{Config{Spec: spec.Spec{Policy: pol, Resolvers: addrs("2001:db8::53")}}, "2001:db8::53: the sandbox has no IPv6 subnet"},
	} {
		_, err := tc.cfg.withDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: want an error containing %q, got %v", tc.cfg, tc.want, err)
		}
	}
	// Both families, each with its resolver, is fine.
	_, err := Config{Spec: spec.Spec{Policy: pol, Resolvers: addrs("203.0.113.53", "2001:db8::53")},
		Subnets: prefixes("10.1.2.0/24", "fd00:1::/64")}.withDefaults()
	if err != nil {
		t.Errorf("dual-stack config: %v", err)
	}
}

func TestUsableResolvers(t *testing.T) {
	got := usableResolvers(addrs("127.0.0.53", "203.0.113.53", "2001:db8::53", "fe80::1", "198.51.100.53"), prefixes(DefaultSubnet))
	if want := addrs("203.0.113.53", "198.51.100.53"); !reflect.DeepEqual(got, want) {
		t.Errorf("usable resolvers for an IPv4-only network: got %v, want %v", got, want)
	}
}

// TestChainList checks the generated conflist as libcni reads it, and the
// keys each plugin gets.
func TestChainList(t *testing.T) {
	c, err := Config{
		Spec: spec.Spec{
			Policy:            mustPolicy(t, conf.ModeAllowlist, "API.Example.com", "*.github.com:443"),
			Resolvers:         addrs("203.0.113.53", "2001:db8::53"),
			UpstreamResolvers: []netip.AddrPort{netip.MustParseAddrPort("203.0.113.53:53")},
			AllowICMP:         true,
			LogDir:            "/tmp/l",
			Proxy: spec.Proxy{
				AllowDirect: []conf.Direct{{Prefix: netip.MustParsePrefix("203.0.113.7/32"), Ports: conf.PortRange{Lo: 5432, Hi: 5432}},
					{Prefix: netip.MustParsePrefix("2001:db8::/64")}},
				NAT64Prefixes: prefixes("2001:db8:64::/96"),
			},
		},
		Subnets:  prefixes("10.9.8.0/24", "fd00:9::/64"),
		StateDir: "/tmp/s",
	}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.chainList("/tmp/ipam")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		t.Fatalf("libcni refuses the conflist: %v\n%s", err, raw)
	}
	if list.Name != DefaultBridge || list.CNIVersion != "1.0.0" || len(list.Plugins) != 2 ||
		list.Plugins[0].Network.Type != "bridge" || list.Plugins[1].Network.Type != "doorman" {
		t.Fatalf("conflist %s: want network %s v1.0.0 with bridge then doorman", raw, DefaultBridge)
	}
	var bridge struct {
		Bridge    string `json:"bridge"`
		IsGateway bool   `json:"isGateway"`
		IPMasq    *bool  `json:"ipMasq"`
		IPAM      struct {
			Type    string                `json:"type"`
			DataDir string                `json:"dataDir"`
			Ranges  [][]map[string]string `json:"ranges"`
			Routes  []map[string]string   `json:"routes"`
		} `json:"ipam"`
		DNS struct {
			Nameservers []string `json:"nameservers"`
		} `json:"dns"`
	}
	if err := json.Unmarshal(list.Plugins[0].Bytes, &bridge); err != nil {
		t.Fatal(err)
	}
	if bridge.Bridge != DefaultBridge || !bridge.IsGateway || bridge.IPMasq == nil || *bridge.IPMasq {
		t.Errorf("bridge entry %s: want isGateway and ipMasq false (doorman run masquerades itself)", list.Plugins[0].Bytes)
	}
	if bridge.IPAM.Type != "host-local" || bridge.IPAM.DataDir != "/tmp/ipam" ||
		!reflect.DeepEqual(bridge.IPAM.Ranges, [][]map[string]string{{{"subnet": "10.9.8.0/24"}}, {{"subnet": "fd00:9::/64"}}}) ||
		!reflect.DeepEqual(bridge.IPAM.Routes, []map[string]string{{"dst": "0.0.0.0/0"}, {"dst": "::/0"}}) {
		t.Errorf("ipam %+v: want host-local in /tmp/ipam, one range and one default route per family", bridge.IPAM)
	}
	var doorman map[string]any
	if err := json.Unmarshal(list.Plugins[1].Bytes, &doorman); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"type": "doorman", "mode": "allowlist",
		"allowedHosts":     []any{"api.example.com", "*.github.com:443"},
		"resolvers":        []any{"203.0.113.53", "2001:db8::53"},
		"allowICMP":        true,
		"allowDirect":      []any{"203.0.113.7:5432", "2001:db8::/64"},
		"stateDir":         "/tmp/s",
		"logDir":           "/tmp/l",
		"upstreamResolver": "203.0.113.53:53",
		"nat64Prefixes":    []any{"2001:db8:64::/96"},
	}
	if !reflect.DeepEqual(doorman, want) {
		t.Errorf("doorman entry:\n got %v\nwant %v", doorman, want)
	}
	// The policy round-trips through the plugin's own parser.
	p, err := conf.ParseJSON(list.Plugins[1].Bytes)
	if err != nil || !p.Equal(c.Policy) {
		t.Errorf("policy in the conflist parses to %v (%v), want %v", p, err, c.Policy)
	}
}

func TestChainListModeNone(t *testing.T) {
	c, err := Config{Spec: spec.Spec{Policy: mustPolicy(t, conf.ModeNone), Resolvers: addrs("203.0.113.53")}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.chainList("/x")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := conf.ParseJSON(list.Plugins[1].Bytes)
	if err != nil || p.Mode != conf.ModeNone {
		t.Errorf("mode none: the doorman entry %s parses to %v, %v", list.Plugins[1].Bytes, p, err)
	}
	if _, err := libcni.ConfListFromBytes(loopbackList()); err != nil {
		t.Errorf("loopback conflist: %v", err)
	}
}
