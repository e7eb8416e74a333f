package launch

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/spec"
)

func mustDirect(t *testing.T, ss ...string) []conf.Direct {
	t.Helper()
	var out []conf.Direct
	for _, s := range ss {
		d, err := conf.ParseDirect(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// A config file round-trips, is readable by its owner only, and names its
// settings with the documented keys.
func TestConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy-config.json")
	want := Config{
		Sandbox:      "team-a/web-0",
		PodUID:       "0b1c2d3e-0000-4000-8000-000000000001",
		PolicyFile:   "/run/doorman/ctr1-eth0/policy",
		LogFile:      "/var/log/doorman/ctr1-eth0.log",
		DrainTimeout: spec.Duration(500 * time.Millisecond),
		Listeners:    Listeners{TCP: []int{3, 4}, DNSUDP: []int{5}, DNSTCP: []int{6}},
		Proxy: spec.Proxy{
			AllowDirect:   mustDirect(t, "203.0.113.7:5432", "2001:db8::/64"),
			OTLP:          spec.OTLP{Endpoint: "https://otel.example.test:4318", Headers: map[string]string{"Authorization": "Bearer x"}},
			ClusterNames:  []spec.NameScope{{Domain: "cluster.local", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}},
			NAT64Prefixes: []netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96")},
			Limits:        spec.Limits{Connections: 100, IdleTimeout: new(spec.Duration(0)), DNSQueriesPerSecond: 50},
		},
	}
	if err := want.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config file mode %v, %v; want 0600 (it carries the OTLP headers)", fi.Mode(), err)
	}
	got, err := Load(path)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %+v, %v\nwant %+v", got, err, want)
	}
	data, _ := os.ReadFile(path)
	var raw map[string]any
	json.Unmarshal(data, &raw)
	for _, k := range []string{"sandbox", "policyFile", "logFile", "allowDirect", "otlp", "drainTimeout", "nat64Prefixes", "limits", "listeners"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("no key %q in %s", k, data)
		}
	}
	if raw["drainTimeout"] != "500ms" || !reflect.DeepEqual(raw["allowDirect"], []any{"203.0.113.7:5432", "2001:db8::/64"}) {
		t.Errorf("durations and entries are written as text: %s", data)
	}
}

func TestConfigRefuses(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"policyFile":"p","listeners":{"tcp":[3]}}`, "no sandbox"},
		{`{"sandbox":"s","listeners":{"tcp":[3]}}`, "no policyFile"},
		{`{"sandbox":"s","policyFile":"p","listeners":{}}`, "no listener"},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[1]}}`, "listeners.tcp[0] 1: not an inherited descriptor"},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"resolver":["x"]}`, `"resolver": unknown key`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"allowDirect":["db.example"]}`, `"db.example": only an IP address or CIDR`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"drainTimeout":"-1s"}`, `drainTimeout "-1s": a negative duration`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"otlp":{"endpoint":"https://x.example","insecure":true}}`, `otlp.endpoint "https://x.example": https URL with insecure set`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"sniffTimeout":"ten seconds"}`, `sniffTimeout "ten seconds": want a duration`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"connections":"many"}}`, `limits.connections "many": want an integer`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]}} {}`, "more than one JSON value"},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"clusterNames":[{"domain":"Cluster.Local","prefixes":["10.96.0.0/12"]}]}`, `clusterNames[0].domain "Cluster.Local"`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"clusterNames":[{"domain":"cluster.local","prefixes":["10.96.0.1/12"]}]}`, `clusterNames[0].prefixes[0] "10.96.0.1/12"`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"nat64Prefixes":["2001:db8:64::/80"]}`, `nat64Prefixes[0] "2001:db8:64::/80": length /80`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"nat64Prefixes":["10.0.0.0/8"]}`, `nat64Prefixes[0] "10.0.0.0/8": not an IPv6 prefix`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"connections":-5}}`, "limits.connections: -5 is negative"},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"pendingBytes":1000}}`, "limits.pendingBytes: 1000 is less than"},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"idleTimeout":"soon"}}`, `limits.idleTimeout "soon": want a duration`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"conections":5}}`, `limits "conections": unknown key`},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"bufferBytes":-1}}`, "limits.bufferBytes: -1 is negative"},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"bufferBytes":65536}}`, "limits.bufferBytes: 65536 is less than 1048576 bytes"},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"heartbeatTimeout":"100ms"}}`, "limits.heartbeatTimeout: 100ms is less than 1s"},
		{`{"sandbox":"s","policyFile":"p","listeners":{"tcp":[3]},"limits":{"heartbeatTimeout":"-2s"}}`, "negative duration"},
	} {
		if _, err := decode([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.json, err, tc.want)
		}
	}
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, []byte("{"), 0o600)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a broken file: %v, want an error naming it", err)
	}
}

// FuzzDecode checks that decodeConfig never panics and that what it
// accepts encodes and decodes again to an equal config.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decode(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("accepted %q, but it does not encode: %v", data, err)
		}
		back, err := decode(again)
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Fatalf("%q: encodes to %s, which decodes to %+v, %v; want %+v", data, again, back, err, c)
		}
	})
}
