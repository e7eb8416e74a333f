package main

import (
	"bytes"
	"flag"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/proxy/proxyconf"
)

// --config holds every setting: a flag beside it is refused, as is a
// --sandbox that is not the file's; a missing file is an error naming it.
func TestProxyConfigFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy-config.json")
	cfg := proxyconf.Config{Sandbox: "sb", PolicyFile: "/nonexistent", Listeners: proxyconf.Listeners{Addrs: []string{"127.0.0.1:0"}}}
	if err := cfg.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", path, "--resolver", "203.0.113.53"}, "--config holds every setting: --resolver goes in the file"},
		{[]string{"--config", path, "--sandbox", "other"}, `--sandbox "other": ` + path + ` is the config of sandbox "sb"`},
		{[]string{"--config", path + ".missing"}, path + ".missing"},
	} {
		var stderr bytes.Buffer
		if code := runProxy(tc.args, &stderr, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("doorman proxy %q: exit %d, stderr %q; want 1 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// --nat64-prefix reaches the proxy's config; a bad one is an error naming
// the flag, the value and why.
func TestProxyNAT64Flag(t *testing.T) {
	fs := flag.NewFlagSet("doorman proxy", flag.ContinueOnError)
	var f proxyFlags
	f.register(fs)
	if err := fs.Parse([]string{"--sandbox", "sb", "--policy", "/p", "--listen", "127.0.0.1:0", "--nat64-prefix", "2001:db8:64::/96"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.build(fs)
	if err != nil || !slices.Equal(cfg.NAT64Prefixes, []netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96")}) {
		t.Errorf("config %+v, %v", cfg, err)
	}
	var stderr bytes.Buffer
	want := `--nat64-prefix "2001:db8:64::/95": length /95: RFC 6052 lays out IPv4 addresses after a prefix of /32, /40, /48, /56, /64 or /96 only`
	if code := runProxy([]string{"--sandbox", "sb", "--policy", "/p", "--listen", "127.0.0.1:0", "--nat64-prefix", "2001:db8:64::/95"}, &stderr, &stderr); code != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
	}
}

// `doorman hook` and `doorman run` take --nat64-prefix too: a bad one is
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
