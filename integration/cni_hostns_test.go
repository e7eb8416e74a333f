package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/enforce"
)

// A CNI_NETNS that names the runtime's own network namespace (a runtime's
// or an operator's mistake: cnitool with /proc/1/ns/net, a conflist used
// for a host-network container) is refused, naming CNI_NETNS and its
// value, with nothing applied: doorman's ruleset there would send every
// TCP connection of the host, the other sandboxes' proxies' upstream
// dials included, to this one sandbox's proxy.
func TestCNIRefusesRuntimeNetNS(t *testing.T) {
	e := newCNIEnv(t)
	id := "hostns" + strings.ReplaceAll(t.Name(), "/", "")[len("TestCNI"):]
	conf, _ := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": "dmnet", "type": "doorman",
		"mode": "allowlist", "allowedHosts": []string{apiName},
		"stateDir": e.stateDir, "logDir": e.logDir, "policyDir": e.policyDir,
		"upstreamResolver": e.net.DNS.String(),
		"prevResult": map[string]any{"cniVersion": "1.0.0",
			"interfaces": []any{map[string]any{"name": "eth0", "sandbox": e.net.HostPath()}},
			"ips":        []any{map[string]any{"address": "198.51.100.130/26", "interface": 0}}},
	})
	plugin := func(verb string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := e.net.HostCommand(ctx, doormanBin())
		cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + e.net.HostPath(),
			"CNI_IFNAME=eth0", "CNI_PATH=" + binDir, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.Stdin = bytes.NewReader(conf)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := plugin("ADD")
	// Whatever ADD did goes, so that a failure leaves nothing.
	t.Cleanup(func() { plugin("DEL") })
	if err == nil {
		t.Errorf("ADD into the runtime's own namespace succeeded: %s", out)
	} else if strings.Contains(out, `"ips"`) {
		t.Errorf("ADD printed a result before its error (it ran, then skel refused the namespace): %s", out)
	} else if !strings.Contains(out, "CNI_NETNS") || !strings.Contains(out, e.net.HostPath()) {
		t.Errorf("ADD error does not name CNI_NETNS and %s: %s", e.net.HostPath(), out)
	}
	if ok, err := enforce.Present(e.net.HostPath()); err != nil || ok {
		t.Errorf("doorman's table in the runtime's namespace after the refused ADD: %v %v", ok, err)
	}
	if pids := append(proxiesFor(id), supervisorsFor(id)...); len(pids) > 0 {
		t.Errorf("proxy processes after the refused ADD: %v", pids)
	}
}
