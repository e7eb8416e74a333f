package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// Sizes and target of BenchmarkCNIAdd.
const (
	benchCNIRounds = 30 // ADD+DEL pairs per conflist
	benchCNIWarmup = 2  // untimed ADD+DEL pairs per conflist first
	benchCNITarget = 15 // ms doorman may add to ADD, at the median
)

// BenchmarkCNIAdd compares the time of ADD and DEL through libcni, as a
// runtime runs them, for a bridge-only conflist and for the same bridge
// with doorman chained after it (the shape of cni_env_test.go's conflist),
// alternating the two. Doorman's ADD starts the sandbox's proxy and waits
// until it serves, and installs the ruleset; its DEL stops the proxy. It
// prints one table; see docs/benchmarks.md. It is one fixed experiment (b.N
// is not used): run it with -benchtime=1x.
func BenchmarkCNIAdd(b *testing.B) {
	env, dir := newBenchCNI(b)
	n := env.net
	// Whatever a failed round left enforced: its proxy must not outlive
	// the benchmark.
	b.Cleanup(func() {
		states, _ := sandbox.List(env.stateDir)
		for _, s := range states {
			sandbox.Teardown(env.stateDir, s.Key)
		}
	})
	lists := []*libcni.NetworkConfigList{env.conflist(b, dir, false), env.conflist(b, dir, true)}
	names := []string{"bridge", "bridge+doorman"}
	netns := []*testnet.Netns{n.NewNetns(b, "cnib"), n.NewNetns(b, "cnid")}
	inproc, rules := n.NewNetns(b, "cnie"), n.NewNetns(b, "cnia")

	for i := range lists {
		for w := range benchCNIWarmup {
			env.addDel(b, lists[i], netns[i], fmt.Sprintf("warm%d%d", i, w), i == 1)
		}
	}
	// Each round runs four tasks in rotating order: ADD+DEL of either
	// conflist through libcni, and, to show where doorman's share goes,
	// the same work in-process (sandbox.Enforce and Teardown, without
	// the plugin's exec) and the ruleset alone (enforce.ProbeFib, Apply,
	// Remove) in namespaces of their own.
	adds, dels, both := make([][]float64, 2), make([][]float64, 2), make([][]float64, 2)
	var enforces, teardowns, applies, probes, removes []float64
	benchRotate(benchCNIRounds, 4, func(r, task int) {
		switch task {
		case 0, 1:
			add, del := env.addDel(b, lists[task], netns[task], fmt.Sprintf("r%d-%d", r, task), false)
			adds[task] = append(adds[task], benchMs(add))
			dels[task] = append(dels[task], benchMs(del))
			both[task] = append(both[task], benchMs(add+del))
		case 2:
			e, t := env.enforceTeardown(b, inproc, fmt.Sprintf("inproc%d", r))
			enforces, teardowns = append(enforces, benchMs(e)), append(teardowns, benchMs(t))
		case 3:
			p, a, rm := env.ruleset(b, rules)
			probes, applies, removes = append(probes, benchMs(p)), append(applies, benchMs(a)), append(removes, benchMs(rm))
		}
	})

	t := &benchTable{
		title: fmt.Sprintf("BenchmarkCNIAdd: %d ADD+DEL pairs per conflist through libcni, alternating; %d cores", benchCNIRounds, runtime.NumCPU()),
		paths: names,
	}
	t.add("ADD, ms", "%.1f", adds...)
	t.add("DEL, ms", "%.1f", dels...)
	t.add("ADD+DEL, ms", "%.1f", both...)
	extra := benchPairedDiffs(adds[0], adds[1])
	r := t.add("doorman's share of ADD (round by round), ms", "%.1f", nil, extra)
	r.target = benchVerdict(fmt.Sprintf("< %d ms at the median", benchCNITarget), benchSpreadOf(extra).med < benchCNITarget)
	t.add("doorman's share of DEL (round by round), ms", "%.1f", nil, benchPairedDiffs(dels[0], dels[1]))
	t.print()

	parts := &benchTable{
		title: "Where doorman's share goes: the same work timed in-process, in the same rounds",
		paths: []string{"ms"},
	}
	parts.add("sandbox.Enforce (listeners, proxy started and ready, ruleset, state)", "%.1f", enforces)
	parts.add("  enforce.Apply alone (the ruleset batch), fresh namespace", "%.1f", applies)
	parts.add("  enforce.ProbeFib alone", "%.1f", probes)
	parts.add("sandbox.Teardown (proxy stopped, ruleset removed, state)", "%.1f", teardowns)
	parts.add("  enforce.Remove alone", "%.1f", removes)
	parts.print()

	b.ReportMetric(benchSpreadOf(adds[1]).med, "ADD-ms")
	b.ReportMetric(benchSpreadOf(extra).med, "doorman-ADD-ms")
	b.ReportMetric(benchSpreadOf(dels[1]).med, "DEL-ms")
	b.ReportMetric(0, "ns/op")
}

