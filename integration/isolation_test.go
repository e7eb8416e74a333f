package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/proxy/supervise"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// The isolation and supervision of each sandbox's proxy, seen from
// outside: the cgroup its supervisor and worker run in (/proc/PID/cgroup)
// and that cgroup's limit files, the processes there are, what the
// sandbox's workload reaches, and what ls and CHECK say.

// proxyLimits are the limits a cgroup's files say, in cgroup v2's terms.
type proxyLimits struct{ memory, pids, cpuWeight uint64 }

// cgroupPathOf is the cgroup process pid is in, in the hierarchy that
// holds controller ctrl (a v1 one that does, else the unified one).
func cgroupPathOf(t *testing.T, pid int, ctrl string) string {
	t.Helper()
	cgs := processCgroups(t, pid)
	for ctrls, path := range cgs {
		if slices.Contains(strings.Split(ctrls, ","), ctrl) {
			return path
		}
	}
	if path, ok := cgs[""]; ok {
		return path
	}
	t.Fatalf("pid %d is in no cgroup with %s: %v", pid, ctrl, cgs)
	return ""
}

// cgroupDir is the directory of cgroup path in the hierarchy that holds
// ctrl, and whether that hierarchy is v1.
func cgroupDir(t *testing.T, ctrl, path string) (string, bool) {
	t.Helper()
	mounts, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.fstype == "cgroup" && slices.Contains(strings.Split(m.superOpts, ","), ctrl) {
			return filepath.Join(m.mountpoint, path), true
		}
	}
	for _, m := range mounts {
		if m.fstype == "cgroup2" {
			return filepath.Join(m.mountpoint, path), false
		}
	}
	t.Fatalf("no cgroup hierarchy holds %s", ctrl)
	return "", false
}

// readCgroupValue reads one number (or "max") from a cgroup file.
func readCgroupValue(t *testing.T, dir, file string) uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	v := strings.TrimSpace(string(data))
	if v == "max" {
		return 1<<63 - 1
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s/%s: %q", dir, file, v)
	}
	return n
}

// limitsOf reads the limits of cgroup path from its files.
func limitsOf(t *testing.T, path string) proxyLimits {
	t.Helper()
	var l proxyLimits
	if d, v1 := cgroupDir(t, "memory", path); v1 {
		l.memory = readCgroupValue(t, d, "memory.limit_in_bytes")
	} else {
		l.memory = readCgroupValue(t, d, "memory.max")
	}
	d, _ := cgroupDir(t, "pids", path)
	l.pids = readCgroupValue(t, d, "pids.max")
	if d, v1 := cgroupDir(t, "cpu", path); v1 {
		l.cpuWeight = readCgroupValue(t, d, "cpu.shares") * 100 / 1024
	} else {
		l.cpuWeight = readCgroupValue(t, d, "cpu.weight")
	}
	return l
}

// assertProxyIn checks that the supervisor and the worker of sandbox s
// are in cgroup path for each of memory, pids and cpu, and that its
// files set limits want.
func assertProxyIn(t *testing.T, s *sandbox.State, path string, want proxyLimits) {
	t.Helper()
	if s.Supervisor == nil || s.PID == 0 {
		t.Fatalf("sandbox %s: supervisor %v, worker %d", s.Key, s.Supervisor, s.PID)
	}
	for _, pid := range []int{s.Supervisor.PID, s.PID} {
		for _, ctrl := range []string{"memory", "pids", "cpu"} {
			if got := cgroupPathOf(t, pid, ctrl); got != path {
				t.Errorf("pid %d (of %s) is in %s cgroup %s, want %s", pid, s.Key, ctrl, got, path)
			}
		}
	}
	if d, _ := cgroupDir(t, "memory", path); !dirExists(d) {
		t.Errorf("no cgroup %s", d)
	} else if got := limitsOf(t, path); got != want {
		t.Errorf("limits of %s: %+v, want %+v", path, got, want)
	}
}

// hasV1Memory reports whether the memory controller is v1's here.
func hasV1Memory(t *testing.T) bool {
	_, v1 := cgroupDir(t, "memory", "/")
	return v1
}

// assertCgroupGone checks that cgroup path is in no hierarchy.
func assertCgroupGone(t *testing.T, path string) {
	t.Helper()
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		d, _ := cgroupDir(t, ctrl, path)
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind (%v)", d, err)
		}
	}
}

