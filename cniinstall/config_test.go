package cniinstall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	cniplugin "github.com/doorman-net/doorman/plugin"
)

func TestValidateConfigDefaults(t *testing.T) {
	c, err := ValidateConfig([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, DefaultConfig()) {
		t.Errorf("got %+v, want the defaults", c)
	}
	if c.Mode != "allowlist" || len(c.AllowedHosts) != 0 || c.AllowedHosts == nil ||
		!reflect.DeepEqual(c.ExcludeNamespaces, []string{"kube-system"}) || c.ClusterDomain != "cluster.local" {
		t.Errorf("defaults %+v", c)
	}
	// An empty excludeNamespaces is kept: it excludes none.
	c, err = ValidateConfig([]byte(`{"excludeNamespaces": []}`))
	if err != nil || c.ExcludeNamespaces == nil || len(c.ExcludeNamespaces) != 0 {
		t.Errorf("empty excludeNamespaces: %+v, %v", c, err)
	}
}

func TestValidateConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   []string // each must be in the error
	}{
		{`[]`, []string{"not a JSON object"}},
		{`null`, []string{"not a JSON object"}},
		{`{"mode": "allowlst"}`, []string{`mode: invalid mode "allowlst"`}},
		{`{"modes": "open"}`, []string{`unknown key "modes"`, "the keys are mode,"}},
		{`{"mode": 1}`, []string{"mode 1: want a string"}},
		{`{"mode": null}`, []string{"mode null"}},
		{`{"allowedHosts": ["ok.example.com", "*"]}`, []string{`allowedHosts[1]: "*"`}},
		{`{"allowedHosts": "example.com"}`, []string{`allowedHosts "example.com": want an array of strings`}},
		{`{"allowedHosts": [null]}`, []string{`allowedHosts [null]`}},
		{`{"excludeNamespaces": ["kube-system", "Kube_System"]}`, []string{`excludeNamespaces[1] "Kube_System": not a namespace name`}},
		{`{"excludeNamespaces": ["` + strings.Repeat("a", 64) + `"]}`, []string{"longer than 63"}},
		{`{"clusterDomain": "*.cluster.local"}`, []string{`clusterDomain "*.cluster.local": a wildcard`}},
		{`{"clusterDomain": "Cluster.Local."}`, []string{`clusterDomain "Cluster.Local.": not in canonical form: write "cluster.local"`}},
		{`{"clusterDomain": "10.0.0.1"}`, []string{"an address"}},
		{`{"serviceCIDRs": ["10.96.0.1/12"]}`, []string{`serviceCIDRs[0] "10.96.0.1/12": host bits set: did you mean 10.96.0.0/12?`}},
		{`{"podCIDRs": ["10.244.0.0"]}`, []string{`podCIDRs[0] "10.244.0.0": not a CIDR prefix`}},
		{`{"allowDirect": ["db.example.com"]}`, []string{`allowDirect[0] "db.example.com": only an IP address or CIDR`}},
		{`{"allowDirect": ["10.0.0.1/8"]}`, []string{`allowDirect[0]`, "10.0.0.1/8"}},
		{`{"stateDir": "run/doorman"}`, []string{`stateDir "run/doorman": want a clean absolute path`}},
		{`{"logDir": "/var/log/../log"}`, []string{`logDir "/var/log/../log"`}},
		{`{"otlpEndpoint": "ftp://collector.example.com"}`, []string{`otlpEndpoint "ftp://collector.example.com"`}},
		{`{"otlpInsecure": true}`, []string{"need an otlpEndpoint"}},
		{`{"otlpEndpoint": "collector.example.com:4318", "otlpHeaders": {"bad name": "x"}}`, []string{`otlpHeaders "bad name"`}},
		{`{"otlpHeaders": ["x"]}`, []string{`otlpHeaders ["x"]: want an object of strings`}},
		{`{"dnsFilter": "false"}`, []string{`dnsFilter "false": want true or false`}},
		{`{"hostLayer": 0}`, []string{`hostLayer 0: want true or false`}},
		{`{"allowICMP": "yes"}`, []string{`allowICMP "yes": want true or false`}},
		// The plugin's other keys: the plugin's parser judges them.
		{`{"resolvers": ["203.0.113.53", "dns.example"]}`, []string{`resolvers[1] "dns.example": not an IP address`}},
		{`{"upstreamResolver": "dns.example:53"}`, []string{`upstreamResolver "dns.example:53": "dns.example" is not an IP address`}},
		{`{"policyDir": "policies"}`, []string{`policyDir "policies": want a clean absolute path`}},
		{`{"type": "doorman"}`, []string{`unknown key "type"`}}, // the CNI's keys are not the installer's
		// Every problem at once.
		{`{"mode": "x", "allowDirect": ["a.example"], "bogus": 1}`, []string{`mode: invalid mode "x"`, "allowDirect[0]", `unknown key "bogus"`}},
	} {
		c, err := ValidateConfig([]byte(tc.config))
		if err == nil {
			t.Errorf("%s: accepted: %+v", tc.config, c)
			continue
		}
		if c != nil {
			t.Errorf("%s: a config came back with the error", tc.config)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.config, err, w)
			}
		}
	}
}

