package integration

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/internal/phasetrace"
)

// benchPhasesRounds is how many ADDs BenchmarkCNIAddPhases traces (per
// binary, with a baseline).
const benchPhasesRounds = 15

// benchPhasesOthersEnv names, if set, how many other sandboxes (up to 50:
// the bridge's range holds no more) BenchmarkCNIAddPhases adds first, and
// keeps, through the bridge+doorman conflist: the host-side layer's
// tables then hold their rules, as on a busy host.
const benchPhasesOthersEnv = "DOORMAN_BENCH_PHASES_OTHERS"

// BenchmarkCNIAddPhases says where doorman's ADD spends its time: it runs
// the bridge's ADD through libcni, then execs the doorman plugin itself
// with the bridge's result as prevResult (as libcni would) and
// DOORMAN_TRACE set (package phasetrace), then DELs both, 15 times, and
// prints each phase's median time since the exec and since the phase
// before. The exec and the exit are this process's own clock readings.
// With DOORMAN_BENCH_BASELINE naming an older doorman (see benchBaselineEnv), the rounds
// alternate between it and this tree's, and the table gains both
// binaries' exec-to-exit times side by side (the older one need not
// trace). With DOORMAN_BENCH_PHASES_OTHERS=N, N other sandboxes are
// there all along. One fixed experiment: run it with -benchtime=1x.
func BenchmarkCNIAddPhases(b *testing.B) {
	env, dir := newBenchCNI(b)
	bins := []string{doormanBin()}
	names := []string{"this tree"}
	if rev, base := benchBaselineBinary(b); base != "" {
		bins, names = append(bins, base), append(names, "baseline "+rev)
	}
	bridge := env.conflist(b, dir, false)
	entry := env.doormanEntry(b, dir)
	ns := env.net.NewNetns(b, "cnip")
	traceFile := filepath.Join(dir, "trace")
	others := 0
	if v := os.Getenv(benchPhasesOthersEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 50 {
			b.Fatalf("%s=%q: want 0 to 50", benchPhasesOthersEnv, v)
		}
		others = n
	}
	withDoorman := env.conflist(b, dir, true)
	for i := range others {
		o := env.net.NewNetns(b, fmt.Sprintf("cnio%d", i))
		rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("other%d", i), NetNS: o.Path(), IfName: "eth0"}
		if err := env.net.InHost(func() error {
			_, err := env.cni.AddNetworkList(context.Background(), withDoorman, rt)
			return err
		}); err != nil {
			b.Fatalf("other sandbox %d: %v", i, err)
		}
		b.Cleanup(func() {
			env.net.InHost(func() error { return env.cni.DelNetworkList(context.Background(), withDoorman, rt) })
		})
	}

	totals := make([][]float64, len(bins))
	var traces [][]tracePoint
	benchRotate(2+benchPhasesRounds, len(bins), func(r, i int) {
		os.Remove(traceFile)
		trace := i == 0
		total := env.execAdd(b, bridge, entry, ns, bins[i], fmt.Sprintf("ph%d-%d", r, i), traceFile, trace)
		if r < 2 {
			return // warm-up
		}
		totals[i] = append(totals[i], benchMs(total))
		if trace {
			traces = append(traces, readTrace(b, traceFile))
		}
	})

	t := &benchTable{
		title: fmt.Sprintf("BenchmarkCNIAddPhases: the doorman plugin's ADD exec'd on its own, %d rounds, %d other sandboxes; %d cores", benchPhasesRounds, others, runtime.NumCPU()),
		paths: names,
	}
	t.add("plugin exec to exit, ms", "%.2f", totals...)
	t.print()
	printPhases(traces)
	b.ReportMetric(benchSpreadOf(totals[0]).med, "ADD-ms")
	b.ReportMetric(0, "ns/op")
}

// doormanEntry is doorman's plugin entry of conflist, as libcni hands it
// to the plugin without its prevResult.
func (e *benchCNI) doormanEntry(b *testing.B, dir string) map[string]any {
	b.Helper()
	l := e.conflist(b, dir, true)
	var entry map[string]any
	if err := json.Unmarshal(l.Plugins[len(l.Plugins)-1].Bytes, &entry); err != nil {
		b.Fatal(err)
	}
	entry["name"], entry["cniVersion"] = l.Name, l.CNIVersion
	return entry
}