// makeCgroup makes cgroup path in each hierarchy of memory, pids and
// cpu, as a kubelet makes a pod's; the test's cleanup removes it.
func makeCgroup(t *testing.T, path string) {
	t.Helper()
	top := "/" + strings.Split(strings.TrimPrefix(path, "/"), "/")[0]
	t.Cleanup(func() { removeCgroupParent(t, top) })
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		d, _ := cgroupDir(t, ctrl, path)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

var defaultLimits = proxyLimits{spec.DefaultProxyMemory, spec.DefaultProxyPids, spec.DefaultProxyCPUWeight}

// TestCNIProxyCgroup: without a cgroupPath from the runtime, each
// sandbox's proxy (its supervisor and worker) runs in a cgroup of its own
// in doorman's slice, with the default limits or those of proxyLimits; a
// bad limit fails the ADD naming the key and the value; DEL removes the
// cgroup.
func TestCNIProxyCgroup(t *testing.T) {
	e := newCNIEnv(t)
	def, set := e.newContainer(), e.newContainer()
	e.mustAdd(def, e.conflist(nil))
	e.mustAdd(set, e.conflist(map[string]any{"proxyLimits": map[string]any{"memory": "64Mi", "pids": 100, "cpuWeight": "50"},
		"limits": map[string]any{"bufferBytes": 8 << 20}}))

	defPath := sandbox.DefaultCgroupSlice + "/doorman-" + def.key
	assertProxyIn(t, e.state(def), defPath, defaultLimits)
	setPath := sandbox.DefaultCgroupSlice + "/doorman-" + set.key
	assertProxyIn(t, e.state(set), setPath, proxyLimits{64 << 20, 100, 50})
	// Its sockets are charged to it, within limits.bufferBytes: on v1
	// the cgroup's TCP limit (v2 counts them in memory.max).
	for c, want := range map[string]uint64{defPath: spec.DefaultBufferBytes, setPath: 8 << 20} {
		if d, v1 := cgroupDir(t, "memory", c); v1 {
			if got := readCgroupValue(t, d, "memory.kmem.tcp.limit_in_bytes"); got != want {
				t.Errorf("TCP limit of %s: %d, want %d", c, got, want)
			}
		}
	}
	if !e.reaches(set, "https://"+apiName+"/", apiName) {
		t.Error("the proxy in its cgroup does not serve")
	}
	// show, run where the hierarchies are mounted, reads the limits
	// from the cgroup's files.
	if show := e.operator("show", set.rt.ContainerID); !strings.Contains(show, setPath+" (doorman's slice): memory ") ||
		!strings.Contains(show, " of 64.0 MiB, ") || !strings.Contains(show, " of 100 pids, cpu weight 50") ||
		hasV1Memory(t) && !strings.Contains(show, " of 8.0 MiB") {
		t.Errorf("show does not give the cgroup's limits:\n%s", show)
	}

	for _, tc := range []struct {
		limits map[string]any
		want   []string
	}{
		{map[string]any{"memory": "64"}, []string{"proxyLimits.memory", `"64"`}},
		{map[string]any{"pids": "lots"}, []string{"proxyLimits.pids", `"lots"`}},
		{map[string]any{"cpuWeight": 0}, []string{"proxyLimits.cpuWeight", `"0"`}},
		{map[string]any{"memroy": "64Mi"}, []string{"proxyLimits", "memroy"}},
	} {
		c := e.newContainer()
		_, err := e.add(c, e.conflist(map[string]any{"proxyLimits": tc.limits}))
		e.del(c)
		if err == nil {
			t.Errorf("ADD with proxyLimits %v succeeded", tc.limits)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ADD with proxyLimits %v: %q does not name %s", tc.limits, err, w)
			}
		}
		assertNoTrace(t, e, c)
	}

	for _, c := range []*container{def, set} {
		if err := e.del(c); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	assertCgroupGone(t, defPath)
	assertCgroupGone(t, setPath)
}

// TestCNIProxyCgroupPath: with the cgroupPath capability, the proxy's
// cgroup is below the cgroup the runtime names, in the cgroupfs driver's
// form (a path) and the systemd driver's (a slice); DEL removes the
// proxy's cgroup and leaves the runtime's.
func TestCNIProxyCgroupPath(t *testing.T) {
	e := newCNIEnv(t)
	id := randomHex(t)
	for _, tc := range []struct{ name, cgroupPath, parent string }{
		{"cgroupfs", "/dm-pods-" + id + "/pod1", "/dm-pods-" + id + "/pod1"},
		{"systemd", "dmpods" + id + "-pod2.slice", "/dmpods" + id + ".slice/dmpods" + id + "-pod2.slice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			makeCgroup(t, tc.parent)
			c := e.newContainer()
			c.rt.CapabilityArgs = map[string]any{"cgroupPath": tc.cgroupPath}
			e.mustAdd(c, e.conflist(map[string]any{"capabilities": map[string]any{"cgroupPath": true}}))
			s := e.state(c)
			path := tc.parent + "/doorman-" + c.key
			assertProxyIn(t, s, path, defaultLimits)
			if s.Cgroup == nil || s.Cgroup.Slice || s.Cgroup.Parent != tc.parent {
				t.Errorf("recorded cgroup %+v, want one below %s", s.Cgroup, tc.parent)
			}
			if !e.reaches(c, "https://"+apiName+"/", apiName) {
				t.Error("the proxy below the pod's cgroup does not serve")
			}
			if err := e.del(c); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			assertCgroupGone(t, path)
			for _, ctrl := range []string{"memory", "pids", "cpu"} {
				if d, _ := cgroupDir(t, ctrl, tc.parent); !dirExists(d) {
					t.Errorf("DEL removed the runtime's cgroup %s", d)
				}
			}
		})
	}
}

