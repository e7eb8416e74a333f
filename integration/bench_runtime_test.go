package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// Sizes of BenchmarkRuntimeStacks.
const (
	benchStackRounds   = 5   // rounds, each running every path
	benchStackRequests = 100 // sequential requests per round, a new connection each
)

// BenchmarkRuntimeStacks compares a connection made by a workload on the
// host kernel's network stack (runc) and one made on gVisor's (runsc,
// systrap), each straight out of a bridge-only CNI network and through
// doorman (the same bridge with doorman chained after it, its defaults):
// runc's connections go to the proxy through the sandbox's own ruleset,
// runsc's through the host-side layer's redirect. Each row is the median
// time of one request on a new connection (plain HTTP, and HTTPS with a
// full TLS handshake) to the fake internet's allowed host (benchName), made by the
// probe inside the container; doorman's share of a connection is the
// time through doorman less the time straight out, for each runtime. It
// prints one table; see docs/benchmarks.md. It is one fixed experiment
// (b.N is not used): run it with -benchtime=1x.
func BenchmarkRuntimeStacks(b *testing.B) {
	skipUnlessRootB(b)
	runscBin := filepath.Join(runscDir(b), "runsc")
	if _, err := exec.LookPath("runc"); err != nil {
		b.Skip("runc is not installed")
	}
	env, dir := newBenchCNI(b)
	env.net.AddHost(benchName, apiAddr4, apiAddr6)
	b.Cleanup(func() {
		states, _ := sandbox.List(env.stateDir)
		for _, s := range states {
			sandbox.Teardown(env.stateDir, s.Key)
		}
	})
	rootfs := benchStackRootfs(b, dir, env.net)
	mounts, err := cgroupMountScript()
	if err != nil {
		b.Fatal(err)
	}
	type path struct {
		name    string
		runtime []string
		doorman bool
		// hostSide removes the sandbox's own ruleset after ADD, so that
		// runc's connections take the host-side layer's redirect, as
		// runsc's do: what moving runc to that one path would cost.
		hostSide bool
		id       string
		root     string
	}
	paths := []*path{
		{name: "runc", runtime: []string{"runc"}},
		{name: "runc+doorman", runtime: []string{"runc"}, doorman: true},
		{name: "runc+doorman (host side)", runtime: []string{"runc"}, doorman: true, hostSide: true},
		{name: "runsc", runtime: append([]string{runscBin}, runscFlags...)},
		{name: "runsc+doorman", runtime: append([]string{runscBin}, runscFlags...), doorman: true},
	}
	rt := func(p *path, args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		full := append(append(append([]string{"-c", mounts + "exec \"$@\"", "sh"}, p.runtime...), "--root", p.root), args...)
		cmd := env.net.HostCommand(ctx, "sh", full...)
		out, err := os.CreateTemp(dir, "out-")
		if err != nil {
			return nil, err
		}
		defer os.Remove(out.Name())
		defer out.Close()
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Run()
		data, _ := os.ReadFile(out.Name())
		return data, err
	}
	for i, p := range paths {
		list := env.conflistOn(b, dir, p.doorman, "198.51.100.128/26", "198.51.100.129")
		ns := env.net.NewNetns(b, fmt.Sprintf("stk%d", i))
		conf := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("stack%d", i), NetNS: ns.Path(), IfName: "eth0"}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := env.net.InHost(func() error { _, err := env.cni.AddNetworkList(ctx, list, conf); return err })
		cancel()
		if err != nil {
			b.Fatalf("%s: ADD: %v", p.name, err)
		}
		if p.hostSide {
			if err := enforce.Remove(ns.Path()); err != nil {
				b.Fatalf("%s: remove the sandbox's own ruleset: %v", p.name, err)
			}
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			env.net.InHost(func() error { return env.cni.DelNetworkList(ctx, list, conf) })
		})
		p.id, p.root = fmt.Sprintf("dm-stack-%d-%s", i, filepath.Base(dir)), filepath.Join(dir, "rt", strconv.Itoa(i))
		bundle := benchStackBundle(b, dir, rootfs, p.id, ns.Path())
		if out, err := rt(p, "run", "--detach", "--bundle", bundle, p.id); err != nil {
			b.Fatalf("%s: run: %v: %s", p.name, err, out)
		}
		b.Cleanup(func() { rt(p, "delete", "--force", p.id) })
	}
	re := regexp.MustCompile(`repeat: \d+ median_us (\d+) p90_us (\d+)`)
	measure := func(p *path, url string) float64 {
		out, err := rt(p, "exec", p.id, "/probe", "get", url, "--ca", "/ca.pem", "--timeout", "2m", "--repeat", strconv.Itoa(benchStackRequests))
		m := re.FindSubmatch(out)
		if err != nil || m == nil {
			b.Fatalf("%s: probe get %s: %v: %s", p.name, url, err, out)
		}
		us, _ := strconv.ParseFloat(string(m[1]), 64)
		return us / 1000
	}
	n := len(paths)
	httpMs, tlsMs := make([][]float64, n), make([][]float64, n)
	benchRotate(benchStackRounds, n, func(_, i int) {
		httpMs[i] = append(httpMs[i], measure(paths[i], "http://"+benchName+"/"))
		tlsMs[i] = append(tlsMs[i], measure(paths[i], "https://"+benchName+"/"))
	})
	table := &benchTable{title: fmt.Sprintf("BenchmarkRuntimeStacks: %d rounds of %d sequential requests per path, a new connection each (the median of each round); paths in rotating order; %d cores; runsc %v",
		benchStackRounds, benchStackRequests, runtime.NumCPU(), runscFlags)}
	for _, p := range paths {
		table.paths = append(table.paths, p.name)
	}
	table.add("HTTP request, new connection (ms)", "%.2f", httpMs...)
	table.add("HTTPS request, new connection (ms)", "%.2f", tlsMs...)
	share := func(vals [][]float64, direct, via int) []float64 {
		var out []float64
		for r := range min(len(vals[direct]), len(vals[via])) {
			out = append(out, vals[via][r]-vals[direct][r])
		}
		return out
	}
	for _, row := range []struct {
		name string
		vals [][]float64
	}{{"HTTP", httpMs}, {"HTTPS", tlsMs}} {
		runcShare, hostShare, runscShare := benchSpreadOf(share(row.vals, 0, 1)), benchSpreadOf(share(row.vals, 0, 2)), benchSpreadOf(share(row.vals, 3, 4))
		table.note(row.name, "doorman's share of a %s connection: runc %.2f ms [%.2f..%.2f], runc through the host side %.2f ms [%.2f..%.2f], runsc %.2f ms [%.2f..%.2f] (%s)",
			row.name, runcShare.med, runcShare.min, runcShare.max, hostShare.med, hostShare.min, hostShare.max, runscShare.med, runscShare.min, runscShare.max,
			benchVerdict("runsc's no larger than runc's", runscShare.med <= runcShare.med))
	}
	table.print()
}

// benchStackRootfs is the containers' rootfs: busybox, the probe, the
// test CA and a resolv.conf naming the fake internet's resolver.
func benchStackRootfs(b *testing.B, dir string, n *testnet.Net) string {
	b.Helper()
	probe, err := buildRuncProbe()
	if err != nil {
		b.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := copyFile(probe, filepath.Join(rootfs, "probe"), 0o755); err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"ca.pem":          n.CAPEM,
		"etc/resolv.conf": fmt.Appendf(nil, "nameserver %s\n", n.DNS),
	} {
		if err := os.WriteFile(filepath.Join(rootfs, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return rootfs
}

// benchStackBundle writes a bundle running `probe sleep` on rootfs in the
// network namespace at netns.
func benchStackBundle(b *testing.B, dir, rootfs, id, netns string) string {
	b.Helper()
	bundle := filepath.Join(dir, "bundles", id)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		b.Fatal(err)
	}
	s.Process.Terminal = false
	s.Process.Args = []string{"/probe", "sleep", "1h"}
	s.Root = &specs.Root{Path: rootfs, Readonly: true}
	setNetNS(&s, netns, true)
	if data, err = json.Marshal(&s); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	return bundle
}