// TestValidateEntry: the plugin's view of an entry accepts the CNI's own
// keys besides the config's, and nothing else.
func TestValidateEntry(t *testing.T) {
	entry := DefaultConfig().Entry("", "")
	if _, err := ValidateEntry(entry); err != nil {
		t.Fatalf("%s: %v", entry, err)
	}
	if _, err := ValidateConfig(entry); err == nil || !strings.Contains(err.Error(), `unknown key "capabilities"`) {
		t.Errorf("ValidateConfig of an entry: %v", err)
	}
	withCNI := `{"type": "doorman", "name": "k", "cniVersion": "1.0.0", "runtimeConfig": {}, "prevResult": {}, "args": {}, "capabilities": {}, "mode": "none"}`
	if c, err := ValidateEntry([]byte(withCNI)); err != nil || c.Mode != "none" {
		t.Errorf("%v, %v", c, err)
	}
	if _, err := ValidateEntry([]byte(`{"type": "doorman", "resolverz": []}`)); err == nil {
		t.Error("unknown key accepted")
	}
}

// TestBadConfigChangesNothing: Run refuses a bad --config before it
// touches the node.
func TestBadConfigChangesNothing(t *testing.T) {
	n := newNode(t, map[string][]byte{
		"10-flannel.conflist": testdata(t, "10-flannel.conflist"),
		"20-mynet.conf":       testdata(t, "10-mynet.conf"),
	})
	cfg := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(cfg, []byte(`{"mode": "allowlist", "allowedHosts": ["https://api.example.com/"]}`), 0o644)
	snap := n.snapshot(t)
	for _, o := range []Options{
		{BinDir: n.binDir, ConfDir: n.confDir, ConfigFile: cfg, Binary: n.binary, Once: true},
		{BinDir: n.binDir, ConfDir: n.confDir, ConfigFile: cfg, Binary: n.binary},
		{BinDir: n.binDir, ConfDir: n.confDir, ConfigFile: filepath.Join(t.TempDir(), "missing.json"), Binary: n.binary, Once: true},
	} {
		err := Run(context.Background(), o, nil)
		var cerr *ConfigError
		if !errors.As(err, &cerr) {
			t.Fatalf("err %v, want a ConfigError", err)
		}
		if !strings.Contains(err.Error(), "--config "+o.ConfigFile) {
			t.Errorf("error %q does not name the file", err)
		}
		t.Log(err)
	}
	n.assertUnchanged(t, snap)
}

// Every key the plugin reads survives the installer: a --config that
// sets one gets an entry that sets it, so that none is dropped on the
// way to the node (plugin.Keys is the list; a key added there and not
// here fails this test).
func TestConfigKeepsEveryPluginKey(t *testing.T) {
	values := map[string]string{
		"mode": `"none"`, "allowedHosts": `["api.example.com"]`, "excludeNamespaces": `["kube-system"]`,
		"clusterDomain": `"cluster.local"`, "serviceCIDRs": `["10.96.0.0/12"]`, "podCIDRs": `["10.244.0.0/16"]`, "nat64Prefixes": `["2001:db8:64::/96"]`,
		"allowDirect": `["203.0.113.7"]`, "resolvers": `["203.0.113.53"]`, "upstreamResolver": `"203.0.113.53"`,
		"policyDir": `"/etc/doorman/pods"`, "stateDir": `"/run/doorman"`, "logDir": `"/var/log/doorman"`,
		"otlpEndpoint": `"collector.example.com:4318"`, "otlpInsecure": `true`, "otlpHeaders": `{"x-team": "ci"}`,
		"dnsFilter": `false`, "hostLayer": `false`, "allowICMP": `true`,
		"inspect": `{"github.com": {"allow": [{"method": "GET"}], "default": "deny"}}`,
		"caDir":   `"/var/lib/doorman/ca"`, "upstreamCAFile": `"/etc/ssl/certs/ca-certificates.crt"`,
		"limits":      `{"connections": 100}`,
		"proxyLimits": `{"memory": "64Mi"}`,
		"agent":       `{"wait": "3s"}`,
	}
	var parts []string
	for _, k := range cniplugin.Keys {
		v, ok := values[k]
		if !ok {
			t.Fatalf("no sample value for the plugin's key %q", k)
		}
		parts = append(parts, fmt.Sprintf("%q: %s", k, v))
	}
	c, err := ValidateConfig([]byte("{" + strings.Join(parts, ", ") + "}"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range cniplugin.Keys {
		if _, ok := got[k]; !ok {
			t.Errorf("the installer's entry drops %q: %s", k, out)
		}
	}
}