// TestCNIProxyCgroupPathMalformed: a cgroupPath that is neither an
// absolute cgroupfs path nor a systemd slice name fails the ADD, naming
// the value, and leaves nothing behind (assertNothingLeft).
func TestCNIProxyCgroupPathMalformed(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	c.rt.CapabilityArgs = map[string]any{"cgroupPath": "kubepods/relative"}
	_, err := e.add(c, e.conflist(map[string]any{"capabilities": map[string]any{"cgroupPath": true}}))
	if err == nil || !strings.Contains(err.Error(), `cgroupPath "kubepods/relative"`) {
		t.Fatalf("ADD with a relative cgroupPath: %v, want it refused naming the value", err)
	}
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// lsProxy is the proxy part of one sandbox in `doorman ls -o json`.
type lsProxy struct {
	Health   string
	Problem  string
	Restarts int
	Failures int
	LastExit *supervise.Exit
}

func (e *cniEnv) lsProxy(c *container) lsProxy {
	e.t.Helper()
	r := e.mustCLI("ls", "-o", "json")
	var all []struct {
		Key   string
		Proxy lsProxy
	}
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil {
		e.t.Fatalf("ls -o json: %v\n%s", err, r.stdout)
	}
	for _, s := range all {
		if s.Key == c.key {
			return s.Proxy
		}
	}
	e.t.Fatalf("ls -o json does not list %s:\n%s", c.key, r.stdout)
	return lsProxy{}
}

// lsColumns are the health and restarts columns of c's row in `doorman
// ls`.
func (e *cniEnv) lsColumns(c *container) (health, restarts string) {
	e.t.Helper()
	lines := strings.Split(strings.TrimSpace(e.mustCLI("ls").stdout), "\n")
	head := strings.Fields(lines[0])
	hi, ri := slices.Index(head, "PROXY"), slices.Index(head, "RESTARTS")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) > max(hi, ri) && strings.HasPrefix(c.rt.ContainerID, f[0]) {
			return f[hi], f[ri]
		}
	}
	e.t.Fatalf("ls lists no row for %s:\n%s", c.key, strings.Join(lines, "\n"))
	return "", ""
}

// waitState waits until c's recorded state satisfies ok.
func (e *cniEnv) waitState(c *container, what string, ok func(*sandbox.State) bool) *sandbox.State {
	e.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := e.state(c)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %s never came; supervision %+v", c.key, what, s.Supervision())
		}
	}
}

// servingOther is the condition "a worker other than pid serves".
func servingOther(pid int) func(*sandbox.State) bool {
	return func(s *sandbox.State) bool {
		st := s.Supervision()
		return s.PID != 0 && s.PID != pid && s.Serving() && st != nil && st.State == supervise.StateServing
	}
}