// execAdd runs the bridge's ADD through libcni, then bin's ADD as a
// runtime execs a plugin, timing that exec to its exit, then both DELs.
// With trace, the plugin traces to traceFile, and the exec and exit are
// added to it.
func (e *benchCNI) execAdd(b *testing.B, bridge *libcni.NetworkConfigList, entry map[string]any, ns *testnet.Netns, bin, id, traceFile string, trace bool) time.Duration {
	b.Helper()
	rt := &libcni.RuntimeConf{ContainerID: "bench" + id, NetNS: ns.Path(), IfName: "eth0"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var took time.Duration
	err := e.net.InHost(func() error {
		res, err := e.cni.AddNetworkList(ctx, bridge, rt)
		if err != nil {
			return fmt.Errorf("bridge ADD: %w", err)
		}
		defer e.cni.DelNetworkList(ctx, bridge, rt)
		prev, err := json.Marshal(res)
		if err != nil {
			return err
		}
		conf := maps.Clone(entry)
		conf["prevResult"] = json.RawMessage(prev)
		stdin, err := json.Marshal(conf)
		if err != nil {
			return err
		}
		run := func(command string, trace bool) (time.Duration, error) {
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + rt.ContainerID, "CNI_NETNS=" + rt.NetNS,
				"CNI_IFNAME=" + rt.IfName, "CNI_PATH=" + binDir, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
			if trace {
				cmd.Env = append(cmd.Env, phasetrace.EnvVar+"="+traceFile)
			}
			var out, errOut bytes.Buffer
			cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errOut
			t0 := time.Now()
			err := cmd.Run()
			d := time.Since(t0)
			if trace {
				appendTrace(traceFile, t0, cmd.Process.Pid, "exec")
				appendTrace(traceFile, t0.Add(d), cmd.Process.Pid, "exit")
			}
			if err != nil {
				return d, fmt.Errorf("doorman %s: %v: %s%s", command, err, out.String(), errOut.String())
			}
			return d, nil
		}
		if took, err = run("ADD", trace); err != nil {
			run("DEL", false)
			return err
		}
		_, err = run("DEL", false)
		return err
	})
	if err != nil {
		b.Fatalf("container %s: %v", rt.ContainerID, err)
	}
	return took
}

// tracePoint is one line of a phasetrace file.
type tracePoint struct {
	at    time.Time
	pid   int
	phase string
}

func appendTrace(path string, at time.Time, pid int, phase string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%d %d %s\n", at.UnixNano(), pid, phase)
}

// readTrace reads one ADD's trace, naming each process's "main" after
// the role its other phases say (add., sup., worker.).
func readTrace(b *testing.B, path string) []tracePoint {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var pts []tracePoint
	role := map[int]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		pid, _ := strconv.Atoi(f[1])
		pts = append(pts, tracePoint{time.Unix(0, ns), pid, f[2]})
		if p, _, ok := strings.Cut(f[2], "."); ok && f[2] != "main" {
			if p == "enforce" {
				p = "add"
			}
			role[pid] = p
		}
	}
	for i := range pts {
		if pts[i].phase == "main" {
			pts[i].phase = role[pts[i].pid] + ".main"
		}
	}
	slices.SortStableFunc(pts, func(x, y tracePoint) int { return x.at.Compare(y.at) })
	return pts
}

// printPhases prints each phase's median time since the exec, in the
// order of those medians, and the median time since the phase on the row
// above, round by round (phases in different processes overlap, so a
// step can be small or negative where two processes work at once).
func printPhases(traces [][]tracePoint) {
	if len(traces) == 0 {
		return
	}
	since := map[string][]float64{}
	at := make([]map[string]time.Time, len(traces))
	for i, tr := range traces {
		at[i] = map[string]time.Time{}
		var t0 time.Time
		for _, p := range tr {
			if p.phase == "exec" {
				t0 = p.at
			}
		}
		for _, p := range tr {
			if _, dup := at[i][p.phase]; !dup {
				at[i][p.phase] = p.at
				since[p.phase] = append(since[p.phase], benchMs(p.at.Sub(t0)))
			}
		}
	}
	var order []string
	for ph := range since {
		order = append(order, ph)
	}
	slices.SortFunc(order, func(a, b string) int {
		return cmp.Compare(benchSpreadOf(since[a]).med, benchSpreadOf(since[b]).med)
	})
	fmt.Printf("\nWhere one ADD's time goes (%d traced ADDs; medians, ms)\n\n", len(traces))
	fmt.Println("| phase | since exec | since the row above |")
	fmt.Println("|---|---|---|")
	for j, ph := range order {
		var step []float64
		if j > 0 {
			for i := range traces {
				a, okA := at[i][order[j-1]]
				b, okB := at[i][ph]
				if okA && okB {
					step = append(step, benchMs(b.Sub(a)))
				}
			}
		}
		st := 0.0
		if len(step) > 0 {
			st = benchSpreadOf(step).med
		}
		fmt.Printf("| %s | %.2f | %.2f |\n", ph, benchSpreadOf(since[ph]).med, st)
	}
	fmt.Println()
}
