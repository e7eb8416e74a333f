package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// Sizes and targets of BenchmarkCNIScale (issue 7).
const (
	benchScaleSandboxes    = 200
	benchScaleEdge         = 10              // ADDs compared at the start and at the end
	benchScaleTargetGrowth = 1.5             // the last ADDs may cost this much more than the first
	benchScaleTargetMemory = 1.2 * (1 << 30) // all proxies together, bytes
	benchScaleIdleWindow   = 3 * time.Second // how long the idle proxies' CPU is watched
)

// benchScaleHost is one runtime's namespace of BenchmarkCNIScale with its
// conflist and the attachments it holds.
type benchScaleHost struct {
	name string
	ns   *testnet.Netns
	list *libcni.NetworkConfigList
	live []*libcni.RuntimeConf // added and not yet deleted
	adds []float64             // ms, in order
	dels []float64
}

// do runs fn in the host's namespace with a 30 s context.
func (h *benchScaleHost) do(fn func(context.Context) error) error {
	return h.ns.Do(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return fn(ctx)
	})
}

// BenchmarkCNIScale adds benchScaleSandboxes sandboxes one after another to
// one host through libcni, with the bridge+doorman conflist of
// BenchmarkCNIAdd, and keeps them: it compares the ADD time of the first
// and the last benchScaleEdge, sums the memory of all the proxies then
// running (VmRSS, and Pss, which divides the binary's shared pages among
// the processes that map them) and their CPU while idle, and DELs them
// all. In the same loop, alternating, it does the same with the
// bridge-only conflist on a second host, so that a growth of ADD time can
// be told apart from the bridge's and the kernel's own. Each runtime's
// namespace is one of its own (no uplink, nothing is relayed), so that a
// bridge can hold a /24: 200 sandboxes do not fit in the range testnet's
// host keeps free. It is one fixed experiment (b.N is not used): run it
// with -benchtime=1x.
func BenchmarkCNIScale(b *testing.B) {
	env, dir := newBenchCNI(b)
	n := env.net
	hosts := []*benchScaleHost{{name: "bridge"}, {name: "bridge+doorman"}}
	for i, h := range hosts {
		sub := filepath.Join(dir, fmt.Sprintf("host%d", i))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		h.ns = n.NewNetns(b, fmt.Sprintf("scalehost%d", i))
		h.list = env.conflistOn(b, sub, i == 1, "198.51.100.0/24", "198.51.100.1")
	}
	// Whatever a failure left: DEL it, and stop any proxy still recorded.
	b.Cleanup(func() {
		for _, h := range hosts {
			for _, rt := range h.live {
				h.do(func(ctx context.Context) error { return env.cni.DelNetworkList(ctx, h.list, rt) })
			}
		}
		states, _ := sandbox.List(env.stateDir)
		for _, s := range states {
			sandbox.Teardown(env.stateDir, s.Key)
		}
	})

	t0 := time.Now()
	for i := range benchScaleSandboxes {
		for k := range hosts {
			h := hosts[(i+k)%len(hosts)] // alternate which goes first
			ns := n.NewNetns(b, fmt.Sprintf("scl%d-%d", (i+k)%len(hosts), i))
			rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("scale%d-%d", (i+k)%len(hosts), i), NetNS: ns.Path(), IfName: "eth0"}
			var took time.Duration
			err := h.do(func(ctx context.Context) error {
				start := time.Now()
				_, err := env.cni.AddNetworkList(ctx, h.list, rt)
				took = time.Since(start)
				return err
			})
			if err != nil {
				b.Fatalf("%s, ADD #%d: %v", h.name, i+1, err)
			}
			h.live = append(h.live, rt)
			h.adds = append(h.adds, benchMs(took))
		}
	}
	addWall := time.Since(t0)

	// Every doorman sandbox must have its own live proxy; then their memory.
	states, err := sandbox.List(env.stateDir)
	if err != nil {
		b.Fatal(err)
	}
	var rss, pss, anon int64
	var perPss, perRSS []float64
	alive := 0
	for _, s := range states {
		if !s.ProxyAlive() {
			continue
		}
		alive++
		v, err := benchProcStatus(s.PID, "VmRSS", "RssAnon")
		if err != nil {
			b.Fatal(err)
		}
		p, err := benchProcPss(s.PID)
		if err != nil {
			b.Fatal(err)
		}
		rss, anon, pss = rss+v[0], anon+v[1], pss+p
		perRSS, perPss = append(perRSS, benchMiB(v[0])), append(perPss, benchMiB(p))
	}
	if alive != benchScaleSandboxes {
		b.Fatalf("after %d ADDs, %d sandboxes are recorded and %d have a live proxy", benchScaleSandboxes, len(states), alive)
	}
	// What the idle proxies cost in CPU together (their Go runtimes'
	// timers and the like), and the machine's busy share meanwhile.
	idleCPU0, err := benchSumCPU(states)
	if err != nil {
		b.Fatal(err)
	}
	m0, err := benchReadMachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	t1 := time.Now()
	time.Sleep(benchScaleIdleWindow)
	idleWall := time.Since(t1)
	m1, err := benchReadMachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	idleCPU1, err := benchSumCPU(states)
	if err != nil {
		b.Fatal(err)
	}
	idleShare := 100 * (idleCPU1 - idleCPU0).Seconds() / idleWall.Seconds()
	m := m1.sub(m0)
	machBusy := 100 * m.busy.Seconds() / m.total.Seconds()

	t1 = time.Now()
	for i := range benchScaleSandboxes {
		for k := range hosts {
			h := hosts[(i+k)%len(hosts)]
			rt := h.live[0]
			var took time.Duration
			err := h.do(func(ctx context.Context) error {
				start := time.Now()
				err := env.cni.DelNetworkList(ctx, h.list, rt)
				took = time.Since(start)
				return err
			})
			if err != nil {
				b.Fatalf("%s, DEL %s: %v", h.name, rt.ContainerID, err)
			}
			h.live = h.live[1:]
			h.dels = append(h.dels, benchMs(took))
		}
	}
	delWall := time.Since(t1)
	if states, err := sandbox.List(env.stateDir); err != nil || len(states) != 0 {
		b.Fatalf("after DEL of all, %d sandboxes are still recorded (%v)", len(states), err)
	}

	first := func(xs []float64) []float64 { return xs[:benchScaleEdge] }
	last := func(xs []float64) []float64 { return xs[len(xs)-benchScaleEdge:] }
	growth := func(xs []float64) []float64 {
		return []float64{benchSpreadOf(last(xs)).med / benchSpreadOf(first(xs)).med}
	}
	br, dm := hosts[0], hosts[1]
	t := &benchTable{
		title: fmt.Sprintf("BenchmarkCNIScale: %d sandboxes added one after another through libcni to each of two hosts, alternating, then deleted; %d cores",
			benchScaleSandboxes, runtime.NumCPU()),
		paths: []string{br.name, dm.name},
	}
	t.add(fmt.Sprintf("ADD, sandboxes 1-%d, ms", benchScaleEdge), "%.1f", first(br.adds), first(dm.adds))
	t.add(fmt.Sprintf("ADD, sandboxes %d-%d, ms", benchScaleSandboxes-benchScaleEdge+1, benchScaleSandboxes), "%.1f",
		last(br.adds), last(dm.adds))
	r := t.add(fmt.Sprintf("  last %d / first %d (medians)", benchScaleEdge, benchScaleEdge), "%.2f", growth(br.adds), growth(dm.adds))
	r.target = benchVerdict(fmt.Sprintf("bridge+doorman <= %.1fx", benchScaleTargetGrowth), growth(dm.adds)[0] <= benchScaleTargetGrowth)
	t.add(fmt.Sprintf("ADD, all %d, ms", benchScaleSandboxes), "%.1f", br.adds, dm.adds)
	t.add(fmt.Sprintf("  doorman's share of ADD, sandboxes 1-%d (pair by pair), ms", benchScaleEdge), "%.1f",
		nil, benchPairedDiffs(first(br.adds), first(dm.adds)))
	t.add(fmt.Sprintf("  doorman's share of ADD, sandboxes %d-%d (pair by pair), ms", benchScaleSandboxes-benchScaleEdge+1, benchScaleSandboxes), "%.1f",
		nil, benchPairedDiffs(last(br.adds), last(dm.adds)))
	t.add(fmt.Sprintf("proxy VmRSS with %d sandboxes, each, MiB", benchScaleSandboxes), "%.2f", nil, perRSS)
	t.add(fmt.Sprintf("proxy Pss with %d sandboxes, each, MiB", benchScaleSandboxes), "%.2f", nil, perPss)
	t.add(fmt.Sprintf("all %d proxies, sum of VmRSS (counts shared pages %d times), MiB", benchScaleSandboxes, benchScaleSandboxes), "%.0f",
		nil, []float64{benchMiB(rss)})
	t.add("  of which anonymous (RssAnon), MiB", "%.0f", nil, []float64{benchMiB(anon)})
	r = t.add(fmt.Sprintf("all %d proxies, sum of Pss, MiB", benchScaleSandboxes), "%.0f", nil, []float64{benchMiB(pss)})
	r.target = benchVerdict(fmt.Sprintf("< %.1f GiB", benchScaleTargetMemory/(1<<30)), float64(pss) < benchScaleTargetMemory)
	t.add(fmt.Sprintf("CPU of all %d idle proxies together, %% of one core (over %v)", benchScaleSandboxes, benchScaleIdleWindow), "%.1f",
		nil, []float64{idleShare})
	t.add("  machine busy % meanwhile (all cores, everything running)", "%.0f", nil, []float64{machBusy})
	t.add(fmt.Sprintf("DEL, sandboxes 1-%d, ms", benchScaleEdge), "%.1f", first(br.dels), first(dm.dels))
	t.add(fmt.Sprintf("DEL, sandboxes %d-%d, ms", benchScaleSandboxes-benchScaleEdge+1, benchScaleSandboxes), "%.1f",
		last(br.dels), last(dm.dels))
	t.add(fmt.Sprintf("DEL, all %d, ms", benchScaleSandboxes), "%.1f", br.dels, dm.dels)
	t.note("wall", "wall time: %d ADDs %.1f s (namespaces made in between included), %d DELs %.1f s",
		2*benchScaleSandboxes, addWall.Seconds(), 2*benchScaleSandboxes, delWall.Seconds())
	t.print()

	b.ReportMetric(growth(dm.adds)[0], "x-last-vs-first-ADD")
	b.ReportMetric(growth(br.adds)[0], "bridge-x-last-vs-first-ADD")
	b.ReportMetric(benchMiB(pss), "proxies-Pss-MiB")
	b.ReportMetric(benchMiB(rss), "proxies-RSS-MiB")
	b.ReportMetric(0, "ns/op")
}

// benchSumCPU is the CPU time the proxies of states have used together.
func benchSumCPU(states []*sandbox.State) (time.Duration, error) {
	var sum time.Duration
	for _, s := range states {
		d, err := benchProcCPU(s.PID)
		if err != nil {
			return 0, fmt.Errorf("proxy of %s: %w", s.Key, err)
		}
		sum += d
	}
	return sum, nil
}
