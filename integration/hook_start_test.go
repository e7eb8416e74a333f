package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/doorman-net/doorman/enforce/hostlayer"
)

// TestRuntimeStartCompletesHostLayer: Docker >= 28 gives a container its
// veth after the createRuntime hook has run. The hook then finds no host
// side to hold, and the sandbox records that the layer is still wanted; the
// runc wrapper adds it at `runc start`, when the engine has wired the
// network, and the label rises to match.
func TestRuntimeStartCompletesHostLayer(t *testing.T) {
	r := newRuncEnv(t)
	ns := r.net.NewNetns(t, "late")
	c := r.newContainer("late", withNetNS(ns.Path()), allowAPI(), withCaps("CAP_NET_RAW"))
	r.mustRunc("create", "--bundle", c.bundle, c.id)

	st := r.state(c)
	if st.HostLayer || !st.Spec.HostLayer || st.Label != "partial (container holds CAP_NET_RAW)" {
		t.Fatalf("after create, without a veth: host layer %v, wanted %v, label %q; want false, true, partial (container holds CAP_NET_RAW)",
			st.HostLayer, st.Spec.HostLayer, st.Label)
	}
	spec := hostlayer.Spec{Key: st.Key, SandboxNetNS: st.NetNS, AllowICMP: st.AllowICMP,
		Redirect: hostlayer.Redirect{TCP4: st.HostPort4, TCP6: st.HostPort6, DNS4: st.HostDNSPort4, DNS6: st.HostDNSPort6, DNSResolvers: st.Resolvers}}
	if err := hostlayer.Check(r.net.HostPath(), spec); err == nil {
		t.Fatalf("host-side layer present before the container has a veth")
	}

	// The engine wires the container between create and start.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := r.net.HostCommand(ctx, "ip", "link", "add", "dmlate0", "type", "veth", "peer", "name", "eth0", "netns", ns.Name()).CombinedOutput(); err != nil {
		t.Fatalf("add the container's veth: %v: %s", err, out)
	}

	// `runc start` through the wrapper; the real runc is replaced by
	// /bin/true: only the wrapper's part is under test here.
	cfg := filepath.Join(r.dir, "runtime.json")
	data, _ := json.Marshal(map[string]any{"runc": "/bin/true", "stateDir": r.stateDir, "logDir": r.logDir})
	if err := os.WriteFile(cfg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	start := r.net.HostCommand(ctx, doormanBin(), "runtime", "--root", r.runcRoot, "start", c.id)
	start.Env = append(os.Environ(), "DOORMAN_RUNTIME_CONFIG="+cfg)
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("doorman runtime start %s: %v: %s", c.id, err, out)
	}
	st = r.state(c)
	if !st.HostLayer || st.Label != "full" {
		t.Fatalf("after start: host layer %v, label %q; want the layer and full", st.HostLayer, st.Label)
	}
	if err := hostlayer.Check(r.net.HostPath(), spec); err != nil {
		t.Fatalf("host-side layer after start: %v", err)
	}

	// Deleting the container (its poststop hook) removes the layer.
	r.delete(c)
	if err := hostlayer.Check(r.net.HostPath(), spec); err == nil {
		t.Errorf("host-side layer left after the container was deleted")
	}
}