// TestCNISupervisedKill: a worker killed with SIGKILL is replaced; while
// none runs the sandbox is closed (its connections wait, nobody else
// takes them); the new one serves the same policy into the same log;
// ls counts the restart and says how the last one ended; CHECK fails
// while none serves and passes once one does.
func TestCNISupervisedKill(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	if !e.reaches(c, "https://"+apiName+"/", apiName) {
		t.Fatal("allowed name not reached")
	}
	first := e.state(c)
	if h, r := e.lsColumns(c); h != "up" || r != "0" {
		t.Errorf("ls before: health %s, restarts %s; want up, 0", h, r)
	}

	// Killed: replaced by the supervisor.
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s := e.waitState(c, "a new worker", servingOther(first.PID))
	st := s.Supervision()
	t.Logf("worker %d killed, %d serves %v later", first.PID, s.PID, st.Worker.Started.Sub(st.LastExit.Time))
	if st.Restarts != 1 || st.LastExit.PID != first.PID || st.LastExit.Reason != "killed by SIGKILL" {
		t.Errorf("supervision after the kill: %+v, last exit %+v", st, st.LastExit)
	}
	if s.Supervisor.PID != first.Supervisor.PID {
		t.Errorf("supervisor changed: %d → %d", first.Supervisor.PID, s.Supervisor.PID)
	}
	path := sandbox.DefaultCgroupSlice + "/doorman-" + c.key
	assertProxyIn(t, s, path, defaultLimits)
	before := len(e.decisions(c))
	if !e.reaches(c, "https://"+apiName+"/again", apiName) {
		t.Error("allowed name not reached through the new worker")
	}
	if !e.refusedTLS(c, evilName, evilAddr4) {
		t.Error("the new worker does not deny what the policy denies")
	}
	if n := len(e.decisions(c)); n < before+2 {
		t.Errorf("the new worker's decisions are not in the sandbox's log: %d lines, then %d", before, n)
	}
	if h, r := e.lsColumns(c); h != "up" || r != "1" {
		t.Errorf("ls after a restart: health %s, restarts %s; want up, 1", h, r)
	}
	if p := e.lsProxy(c); p.Restarts != 1 || p.LastExit == nil || p.LastExit.Reason != "killed by SIGKILL" {
		t.Errorf("ls -o json proxy: %+v", p)
	}
	if show := e.mustCLI("show", c.rt.ContainerID).stdout; !strings.Contains(show, "killed by SIGKILL") {
		t.Errorf("show does not say how the last proxy ended:\n%s", show)
	} else {
		t.Logf("show:\n%s", show)
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK with the new worker serving: %v", err)
	}

	// In between: with the supervisor held (SIGSTOP), a killed worker
	// is not replaced yet, and the sandbox is closed.
	if err := syscall.Kill(s.Supervisor.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			syscall.Kill(s.Supervisor.PID, syscall.SIGCONT)
			resumed = true
		}
	}
	defer resume()
	if err := syscall.Kill(s.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s.PID)
	if err := e.check(c); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("CHECK with no worker: %v, want it to fail saying so", err)
	}
	if h, _ := e.lsColumns(c); h != "restarting" {
		t.Errorf("ls with no worker and a supervisor: health %s, want restarting", h)
	}
	if r := curl(t, c.ns, e.caFile, "--max-time", "2", "https://"+apiName+"/between"); r.exit == 0 {
		t.Errorf("reached the allowed name with no worker: %v", r)
	}
	if r := curl(t, c.ns, e.caFile, "--max-time", "2", "--resolve", evilName+":443:"+evilAddr4.String(), "https://"+evilName+"/"); r.exit == 0 {
		t.Errorf("reached a denied name with no worker: %v", r)
	}
	resume()
	s = e.waitState(c, "a worker after SIGCONT", servingOther(s.PID))
	if st := s.Supervision(); st.Restarts != 2 {
		t.Errorf("restarts %d, want 2", st.Restarts)
	}
	if !e.reaches(c, "https://"+apiName+"/after", apiName) {
		t.Error("allowed name not reached after the second restart")
	}
	if n := e.evil.Requests(); n != 0 {
		t.Errorf("evil served %d requests", n)
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK after the second restart: %v", err)
	}

	if err := e.del(c); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	waitGone(t, s.PID)
	waitGone(t, s.Supervisor.PID)
	assertCgroupGone(t, path)
}

