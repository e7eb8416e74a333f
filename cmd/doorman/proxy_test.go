package main

import (
	"bytes"
	"path/filepath"
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
