package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/hook"
)

// upgradeFrom is the release the doorman under test must take over on a
// running host: the last commit before one typed Spec, the proxy's config
// file and the state migration (issue 15). Its sandboxes record their
// state in its format, and its proxies were started with flags.
const upgradeFrom = "6eaae5a15de3055ebc3330c757e90ad72c01be37"

// upgradeFromSupervised is the last release before one spec package and
// one launch contract (issue 25): its proxies are a supervisor and its
// workers, started by the proxyconf package's config file and flags; its
// state, supervisor.json and proxy config are in that release's keys.
const upgradeFromSupervised = "f76faea74879be9db8335beb0d038abd527601d0"

// exeOf is the binary process pid runs.
func exeOf(t *testing.T, pid int) string {
	t.Helper()
	exe, err := os.Readlink(filepath.Join("/proc", itoa(pid), "exe"))
	if err != nil {
		t.Fatalf("binary of process %d: %v", pid, err)
	}
	return exe
}

// cmdlineOf is process pid's command line.
func cmdlineOf(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "cmdline"))
	if err != nil {
		t.Fatalf("command line of process %d: %v", pid, err)
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// TestUpgradeInPlaceCNI adds two CNI sandboxes with the doorman of
// upgradeFrom, then, with the doorman under test only: lists and checks
// them (CHECK reports the old release's weaker host-side layer until a
// second ADD applies this release's); edits one (allow, deny: its old proxy picks the edits up, and a
// connection through it stays up), takes it to mode none and back (which
// starts a proxy of this doorman, with a config file) and checks it again;
// and DELs both, leaving no table, state or process.
func TestUpgradeInPlaceCNI(t *testing.T) {
	skipUnlessRoot(t)
	oldDir := buildPreviousDoorman(t, upgradeFrom)
	e := newCNIEnv(t)
	current := e.cni
	e.cni = libcni.NewCNIConfig([]string{oldDir}, nil)
	edited, kept := e.newContainer(), e.newContainer()
	e.mustAdd(edited, e.conflist(nil))
	e.mustAdd(kept, e.conflist(map[string]any{"allowedHosts": []string{apiName, otherName}}))
	e.cni = current // from here on, the doorman under test

	oldProxies := map[*container]int{}
	for _, c := range []*container{edited, kept} {
		s := e.state(c)
		if exe := exeOf(t, s.PID); exe != filepath.Join(oldDir, "doorman") {
			t.Fatalf("proxy of %s runs %s, want the old release's doorman", c.key, exe)
		}
		if args := cmdlineOf(t, s.PID); slices.Contains(args, "--config") {
			t.Fatalf("the old release started its proxy with a config file? %q", args)
		}
		oldProxies[c] = s.PID
		if l := e.ls(c); l.Mode != "allowlist" || l.Proxy.Health != "up" || l.Runtime != "cni" {
			t.Errorf("ls of an old sandbox: %+v", l)
		}
		// The old release's host-side layer lacks this release's layer-2
		// isolation (issue 24): CHECK says so, and a second ADD of doorman
		// (as a runtime re-plumbing the sandbox sends it) applies it.
		if err := e.check(c); err == nil || !strings.Contains(err.Error(), "port isolation") {
			t.Errorf("CHECK of an old sandbox: %v, want its older host-side layer reported (no port isolation)", err)
		}
		if _, err := e.doormanVerb(c, c.list, "ADD", e.bridgeResult(c)); err != nil {
			t.Fatalf("second ADD of an old sandbox: %v", err)
		}
		if err := e.check(c); err != nil {
			t.Errorf("CHECK of an old sandbox after a second ADD: %v", err)
		}
	}
	apiURL, otherURL := "https://"+apiName+"/", "https://"+otherName+"/"
	if !e.reaches(edited, apiURL, apiName) || !e.unresolved(edited, otherName) {
		t.Fatal("the old proxy does not enforce its policy")
	}
	held := e.holdConn(edited, apiName)

	// Edits: the old proxy reloads the policy file the new doorman writes.
	id := edited.rt.ContainerID
	if r := e.mustCLI("allow", id, otherName); !strings.Contains(r.stdout, "in force") {
		t.Errorf("allow on an old sandbox: %v", r)
	}
	if !e.reaches(edited, otherURL, otherName) {
		t.Error("a name allowed by the new doorman is refused by the old proxy")
	}
	if !held.open(100*time.Millisecond) || held.get(apiName) != nil {
		t.Error("a connection through the old proxy was disturbed by an edit that kept its permission")
	}
	e.mustCLI("deny", id, apiName)
	if !e.unresolved(edited, apiName) || !e.refusedTLS(edited, apiName, apiAddr4) {
		t.Error("a name denied by the new doorman still reaches through the old proxy")
	}
	if pid := e.state(edited).PID; pid != oldProxies[edited] {
		t.Errorf("edits within the proxy's modes replaced the old proxy (pid %d, was %d)", pid, oldProxies[edited])
	}

	// Mode none and back: the new doorman's proxy, with a config file.
	e.mustCLI("mode", id, "none")
	waitGone(t, oldProxies[edited])
	if l := e.ls(edited); l.Mode != "none" || l.Proxy.Health != "none" {
		t.Errorf("ls after mode none: %+v", l)
	}
	e.mustCLI("mode", id, "allowlist")
	s := e.state(edited)
	if exe := exeOf(t, s.PID); exe != doormanBin() {
		t.Errorf("proxy after mode allowlist runs %s, want %s", exe, doormanBin())
	}
	if args := cmdlineOf(t, s.PID); !slices.Contains(args, "--config") || !slices.Contains(args, id) {
		t.Errorf("proxy after mode allowlist: command line %q, want --sandbox %s --config FILE", args, id)
	}
	if !e.reaches(edited, otherURL, otherName) || !e.unresolved(edited, apiName) {
		t.Error("the new proxy does not enforce the edited policy")
	}
	if err := e.check(edited); err != nil {
		t.Errorf("CHECK after the new proxy started: %v", err)
	}
	// The other sandbox's old proxy still serves.
	if !e.reaches(kept, otherURL, otherName) {
		t.Error("an untouched old proxy stopped serving")
	}

	// DEL with the new doorman: nothing is left.
	pids := []int{s.PID, oldProxies[kept]}
	for _, c := range []*container{edited, kept} {
		if err := e.del(c); err != nil {
			t.Fatalf("DEL of %s: %v", c.key, err)
		}
		if tablePresent(t, c) {
			t.Errorf("doorman's table left in %s", c.ns.Path())
		}
		if _, err := os.Stat(filepath.Join(e.stateDir, c.key)); !os.IsNotExist(err) {
			t.Errorf("state of %s left: %v", c.key, err)
		}
		if pids := proxiesFor(c.rt.ContainerID); len(pids) != 0 {
			t.Errorf("proxies of %s left: %v", c.key, pids)
		}
	}
	for _, pid := range pids {
		waitGone(t, pid)
	}
}

// TestUpgradeInPlaceHook runs a runc container whose createRuntime hook
// is the doorman of upgradeFrom and whose poststop hook is the doorman
// under test: the new doorman lists the old hook sandbox, its old proxy
// serves the container, and `runc delete` tears it down with nothing left.
func TestUpgradeInPlaceHook(t *testing.T) {
	skipUnlessRoot(t)
	oldDir := buildPreviousDoorman(t, upgradeFrom)
	e := newRuncEnv(t)
	sbx := e.net.NewSandbox(t)
	old := filepath.Join(oldDir, "doorman")
	c := e.newContainer("upgrade", withNetNS(sbx.Path()), allowAPI(), func(s *specs.Spec) {
		for i := range s.Hooks.CreateRuntime {
			s.Hooks.CreateRuntime[i].Path = old
		}
	})
	e.runDetached(c)
	s := e.state(c)
	if exe := exeOf(t, s.PID); exe != old {
		t.Fatalf("the container's proxy runs %s, want the old release's doorman", exe)
	}
	if l := e.ls(c.ctr()); l.Runtime != "hook" || l.ID != c.id || l.Proxy.Health != "up" || l.Mode != "allowlist" {
		t.Errorf("ls of an old hook sandbox: %+v", l)
	}
	if r := e.exec(c, "/probe", "get", "https://"+apiName+"/upgrade", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
		t.Errorf("allowed HTTPS through the old proxy: %v", r)
	}
	if ok, err := enforce.Present(sbx.Path()); !ok || err != nil {
		t.Fatalf("no doorman table in the container's netns: %v", err)
	}
	e.delete(c) // poststop: the doorman under test
	e.assertNoSandbox(c)
	waitGone(t, s.PID)
	if _, err := os.Stat(filepath.Join(e.stateDir, hook.Key(c.id))); !os.IsNotExist(err) {
		t.Errorf("state left: %v", err)
	}
}

// TestUpgradeInPlaceSupervised adds a CNI sandbox with the doorman of
// upgradeFromSupervised, whose supervisor and worker keep running, then,
// with the doorman under test only: lists and checks it, ADDs it again,
// edits its policy (the old worker reloads it), kills the old worker (the
// old supervisor replaces it with another of its own release, on the
// config file that release wrote, and the replacement enforces the edited
// policy), checks it again and DELs it, leaving no table, state or
// process.
func TestUpgradeInPlaceSupervised(t *testing.T) {
	skipUnlessRoot(t)
	oldDir := buildPreviousDoorman(t, upgradeFromSupervised)
	old := filepath.Join(oldDir, "doorman")
	e := newCNIEnv(t)
	current := e.cni
	e.cni = libcni.NewCNIConfig([]string{oldDir}, nil)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	e.cni = current // from here on, the doorman under test

	s := e.state(c)
	if s.Supervisor == nil {
		t.Fatal("the old release's sandbox records no supervisor")
	}
	sup, worker := s.Supervisor.PID, s.PID
	if exe := exeOf(t, sup); exe != old {
		t.Fatalf("supervisor runs %s, want the old release's doorman", exe)
	}
	if exe := exeOf(t, worker); exe != old {
		t.Fatalf("worker runs %s, want the old release's doorman", exe)
	}
	if l := e.ls(c); l.Mode != "allowlist" || l.Proxy.Health != "up" || l.Runtime != "cni" {
		t.Errorf("ls of an old supervised sandbox: %+v", l)
	}
	// The old release's host-side layer lacks this release's redirect
	// table (issue 26): CHECK may say so, and nothing else, until a
	// second ADD applies this release's layer.
	if err := e.check(c); err != nil && !strings.Contains(err.Error(), "host-side layer") {
		t.Errorf("CHECK of an old supervised sandbox: %v", err)
	}
	if _, err := e.doormanVerb(c, c.list, "ADD", e.bridgeResult(c)); err != nil {
		t.Fatalf("second ADD of an old supervised sandbox: %v", err)
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK after a second ADD: %v", err)
	}
	apiURL, otherURL := "https://"+apiName+"/", "https://"+otherName+"/"
	if !e.reaches(c, apiURL, apiName) || !e.unresolved(c, otherName) {
		t.Fatal("the old proxy does not enforce its policy")
	}
	id := c.rt.ContainerID
	if r := e.mustCLI("allow", id, otherName); !strings.Contains(r.stdout, "in force") {
		t.Errorf("allow on an old supervised sandbox: %v", r)
	}
	if !e.reaches(c, otherURL, otherName) {
		t.Error("a name allowed by the new doorman is refused by the old proxy")
	}

	// The old supervisor replaces its worker, with its own release.
	if err := syscall.Kill(worker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, worker)
	var next int
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if l := e.ls(c); l.Proxy.Health == "up" && l.Proxy.PID != 0 && l.Proxy.PID != worker {
			next = l.Proxy.PID
			break
		}
	}
	if next == 0 {
		t.Fatalf("the old supervisor did not replace its worker: %+v", e.ls(c))
	}
	if exe := exeOf(t, next); exe != old {
		t.Errorf("replacement worker runs %s, want the old release's doorman", exe)
	}
	if !e.reaches(c, otherURL, otherName) || !e.reaches(c, apiURL, apiName) {
		t.Error("the replacement worker does not enforce the edited policy")
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK after the worker was replaced: %v", err)
	}

	if err := e.del(c); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if tablePresent(t, c) {
		t.Errorf("doorman's table left in %s", c.ns.Path())
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, c.key)); !os.IsNotExist(err) {
		t.Errorf("state of %s left: %v", c.key, err)
	}
	for _, pid := range []int{sup, next} {
		waitGone(t, pid)
	}
	if pids := proxiesFor(id); len(pids) != 0 {
		t.Errorf("proxies left: %v", pids)
	}
}