// benchPairedDiffs is b[i]-a[i] round by round.
func benchPairedDiffs(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = b[i] - a[i]
	}
	return out
}

func benchMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchCNI is BenchmarkCNIAdd's world: a fake internet, libcni with the
// binaries built by TestMain, and doorman's directories.
type benchCNI struct {
	net              *testnet.Net
	cni              *libcni.CNIConfig
	stateDir, logDir string
}

// newBenchCNI gives a CNI benchmark its testnet, libcni with a cache, and
// the state and log directories of the doorman plugin, all under dir.
func newBenchCNI(b *testing.B) (env *benchCNI, dir string) {
	dir = b.TempDir()
	return &benchCNI{
		net:      testnet.New(b),
		cni:      libcni.NewCNIConfigWithCacheDir([]string{binDir}, filepath.Join(dir, "cache"), nil),
		stateDir: filepath.Join(dir, "state"),
		logDir:   filepath.Join(dir, "log"),
	}, dir
}

// conflist is cni_env_test.go's network: a bridge with host-local IPAM on
// the range testnet keeps free, and, if withDoorman, doorman chained after
// it allowing one name.
func (e *benchCNI) conflist(b *testing.B, dir string, withDoorman bool) *libcni.NetworkConfigList {
	b.Helper()
	return e.conflistOn(b, dir, withDoorman, "198.51.100.128/26", "198.51.100.129")
}

// conflistOn is conflist with the bridge's IPv4 subnet and gateway.
func (e *benchCNI) conflistOn(b *testing.B, dir string, withDoorman bool, subnet4, gateway4 string) *libcni.NetworkConfigList {
	b.Helper()
	plugins := []any{
		map[string]any{
			"type":      "bridge",
			"bridge":    "dmbr0",
			"isGateway": true,
			"ipMasq":    false,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": filepath.Join(dir, "ipam"),
				"ranges": []any{
					[]any{map[string]any{"subnet": subnet4, "gateway": gateway4}},
					[]any{map[string]any{"subnet": "2001:db8:3::/64", "gateway": "2001:db8:3::1"}},
				},
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
			},
			"dns": map[string]any{"nameservers": []string{e.net.DNS.String(), e.net.DNS6.String()}},
		},
	}
	if withDoorman {
		policyDir := filepath.Join(dir, "policies")
		if err := os.MkdirAll(policyDir, 0o755); err != nil {
			b.Fatal(err)
		}
		plugins = append(plugins, map[string]any{
			"type":             "doorman",
			"mode":             "allowlist",
			"allowedHosts":     []string{benchName},
			"stateDir":         e.stateDir,
			"logDir":           e.logDir,
			"policyDir":        policyDir,
			"upstreamResolver": e.net.DNS.String(),
		})
	}
	data, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "dmnet", "plugins": plugins})
	if err != nil {
		b.Fatal(err)
	}
	l, err := libcni.ConfListFromBytes(data)
	if err != nil {
		b.Fatalf("conflist: %v", err)
	}
	return l
}