// TestCNISupervisedCrashLoop: workers that die as they start (here: the
// decision log they append to is a directory) are started again after a
// delay that doubles; ls says crashloop and CHECK fails; once they can
// start, one serves again.
func TestCNISupervisedCrashLoop(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	first := e.state(c)
	// (A broken policy would not do: a worker that cannot load it serves
	// in deny-all.)
	if err := os.Rename(first.LogFile, first.LogFile+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(first.LogFile, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s := e.waitState(c, "a crash loop", func(s *sandbox.State) bool {
		st := s.Supervision()
		return st != nil && st.Failures >= supervise.CrashLoopAfter+1 && st.State == supervise.StateBackoff
	})
	st := s.Supervision()
	if st.NextStart == nil || st.LastExit == nil || !strings.Contains(st.LastExit.Reason, "exited with status") {
		t.Errorf("supervision in the crash loop: %+v, last exit %+v", st, st.LastExit)
	}
	// The delays double: 100ms, 200ms, 400ms... (the supervisor's lines
	// in the proxy's stderr log).
	stderr, _ := os.ReadFile(first.LogFile + ".stderr")
	var delays []string
	for _, l := range strings.Split(string(stderr), "\n") {
		if _, rest, ok := strings.Cut(l, "next proxy in "); ok {
			delays = append(delays, strings.Fields(rest)[0])
		}
	}
	if len(delays) < 2 || delays[0] != "100ms" || delays[1] != "200ms" {
		t.Errorf("delays before the next workers: %v, want 100ms, 200ms, ...\n%s", delays, stderr)
	}
	if h, _ := e.lsColumns(c); h != "crashloop" {
		t.Errorf("ls in a crash loop: health %s", h)
	}
	if err := e.check(c); err == nil {
		t.Error("CHECK passed in a crash loop")
	}
	if r := curl(t, c.ns, e.caFile, "--max-time", "2", "--resolve", apiName+":443:"+apiAddr4.String(), "https://"+apiName+"/"); r.exit == 0 {
		t.Errorf("reached the allowed name in a crash loop: %v", r)
	}

	if err := os.Remove(first.LogFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(first.LogFile+".aside", first.LogFile); err != nil {
		t.Fatal(err)
	}
	s = e.waitState(c, "a worker once the policy is good", servingOther(0))
	if !e.reaches(c, "https://"+apiName+"/", apiName) {
		t.Error("allowed name not reached after the crash loop")
	}
	if err := e.del(c); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	waitGone(t, s.Supervisor.PID)
}

// TestCNISupervisorKilled: with its supervisor killed, the sandbox's
// worker serves on, enforcing its policy (never open), but nothing would
// replace it: CHECK fails and ls says unsupervised; doorman start puts a
// new proxy under a supervisor in its place. With supervisor and worker
// killed, its TCP is refused, ls says down, CHECK fails, and doorman
// start restores both.
func TestCNISupervisorKilled(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	s := e.state(c)
	if err := syscall.Kill(s.Supervisor.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s.Supervisor.PID)
	if err := e.check(c); err == nil || !strings.Contains(err.Error(), "supervisor") {
		t.Errorf("CHECK with the supervisor killed: %v, want it to fail naming the supervisor", err)
	}
	if h, _ := e.lsColumns(c); h != "unsupervised" {
		t.Errorf("ls with the supervisor killed: health %s", h)
	}
	if !e.refusedTLS(c, evilName, evilAddr4) {
		t.Error("the unsupervised worker does not deny")
	}
	// doorman start replaces the unsupervised worker, whose cgroup it
	// still holds: the new proxy gets another.
	e.operator("start", c.rt.ContainerID)
	waitGone(t, s.PID)
	s = e.assertRestored(c)
	if want := sandbox.DefaultCgroupSlice + "/doorman-" + c.key + "-1"; s.Cgroup.Path != want {
		t.Errorf("the replacing proxy's cgroup %s, want %s", s.Cgroup.Path, want)
	}
	assertCgroupGone(t, sandbox.DefaultCgroupSlice+"/doorman-"+c.key)

	for _, pid := range []int{s.Supervisor.PID, s.PID} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitGone(t, pid)
	}
	if r := curl(t, c.ns, e.caFile, "--max-time", "2", "--resolve", apiName+":443:"+apiAddr4.String(), "https://"+apiName+"/"); r.exit == 0 {
		t.Errorf("reached the allowed name with no proxy: %v", r)
	}
	if n := e.evil.Requests(); n != 0 {
		t.Errorf("evil served %d requests", n)
	}
	if h, _ := e.lsColumns(c); h != "down" {
		t.Errorf("ls with supervisor and worker killed: health %s", h)
	}
	if err := e.check(c); err == nil {
		t.Error("CHECK passed with no proxy")
	}
	e.operator("start", c.rt.ContainerID)
	e.assertRestored(c)
}

// assertRestored checks that c's proxy serves under a live supervisor,
// in its cgroup with the default limits, and that CHECK passes.
func (e *cniEnv) assertRestored(c *container) *sandbox.State {
	t := e.t
	t.Helper()
	s := e.state(c)
	if !s.SupervisorAlive() || !s.Serving() || s.Cgroup == nil {
		stderr, _ := os.ReadFile(s.LogFile + ".stderr")
		t.Fatalf("after doorman start: supervisor alive %v, serving %v, cgroup %+v (%s); the proxy's stderr:\n%s",
			s.SupervisorAlive(), s.Serving(), s.Cgroup, s.CgroupError, stderr)
	}
	assertProxyIn(t, s, s.Cgroup.Path, defaultLimits)
	if !e.reaches(c, "https://"+apiName+"/", apiName) {
		t.Error("allowed name not reached after doorman start")
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK after doorman start: %v", err)
	}
	return s
}

// TestCNIStopStart: doorman stop ends a sandbox's proxy, supervisor and
// cgroup and keeps them ended (closed: its TCP is refused); doorman
// start brings them back.
func TestCNIStopStart(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	s := e.state(c)
	path := sandbox.DefaultCgroupSlice + "/doorman-" + c.key

	e.operator("stop", c.rt.ContainerID)
	waitGone(t, s.PID)
	waitGone(t, s.Supervisor.PID)
	if pids := append(proxiesFor(c.rt.ContainerID), supervisorsFor(c.rt.ContainerID)...); len(pids) != 0 {
		t.Errorf("processes after doorman stop: %v", pids)
	}
	assertCgroupGone(t, path)
	if r := curl(t, c.ns, e.caFile, "--max-time", "2", "--resolve", apiName+":443:"+apiAddr4.String(), "https://"+apiName+"/"); r.exit == 0 {
		t.Errorf("reached the allowed name with the proxy stopped: %v", r)
	}
	if h, _ := e.lsColumns(c); h != "stopped" {
		t.Errorf("ls after doorman stop: health %s", h)
	}
	if err := e.check(c); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("CHECK after doorman stop: %v", err)
	}
	if !tablePresent(t, c) {
		t.Error("doorman stop removed the ruleset")
	}

	e.operator("start", c.rt.ContainerID)
	s = e.state(c)
	assertProxyIn(t, s, path, defaultLimits)
	if !e.reaches(c, "https://"+apiName+"/", apiName) {
		t.Error("allowed name not reached after doorman start")
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK after doorman start: %v", err)
	}
}

// operator runs `doorman COMMAND --state-dir STATE ARGS...` as an
// operator does, in the host's mount namespace (with its cgroup
// hierarchies: `ip netns exec`, which cli uses, mounts a fresh /sys),
// but in the test's host network namespace, where the proxies run. It
// fails the test unless the command succeeds.
func (e *cniEnv) operator(command string, args ...string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{"--net=" + e.net.HostNS().Path(), doormanBin(), command, "--state-dir", e.stateDir}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", full...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("doorman %s %v: %v\n%s", command, args, err, out)
	}
	return string(out)
}

