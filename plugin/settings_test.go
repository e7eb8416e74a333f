package plugin

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/spec"
)

// An entry with none of doorman's keys has the documented defaults; the
// CNI's keys are the CNI's.
func TestParseEntryDefaults(t *testing.T) {
	s, err := ParseEntry([]byte(`{"type": "doorman", "name": "k8s", "cniVersion": "0.3.1", "capabilities": {"dns": true},
		"runtimeConfig": {"dns": null}, "prevResult": {}, "args": {}, "dns": {"nameservers": ["203.0.113.53"]},
		"cni.dev/valid-attachments": []}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Settings{
		Spec: spec.Spec{
			Policy:    &conf.Policy{Mode: conf.ModeAllowlist},
			LogDir:    hostconf.DefaultLogDir,
			DNSFilter: true,
			HostLayer: true,
			Proxy:     spec.Proxy{CADir: hostconf.DefaultCADir},
		},
		ExcludeNamespaces: []string{"kube-system"},
		ClusterDomain:     "cluster.local",
		StateDir:          hostconf.DefaultStateDir,
	}
	if !s.Policy.Equal(want.Policy) {
		t.Errorf("default policy %v, want %v", s.Policy, want.Policy)
	}
	s.Policy = want.Policy
	if !reflect.DeepEqual(s, want) {
		t.Errorf("defaults %+v\nwant %+v", s, want)
	}
	// An empty excludeNamespaces excludes none.
	if s, err := ParseEntry([]byte(`{"excludeNamespaces": []}`)); err != nil || s.ExcludeNamespaces == nil || len(s.ExcludeNamespaces) != 0 {
		t.Errorf("excludeNamespaces []: %v, %v", s.ExcludeNamespaces, err)
	}
}

// Every key is read into its typed setting.
func TestParseEntry(t *testing.T) {
	s, err := ParseEntry([]byte(`{"type": "doorman", "mode": "open", "allowedHosts": ["api.example.com", "*.github.com:443"],
		"excludeNamespaces": ["kube-system", "monitoring"], "clusterDomain": "k8s.example", "serviceCIDRs": ["10.96.0.0/12"],
		"podCIDRs": ["10.244.0.0/16", "fd00:10:244::/56"], "allowDirect": ["10.0.0.5:5432"], "resolvers": ["203.0.113.53"],
		"nat64Prefixes": ["2001:db8:64::/96", "64:ff9b:1:a00::/64"], "upstreamResolver": "203.0.113.54:5353", "policyDir": "/etc/doorman/pods", "stateDir": "/run/dm", "logDir": "/var/log/dm",
		"otlpEndpoint": "collector.example.com:4318", "otlpInsecure": true, "otlpHeaders": {"Authorization": "Bearer x"},
		"dnsFilter": false, "hostLayer": false, "allowICMP": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Policy.Mode != conf.ModeOpen || !slices.Equal(s.Policy.Hosts(), []string{"api.example.com", "*.github.com:443"}) ||
		!slices.Equal(s.ExcludeNamespaces, []string{"kube-system", "monitoring"}) || s.ClusterDomain != "k8s.example" ||
		!slices.Equal(s.ServiceCIDRs, []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}) || len(s.PodCIDRs) != 2 ||
		!slices.Equal(s.NAT64Prefixes, []netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96"), netip.MustParsePrefix("64:ff9b:1:a00::/64")}) ||
		len(s.AllowDirect) != 1 || s.AllowDirect[0].String() != "10.0.0.5:5432" ||
		!slices.Equal(s.Resolvers, []netip.Addr{netip.MustParseAddr("203.0.113.53")}) ||
		!slices.Equal(s.UpstreamResolvers, []netip.AddrPort{netip.MustParseAddrPort("203.0.113.54:5353")}) ||
		s.PolicyDir != "/etc/doorman/pods" || s.StateDir != "/run/dm" || s.LogDir != "/var/log/dm" ||
		s.OTLP.Endpoint != "collector.example.com:4318" || !s.OTLP.Insecure || s.OTLP.Headers["Authorization"] != "Bearer x" ||
		s.DNSFilter || s.HostLayer || !s.AllowICMP {
		t.Errorf("settings %+v", s)
	}
}

// A bad value is an error naming the key, the value and why; all of them
// at once. The settings that come back with the error are what DEL uses:
// the good values and the defaults of the bad.
func TestParseEntryErrors(t *testing.T) {
	s, err := ParseEntry([]byte(`{"type": "doorman", "mode": "permissive", "resolvers": ["dns.example"], "stateDir": "/run/dm",
		"logDir": "log", "alowedHosts": [], "nat64Prefixes": ["64:ff9b::/96", "2001:db8:64::/97", "nat64.example"]}`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`unknown key "alowedHosts": the keys are mode, allowedHosts,`, `mode: invalid mode "permissive"`,
		`resolvers[0] "dns.example": not an IP address`, `logDir "log": want a clean absolute path`,
		`nat64Prefixes[1] "2001:db8:64::/97": length /97: RFC 6052 lays out IPv4 addresses after a prefix of /32, /40, /48, /56, /64 or /96 only`,
		`nat64Prefixes[2] "nat64.example": not an IPv6 prefix`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if s == nil || s.StateDir != "/run/dm" || s.LogDir != hostconf.DefaultLogDir {
		t.Errorf("settings with the error: %+v", s)
	}
	if s, err := ParseSettings([]byte(`{"name": "k8s"}`)); s != nil || err == nil || !strings.Contains(err.Error(), `unknown key "name"`) {
		t.Errorf("ParseSettings of a CNI key: %v, %v", s, err)
	}
	// The policy's entries are named by their index.
	if _, err := ParseEntry([]byte(`{"allowedHosts": ["api.example.com", "a*b.example.com"]}`)); err == nil ||
		!strings.Contains(err.Error(), `allowedHosts[1]: "a*b.example.com": wildcard`) {
		t.Errorf("bad entry: %v", err)
	}
}

// FuzzParseEntry checks that ParseEntry never panics, that it returns
// settings with or without an error (DEL needs them), and that accepted
// settings are complete.
func FuzzParseEntry(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseEntry(data)
		if s == nil || s.Policy == nil || s.StateDir == "" || s.LogDir == "" {
			t.Fatalf("settings %+v (%v)", s, err)
		}
		if err != nil {
			return
		}
		_, err = ParseSettings(data)
		if err == nil {
			return
		}
		// ParseSettings refuses only the CNI's keys more.
		if !strings.Contains(err.Error(), "unknown key") {
			t.Fatalf("ParseEntry accepts what ParseSettings refuses for another reason than a CNI key: %v", err)
		}
	})
}

// The inspect key is the network policy's request rules; rules that do
// not parse fail the entry, naming the key.
func TestParseEntryInspect(t *testing.T) {
	s, err := ParseEntry([]byte(`{"allowedHosts": ["github.com"], "inspect": {"github.com": {"allow": [{"method": "GET"}], "default": "deny"}}}`))
	if err != nil || len(s.Policy.Inspect) != 1 || s.Policy.Inspect[0].Host != "github.com" {
		t.Fatalf("inspect: %v, %v", s.Policy, err)
	}
	_, err = ParseEntry([]byte(`{"inspect": {"github.com": {"allow": [{"method": "GET", "colour": "red"}]}}}`))
	if err == nil || !strings.Contains(err.Error(), `inspect github.com: allow[0]: "colour": unknown key`) {
		t.Errorf("a rule that does not parse: %v", err)
	}
	if _, err := ParseEntry([]byte(`{"upstreamCAFile": "roots.pem"}`)); err == nil || !strings.Contains(err.Error(), `upstreamCAFile "roots.pem"`) {
		t.Errorf("a relative upstreamCAFile: %v", err)
	}
}

func TestAgentSettings(t *testing.T) {
	s, err := ParseSettings([]byte(`{"agent": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Agent; a == nil || a.Dir != "/run/doorman/agent" || time.Duration(a.Wait) != 5*time.Second || a.WithoutAgent != "refuse" || a.Annotations != "narrow" {
		t.Errorf("defaults %+v", s.Agent)
	}
	if s, err := ParseSettings([]byte(`{}`)); err != nil || s.Agent != nil {
		t.Errorf("no agent key: %+v, %v", s.Agent, err)
	}
	for _, bad := range []string{
		`{"agent": {"withoutAgent": "open"}}`, `{"agent": {"annotations": "widen"}}`,
		`{"agent": {"wait": "2m"}}`, `{"agent": {"wait": 5}}`, `{"agent": {"dir": "run"}}`, `{"agent": {"sock": "/x"}}`,
	} {
		if _, err := ParseSettings([]byte(bad)); err == nil || !strings.Contains(err.Error(), "agent") {
			t.Errorf("%s: err %v", bad, err)
		}
	}
}

// entrySamples hold a value other than the default for each of Keys.
var entrySamples = map[string]string{
	"mode": `"open"`, "allowedHosts": `["api.example.com", "*.github.com:443", "203.0.113.0/24"]`,
	"excludeNamespaces": `[]`, "clusterDomain": `"k8s.example"`, "serviceCIDRs": `["10.96.0.0/12"]`,
	"podCIDRs": `["10.244.0.0/16", "fd00:10:244::/56"]`, "nat64Prefixes": `["2001:db8:64::/96"]`,
	"allowDirect": `["10.0.0.5:5432", "2001:db8::/64"]`, "resolvers": `["203.0.113.53", "2001:db8::53"]`,
	"upstreamResolver": `"203.0.113.54:5353"`, "policyDir": `"/etc/doorman/pods"`, "stateDir": `"/run/dm"`,
	"logDir": `"/var/log/dm"`, "otlpEndpoint": `"collector.example.com:4318"`, "otlpInsecure": `true`,
	"otlpHeaders": `{"Authorization": "Bearer x"}`, "dnsFilter": `false`, "hostLayer": `false`, "allowICMP": `true`,
	"inspect":        `{"api.example.com": {"deny": [{"method": "POST", "path": "/v1/files"}], "default": "allow"}}`,
	"caDir":          `"/var/lib/dm/ca"`,
	"upstreamCAFile": `"/etc/ssl/roots.pem"`,
	"limits":         `{"connections": 100, "idleTimeout": "0s", "sniffTimeout": "3s"}`,
	"proxyLimits":    `{"memory": "64Mi", "pids": "max", "cpuWeight": 50}`,
	"agent":          `{"dir": "/run/dm/agent", "wait": "3s", "withoutAgent": "default", "annotations": "replace"}`,
}

// Entry writes every key ParseEntry reads: each key's value, read, written
// and read again, gives the same settings, and a key added to Keys without
// a writer (or a sample here) fails. doorman run hands its spec to the
// plugin this way.
func TestEntryRoundTrip(t *testing.T) {
	for _, key := range Keys {
		sample, ok := entrySamples[key]
		if !ok {
			t.Errorf("key %s has no sample in entrySamples: add one", key)
			continue
		}
		entry := `{"` + key + `": ` + sample + `}`
		switch key {
		case "otlpInsecure", "otlpHeaders":
			entry = `{"otlpEndpoint": "collector.example.com:4318", "` + key + `": ` + sample + `}`
		case "inspect":
			entry = `{"allowedHosts": ["api.example.com"], "inspect": ` + sample + `}`
		}
		s, err := ParseSettings([]byte(entry))
		if err != nil {
			t.Errorf("%s: %v", entry, err)
			continue
		}
		e, err := s.Entry()
		if err != nil {
			t.Errorf("%s: Entry: %v", key, err)
			continue
		}
		if _, ok := e[key]; !ok {
			t.Errorf("%s: Entry leaves the key out: %v", key, e)
		}
		data, _ := json.Marshal(e)
		back, err := ParseSettings(data)
		if err != nil {
			t.Errorf("%s: Entry wrote %s, which does not parse: %v", key, data, err)
			continue
		}
		if !back.Policy.Equal(s.Policy) {
			t.Errorf("%s: policy %v, written and read back %v", key, s.Policy, back.Policy)
		}
		back.Policy = s.Policy
		if !reflect.DeepEqual(back, s) {
			t.Errorf("%s: %+v, written (%s) and read back %+v", key, s, data, back)
		}
	}
	if e, err := DefaultSettings().Entry(); err != nil || len(e) != 1 || e["mode"] != conf.ModeAllowlist {
		t.Errorf("the defaults: %v, %v; want mode allowlist alone", e, err)
	}
	two := DefaultSettings()
	two.UpstreamResolvers = []netip.AddrPort{netip.MustParseAddrPort("203.0.113.53:53"), netip.MustParseAddrPort("203.0.113.54:53")}
	if _, err := two.Entry(); err == nil || !strings.Contains(err.Error(), "upstreamResolver") {
		t.Errorf("two upstream resolvers: %v", err)
	}
}
