package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

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

// GC from a runtime that does not know a running container (a second
// runtime sharing the network's name, CRI-O beside Podman: the case for
// which CNI has disableGC) tears its sandbox down while the interface
// plugin leaves its veth in place, as the bridge plugin's GC does. The
// container must not come out of it with a network doorman no longer
// sees: its namespace keeps a deny-all ruleset and the host-side layer
// stays; the rest of the sandbox goes, and those two with the container's
// DEL.
func TestCNIGCRunningContainerFailsClosed(t *testing.T) {
	e := newCNIEnv(t)
	list := e.conflist(nil)
	c := e.newContainer()
	e.mustAdd(c, list)
	st := e.state(c)
	// The other runtime: its own libcni cache, which has no attachment
	// of c, so libcni synthesizes no DEL and only the plugins' GC runs.
	other := libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)
	if err := e.net.InHost(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return other.GCNetworkList(ctx, list, &libcni.GCArgs{})
	}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	waitGone(t, st.PID)
	if _, err := os.Stat(filepath.Join(e.stateDir, c.key)); !os.IsNotExist(err) {
		t.Error("GC left the state of the stale attachment")
	}
	if !tablePresent(t, c) {
		t.Error("GC removed every rule from a namespace that still exists: the container's network is open")
	}
	for _, target := range []struct{ name, addr string }{{evilName, evilAddr4.String()}, {apiName, apiAddr4.String()}} {
		if r := curl(t, c.ns, e.caFile, "--resolve", target.name+":443:"+target.addr, "https://"+target.name+"/"); r.exit == 0 {
			t.Errorf("%s reached after GC: %+v", target.name, r)
		}
	}
	if n := e.evil.Requests(); n != 0 {
		t.Errorf("evil served %d requests after GC", n)
	}
	// The host-side layer stays for a workload that would flush the
	// ruleset, until the DEL of the runtime that knows the container.
	if !hostLayerHolds(t, e.net.HostPath(), c.key) {
		t.Error("GC removed the host-side layer of a namespace that still exists")
	}
	if err := e.del(c); err != nil {
		t.Fatalf("DEL after GC: %v", err)
	}
	if hostLayerHolds(t, e.net.HostPath(), c.key) {
		t.Error("the host-side layer outlived the container's DEL")
	}
	if tablePresent(t, c) {
		t.Error("the deny-all table outlived the container's DEL")
	}
}