// TestCNISupervisedOOM: a worker that reaches its cgroup's memory limit
// (here the least there is, 8 MiB, filled by connections that hold
// unfinished ClientHellos) is killed by the kernel's OOM killer, not its
// supervisor, and replaced; the status says it was the OOM killer, and
// the new worker serves.
func TestCNISupervisedOOM(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"proxyLimits": map[string]any{"memory": "8Mi"}}))
	first := e.state(c)
	path := sandbox.DefaultCgroupSlice + "/doorman-" + c.key
	assertProxyIn(t, first, path, proxyLimits{8 << 20, spec.DefaultProxyPids, spec.DefaultProxyCPUWeight})

	var conns []net.Conn
	closeAll := func() {
		for _, conn := range conns {
			conn.Close()
		}
		conns = nil
	}
	defer closeAll()
	// A ClientHello that announces 16 KiB, then trickles in 1-byte
	// records: the proxy holds each such connection, and its buffers,
	// until it has seen a name or the sniff timeout passes.
	hello := []byte{0x16, 0x03, 0x01, 0x01, 0x00, 0x01, 0x00, 0x40, 0x00, 0x03, 0x03}
	for i := 0; i < 100; i++ {
		hello = append(hello, 0x16, 0x03, 0x01, 0x00, 0x01, 0x00)
	}
	oomed := func() bool {
		st := e.state(c).Supervision()
		return st != nil && st.Restarts > 0
	}
	for i := 0; i < 3000 && !oomed(); i++ {
		conn, err := c.ns.DialTCP(apiAddr4.String() + ":443")
		if err != nil {
			break // the listener's backlog is full: the worker is gone
		}
		conns = append(conns, conn)
		conn.Write(hello)
	}
	t.Logf("%d connections held", len(conns))
	closeAll()
	s := e.waitState(c, "a new worker after the OOM kill", servingOther(first.PID))
	st := s.Supervision()
	if st.LastExit == nil || !st.LastExit.OOM || !strings.Contains(st.LastExit.Reason, "OOM killer") {
		t.Errorf("the last exit: %+v, want the OOM killer's", st.LastExit)
	}
	if s.Supervisor.PID != first.Supervisor.PID || !s.SupervisorAlive() {
		t.Errorf("the supervisor did not survive: %d → %d (alive %v)", first.Supervisor.PID, s.Supervisor.PID, s.SupervisorAlive())
	}
	if p := e.lsProxy(c); p.LastExit == nil || !p.LastExit.OOM {
		t.Errorf("ls -o json does not say the OOM killer ended the last proxy: %+v", p)
	}
	if !e.reaches(c, "https://"+apiName+"/", apiName) {
		t.Error("allowed name not reached after the OOM kill")
	}
}