// addDel runs ADD then DEL of list for a container with id in ns, in the
// host namespace as a runtime would, and returns how long each took. With
// check, it also proves that ADD left an enforced sandbox with a live proxy
// and DEL removed it.
func (e *benchCNI) addDel(b *testing.B, list *libcni.NetworkConfigList, ns *testnet.Netns, id string, check bool) (add, del time.Duration) {
	b.Helper()
	rt := &libcni.RuntimeConf{ContainerID: "bench" + id, NetNS: ns.Path(), IfName: "eth0"}
	key := rt.ContainerID + "-" + rt.IfName
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := e.net.InHost(func() error {
		t0 := time.Now()
		_, err := e.cni.AddNetworkList(ctx, list, rt)
		add = time.Since(t0)
		if err != nil {
			e.cni.DelNetworkList(ctx, list, rt)
			return fmt.Errorf("ADD: %w", err)
		}
		if check {
			s, err := sandbox.Load(e.stateDir, key)
			if err != nil || !s.ProxyAlive() {
				e.cni.DelNetworkList(ctx, list, rt)
				return fmt.Errorf("after ADD, no enforced sandbox %s with a live proxy (%v)", key, err)
			}
		}
		t0 = time.Now()
		err = e.cni.DelNetworkList(ctx, list, rt)
		del = time.Since(t0)
		if err != nil {
			return fmt.Errorf("DEL: %w", err)
		}
		if check {
			if _, err := sandbox.Load(e.stateDir, key); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("after DEL, sandbox %s is still recorded (%v)", key, err)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatalf("%s, container %s: %v", list.Name, rt.ContainerID, err)
	}
	return add, del
}

// enforceTeardown enforces an allowlist on ns with sandbox.Enforce and the
// real doorman binary, as the plugin does but without its exec, then tears
// it down, and returns how long each took.
func (e *benchCNI) enforceTeardown(b *testing.B, ns *testnet.Netns, key string) (enf, down time.Duration) {
	b.Helper()
	pol, err := conf.NewPolicy(conf.ModeAllowlist, []string{benchName})
	if err != nil {
		b.Fatal(err)
	}
	req := sandbox.Request{
		Attachment: sandbox.Attachment{Key: key, Runtime: "cni", NetNS: ns.Path(), Label: "full"},
		Spec: spec.Spec{Policy: pol, Resolvers: []netip.Addr{e.net.DNS}, AllowICMP: true, LogDir: e.logDir,
			UpstreamResolvers: []netip.AddrPort{netip.AddrPortFrom(e.net.DNS, 53)}},
		StateDir: e.stateDir, ProxyBinary: doormanBin(),
	}
	err = e.net.InHost(func() error {
		t0 := time.Now()
		if _, err := sandbox.Enforce(req); err != nil {
			sandbox.Teardown(req.StateDir, req.Key)
			return err
		}
		enf = time.Since(t0)
		t0 = time.Now()
		err := sandbox.Teardown(req.StateDir, req.Key)
		down = time.Since(t0)
		return err
	})
	if err != nil {
		b.Fatalf("in-process enforce and teardown: %v", err)
	}
	return enf, down
}

// ruleset times enforce.ProbeFib, then enforce.Apply (one batch; it probes
// for fib only if the kernel rejects the batch)
// and enforce.Remove of an allowlist ruleset on ns.
func (e *benchCNI) ruleset(b *testing.B, ns *testnet.Netns) (probe, apply, remove time.Duration) {
	b.Helper()
	spec := enforce.Spec{Port4: 15001, Port6: 15002, Resolvers: []netip.Addr{e.net.DNS}, AllowICMP: true}
	t0 := time.Now()
	err := enforce.ProbeFib(ns.Path())
	probe = time.Since(t0)
	if err == nil {
		t0 = time.Now()
		err = enforce.Apply(ns.Path(), spec)
		apply = time.Since(t0)
	}
	if err == nil {
		t0 = time.Now()
		err = enforce.Remove(ns.Path())
		remove = time.Since(t0)
	}
	if err != nil {
		enforce.Remove(ns.Path())
		b.Fatalf("ruleset: %v", err)
	}
	return probe, apply, remove
}
