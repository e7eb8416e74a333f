package main

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/proxy/launch"
)

// `doorman proxy` takes its config file and nothing else: a setting given
// as a flag is refused, as is a --sandbox that is not the file's; a
// missing file is an error naming it.
func TestProxyConfigFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy-config.json")
	cfg := launch.Config{Sandbox: "sb", PolicyFile: "/nonexistent", Listeners: launch.Listeners{Addrs: []string{"127.0.0.1:0"}}}
	if err := cfg.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", path, "--resolver", "203.0.113.53"}, 2, "flag provided but not defined: -resolver"},
		{[]string{"--sandbox", "sb", "--policy", "/p", "--listen", "127.0.0.1:0"}, 2, "flag provided but not defined: -policy"},
		{[]string{"--sandbox", "sb"}, 2, "usage: doorman proxy --config FILE"},
		{[]string{"--config", path, "--sandbox", "other"}, 1, `--sandbox "other": ` + path + ` is the config of sandbox "sb"`},
		{[]string{"--config", path + ".missing"}, 1, path + ".missing"},
	} {
		var stderr bytes.Buffer
		if code := runProxy(tc.args, &stderr, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("doorman proxy %q: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// What the flags of a proxy run by hand set is a key of its config file
// now: a bad allowDirect, resolver or NAT64 prefix there is an error
// naming the key, the value and why, and the proxy does not start.
func TestProxyConfigValues(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"allowDirect", `["db.example.com"]`, `"db.example.com"`},
		{"resolvers", `["203.0.113.53:53", "dns.example"]`, `"dns.example"`},
		{"nat64Prefixes", `["2001:db8:64::/95"]`, `nat64Prefixes[0] "2001:db8:64::/95": length /95: RFC 6052 lays out IPv4 addresses after a prefix of /32, /40, /48, /56, /64 or /96 only`},
	} {
		path := filepath.Join(t.TempDir(), "proxy-config.json")
		os.WriteFile(path, []byte(`{"sandbox": "sb", "policyFile": "/p", "listeners": {"addrs": ["127.0.0.1:0"]}, "`+tc.key+`": `+tc.value+`}`), 0o600)
		var stderr bytes.Buffer
		if code := runProxy([]string{"--config", path}, &stderr, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.key) || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s %s: exit %d, stderr %q; want 1 and %q", tc.key, tc.value, code, stderr.String(), tc.want)
		}
	}
}

// `doorman hook` and `doorman run` take --nat64-prefix: a bad one is
// an error naming the flag, the value and why, before anything is done.
func TestHookAndRunNAT64Flag(t *testing.T) {
	want := `--nat64-prefix "64:ff9b::/64": the well-known prefix 64:ff9b::/96 is a /96 only`
	var stderr bytes.Buffer
	if code := runHook([]string{"--limits-config", "/nonexistent", "--otlp-config", "/nonexistent", "--nat64-prefix", "64:ff9b::1/64", "createRuntime"}, &stderr, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), `--nat64-prefix "64:ff9b::1/64": host bits set: did you mean 64:ff9b::/64?`) {
		t.Errorf("doorman hook: exit %d, stderr %q", code, stderr.String())
	}
	fs := flag.NewFlagSet("doorman run", flag.ContinueOnError)
	var f runFlags
	f.register(fs)
	if err := fs.Parse([]string{"--nat64-prefix", "2001:db8:64::/96", "--nat64-prefix", "64:ff9b::/64", "true"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.config(&stderr); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("doorman run: %v, want %q", err, want)
	}
	f.nat64 = f.nat64[:1]
	if cfg, err := f.config(&stderr); err != nil || !slices.Equal(cfg.NAT64Prefixes, []netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96")}) {
		t.Errorf("doorman run: %+v, %v", cfg.NAT64Prefixes, err)
	}
}