// TestHookRuncProxyCgroup: the hook puts the proxy's cgroup beside the
// container's, below the parent of its linux.cgroupsPath, with the
// default limits or those of --proxy-memory and friends; killing every
// process of the container (runc kill --all) leaves the proxy alone;
// runc delete (poststop) removes the container's cgroup and the proxy's.
func TestHookRuncProxyCgroup(t *testing.T) {
	e := newRuncEnv(t)
	for _, tc := range []struct {
		name  string
		flags []string
		want  proxyLimits
	}{
		{"defaults", nil, defaultLimits},
		{"flags", []string{"--proxy-memory", "48Mi", "--proxy-pids", "64", "--proxy-cpu-weight", "200"}, proxyLimits{48 << 20, 64, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sbx := e.net.NewSandbox(t)
			c := e.newContainer("cg", withNetNS(sbx.Path()), allowAPI(), withHookFlags(tc.flags...))
			e.runDetached(c)
			s := e.state(c)
			path := e.cgroupParent + "/doorman-" + hook.Key(c.id)
			assertProxyIn(t, s, path, tc.want)
			if s.Cgroup == nil || s.Cgroup.Parent != e.cgroupParent {
				t.Errorf("recorded cgroup %+v, want one below %s", s.Cgroup, e.cgroupParent)
			}
			if r := e.exec(c, "/probe", "get", "https://"+apiName+"/", "--ca", "/ca.pem"); r.exit != 0 {
				t.Errorf("allowed HTTPS: %v", r)
			}

			e.mustRunc("kill", "--all", c.id, "KILL")
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if strings.Contains(e.mustRunc("state", c.id).stdout, `"stopped"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the container did not stop")
				}
			}
			if now := e.state(c); !now.SupervisorAlive() || !now.Serving() {
				t.Errorf("killing the container's processes reached its proxy: supervisor alive %v, worker alive %v", now.SupervisorAlive(), now.Serving())
			}

			e.delete(c)
			e.assertNoSandbox(c)
			assertCgroupGone(t, path)
			if left := e.cgroupLeft(c); left != "" {
				t.Errorf("the container's cgroup %s is left", left)
			}
		})
	}
}
