package sandbox

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/spec"
)

// These tests drive the sandbox lifecycle through a fakeKernel: what it
// decides, in which order, what it undoes when a step fails, and what it
// leaves behind. They need no root; the root tests beside them and in
// ./integration run the same lifecycle on the host.

// fakeRequest is a request to enforce mode on sandbox key in the fake
// namespace ns, with its state and logs in a temporary directory.
func fakeRequest(t *testing.T, key, ns string, mode conf.Mode) Request {
	t.Helper()
	p, err := conf.NewPolicy(mode, []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	r := Request{
		Attachment:  Attachment{Key: key, Runtime: "cni", NetNS: ns, Network: "net", IfName: "eth0"},
		Spec:        spec.Spec{Policy: p, LogDir: t.TempDir()},
		StateDir:    t.TempDir(),
		ProxyBinary: "/nonexistent/doorman",
	}
	return r
}

// enforced is a fake kernel with sandbox c1-eth0 enforced in mode in
// /fake/ns/a, the host-side layer asked for where hostLayer says so, the
// request that enforced it and the state Enforce returned.
func enforced(t *testing.T, mode conf.Mode, hostLayer bool) (*fakeKernel, Request, *State) {
	t.Helper()
	f := newFakeKernel()
	r := fakeRequest(t, "c1-eth0", "/fake/ns/a", mode)
	r.Spec.HostLayer = hostLayer
	s, err := f.system().enforce(r)
	if err != nil {
		t.Fatal(err)
	}
	return f, r, s
}

// wantGone fails t unless the state directory of r's sandbox is gone.
func wantGone(t *testing.T, r Request) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(r.StateDir, r.Key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory: %v, want it gone", err)
	}
}

// wantOps fails t unless the calls f recorded are want, in order.
func wantOps(t *testing.T, f *fakeKernel, want ...string) {
	t.Helper()
	if got := f.ops(); !slices.Equal(got, want) {
		t.Errorf("calls:\n got %v\nwant %v", got, want)
	}
}

// The steps of a new sandbox, in order: the namespace is checked, the
// table looked for (none: Create, which never overwrites), the proxy's
// cgroup made and its move warmed up before the proxy starts, then the
// ruleset, and the supervisor named and waited for after the state is
// saved.
func TestEnforceSteps(t *testing.T) {
	f := newFakeKernel()
	r := fakeRequest(t, "c1-eth0", "/fake/ns/a", conf.ModeAllowlist)
	s, err := f.system().enforce(r)
	if err != nil {
		t.Fatal(err)
	}
	wantOps(t, f, "netns.Check", "rules.Present", "cgroups.Layout", "cgroups.Create", "cgroups.WarmMigration",
		"proxy.Start", "rules.Create", "proxy.supervisor", "proxy.wait")
	if s.Port4 != 15001 || s.Supervisor == nil || s.PID != s.Supervisor.PID+1 || s.Cgroup == nil {
		t.Errorf("state %+v: want the proxy's ports, supervisor, worker and cgroup recorded", s)
	}
	if got := f.rules["/fake/ns/a"]; got.Port4 != 15001 || got.DenyAll {
		t.Errorf("ruleset %+v: want a redirect to the proxy's port", got)
	}
	loaded, err := f.system().load(r.StateDir, r.Key)
	if err != nil || loaded.NetNSIno != 101 || loaded.Supervisor == nil {
		t.Fatalf("saved state %+v, %v: want the namespace's identity and the supervisor", loaded, err)
	}
	if _, err := os.Stat(loaded.PolicyPath()); err != nil {
		t.Errorf("policy file: %v", err)
	}
	if err := f.system().check(r.StateDir, r.Key); err != nil {
		t.Errorf("check after enforce: %v", err)
	}
}

// Mode none has no proxy and no cgroup: the deny-all ruleset only.
func TestEnforceModeNone(t *testing.T) {
	f, _, _ := enforced(t, conf.ModeNone, false)
	wantOps(t, f, "netns.Check", "rules.Present", "rules.Create")
	if !f.rules["/fake/ns/a"].DenyAll {
		t.Errorf("ruleset %+v: want deny-all", f.rules["/fake/ns/a"])
	}
}

// A failure at any step of a new sandbox leaves nothing behind: no
// ruleset, host-side layer, process, cgroup or state directory, and the
// error says what failed.
func TestEnforceRollsBack(t *testing.T) {
	for _, step := range []string{"proxy.Start", "rules.Create", "layer.FindHostPeers", "layer.Apply", "proxy.supervisor", "proxy.wait", "cgroups.Layout"} {
		t.Run(step, func(t *testing.T) {
			f := newFakeKernel()
			f.fail[step] = errors.New("injected failure")
			r := fakeRequest(t, "c1-eth0", "/fake/ns/a", conf.ModeAllowlist)
			r.Spec.HostLayer = true
			_, err := f.system().enforce(r)
			if step == "cgroups.Layout" {
				// No cgroup is no failure: the proxy runs without.
				if err != nil {
					t.Fatalf("enforce without cgroups: %v", err)
				}
				if err := f.system().teardown(r.StateDir, r.Key); err != nil {
					t.Fatal(err)
				}
			} else if err == nil || !strings.Contains(err.Error(), "injected failure") {
				t.Fatalf("enforce: %v, want the injected failure", err)
			}
			if left := f.leftovers(); left != "" {
				t.Errorf("left behind: %s (calls %v)", left, f.ops())
			}
			wantGone(t, r)
		})
	}
}

// A namespace that another live sandbox holds is refused before anything
// changes: its ruleset, proxy and state stay as they were.
func TestEnforceRefusesHeldNamespace(t *testing.T) {
	f := newFakeKernel()
	first := fakeRequest(t, "c1-eth0", "/fake/ns/a", conf.ModeAllowlist)
	if _, err := f.system().enforce(first); err != nil {
		t.Fatal(err)
	}
	before := f.leftovers()
	f.reset()
	second := fakeRequest(t, "c1-eth1", "/fake/ns/a", conf.ModeAllowlist)
	second.StateDir = first.StateDir
	_, err := f.system().enforce(second)
	if err == nil || !strings.Contains(err.Error(), "already enforced by doorman sandbox c1-eth0") {
		t.Fatalf("enforce in a held namespace: %v", err)
	}
	for _, op := range f.ops() {
		if op != "netns.Check" && op != "rules.Present" {
			t.Errorf("refused enforce called %s", op)
		}
	}
	if after := f.leftovers(); after != before {
		t.Errorf("installed %q, want %q as before", after, before)
	}
	if _, err := os.Stat(filepath.Join(second.StateDir, second.Key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused sandbox's state directory: %v", err)
	}
	if err := f.system().check(first.StateDir, first.Key); err != nil {
		t.Errorf("holder after the refusal: %v", err)
	}
}

// A table nobody live holds is a leftover: the new sandbox replaces it
// with Apply (Create never overwrites).
func TestEnforceReplacesLeftoverTable(t *testing.T) {
	f := newFakeKernel()
	f.rules["/fake/ns/a"] = f.rules["/fake/ns/a"]
	r := fakeRequest(t, "c1-eth0", "/fake/ns/a", conf.ModeAllowlist)
	if _, err := f.system().enforce(r); err != nil {
		t.Fatal(err)
	}
	if ops := f.ops(); !slices.Contains(ops, "rules.Apply") || slices.Contains(ops, "rules.Create") {
		t.Errorf("calls %v: want the leftover replaced by Apply", ops)
	}
}

// Enforcing a live sandbox again re-applies its ruleset and keeps its
// proxy: no second proxy, same ports.
func TestEnforceIdempotent(t *testing.T) {
	f, r, first := enforced(t, conf.ModeAllowlist, false)
	f.reset()
	again, err := f.system().enforce(r)
	if err != nil {
		t.Fatal(err)
	}
	wantOps(t, f, "netns.Check", "rules.Apply")
	if again.Supervisor.PID != first.Supervisor.PID || again.Port4 != first.Port4 {
		t.Errorf("re-enforced %+v, want the first proxy %+v kept", again.Supervisor, first.Supervisor)
	}
}

// A recorded sandbox whose proxy died is torn down (its processes, its
// ruleset), then enforced afresh.
func TestEnforceStaleStateStartsAfresh(t *testing.T) {
	f, r, first := enforced(t, conf.ModeAllowlist, false)
	clear(f.live)
	f.reset()
	again, err := f.system().enforce(r)
	if err != nil {
		t.Fatal(err)
	}
	ops := f.ops()
	rm, start := slices.Index(ops, "rules.Remove"), slices.Index(ops, "proxy.Start")
	if rm < 0 || start < rm || !slices.Contains(ops, "rules.Create") {
		t.Errorf("calls %v: want the old ruleset removed before the new proxy starts, then a new ruleset", ops)
	}
	if again.Supervisor.PID == first.Supervisor.PID {
		t.Errorf("supervisor %d: want a new one", again.Supervisor.PID)
	}
}

// Teardown stops the proxy and removes the ruleset, the host-side layer
// and the state; a second one is no error.
func TestTeardownLeavesNothing(t *testing.T) {
	f, r, _ := enforced(t, conf.ModeAllowlist, true)
	if err := f.system().teardown(r.StateDir, r.Key); err != nil {
		t.Fatal(err)
	}
	if left := f.leftovers(); left != "" {
		t.Errorf("left behind: %s", left)
	}
	wantGone(t, r)
	f.reset()
	if err := f.system().teardown(r.StateDir, r.Key); err != nil {
		t.Errorf("second teardown: %v", err)
	}
	wantOps(t, f, "layer.Remove") // what a Retire may have left
}

// Retire (a runtime's GC) takes everything down as Teardown does but the
// ruleset, which a namespace that still exists keeps in its deny-all form,
// and the host-side layer: GC leaves the container's interface, and the
// container may still run. The later DEL of the key removes the layer. A
// namespace that is gone, or that its path no longer names, gets none.
func TestRetireLeavesDenyAll(t *testing.T) {
	f, r, _ := enforced(t, conf.ModeAllowlist, true)
	denied, err := f.system().retire(r.StateDir, r.Key)
	if err != nil || !denied {
		t.Fatalf("retire: %v, %v; want the deny-all ruleset left", denied, err)
	}
	if left := f.leftovers(); left != "host-side layer of c1-eth0, ruleset in /fake/ns/a" {
		t.Errorf("left behind: %q, want only the namespace's ruleset and the host-side layer", left)
	}
	if !f.rules["/fake/ns/a"].DenyAll {
		t.Errorf("the ruleset left is %+v, want the one that denies everything", f.rules["/fake/ns/a"])
	}
	wantGone(t, r)
	if err := f.system().teardown(r.StateDir, r.Key); err != nil {
		t.Fatal(err)
	}
	if left := f.leftovers(); left != "ruleset in /fake/ns/a" {
		t.Errorf("after the DEL that follows, left behind: %q, want only the namespace's ruleset (the plugin's DEL removes it)", left)
	}

	f, r, _ = enforced(t, conf.ModeAllowlist, false)
	f.netns["/fake/ns/a"] = 999 // the path names another namespace now
	if denied, err := f.system().retire(r.StateDir, r.Key); err != nil || denied {
		t.Fatalf("retire: %v, %v; want nothing left in another namespace", denied, err)
	}
	if _, ok := f.rules["/fake/ns/a"]; ok && slices.Contains(f.ops(), "rules.Apply") {
		t.Error("retire applied a ruleset in a namespace that is not the sandbox's")
	}
	wantGone(t, r)
}

// A state file that does not load (edited by hand, or written by a
// release whose fields this one cannot read) still names nothing Teardown
// could stop: but the supervisor's status file names the proxy, and the
// host-side layer is the key's. Both go with the state, so that a DEL
// leaves no proxy holding the namespace. (The ruleset's namespace is
// lost with the state: the plugin's DEL removes a table nobody holds from
// the namespace it names.)
func TestTeardownUnreadableState(t *testing.T) {
	f, r, s := enforced(t, conf.ModeAllowlist, true)
	if err := os.WriteFile(filepath.Join(s.Dir, stateFile), []byte(`{"mode": 7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.system().load(r.StateDir, r.Key); err == nil {
		t.Fatal("the state loaded")
	}
	if err := f.system().teardown(r.StateDir, r.Key); err != nil {
		t.Fatal(err)
	}
	if left := f.leftovers(); left != "cgroup /doorman.slice/doorman-c1-eth0, ruleset in /fake/ns/a" {
		t.Errorf("left behind: %q, want only what the state alone named", left)
	}
	wantGone(t, r)
}

// Teardown never removes rules from a namespace its path no longer
// names: they are another container's. The state still goes.
func TestTeardownOtherNamespace(t *testing.T) {
	f, r, _ := enforced(t, conf.ModeNone, false)
	f.netns["/fake/ns/a"] = 999 // the path names another namespace now
	f.reset()
	if err := f.system().teardown(r.StateDir, r.Key); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(f.ops(), "rules.Remove") {
		t.Errorf("calls %v: removed rules from a namespace that is not the sandbox's", f.ops())
	}
	wantGone(t, r)
}

// Teardown reports what it could not remove, and removes the rest and
// the state anyway.
func TestTeardownReportsFailures(t *testing.T) {
	f, r, _ := enforced(t, conf.ModeAllowlist, false)
	f.fail["rules.Remove"] = errors.New("injected failure")
	err := f.system().teardown(r.StateDir, r.Key)
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("teardown: %v, want the injected failure", err)
	}
	if left := f.leftovers(); left != "ruleset in /fake/ns/a" {
		t.Errorf("left behind: %q, want only the ruleset that would not go", left)
	}
	wantGone(t, r)
}

// Check fails for each way a sandbox is not as recorded.
func TestCheckFindsDrift(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drift func(f *fakeKernel)
		want  string
	}{
		{"ruleset changed", func(f *fakeKernel) { f.rules["/fake/ns/a"] = f.rules["/fake/ns/b"] }, "differs"},
		{"ruleset gone", func(f *fakeKernel) { delete(f.rules, "/fake/ns/a") }, "differs"},
		{"host-side layer gone", func(f *fakeKernel) { clear(f.layers) }, "host-side layer"},
		{"proxy dead", func(f *fakeKernel) { clear(f.live) }, "not running"},
		{"namespace gone", func(f *fakeKernel) { delete(f.netns, "/fake/ns/a") }, "no longer is the sandbox's network namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, r, _ := enforced(t, conf.ModeAllowlist, true)
			if err := f.system().check(r.StateDir, r.Key); err != nil {
				t.Fatalf("check before the drift: %v", err)
			}
			tc.drift(f)
			if err := f.system().check(r.StateDir, r.Key); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("check: %v, want %q", err, tc.want)
			}
		})
	}
}

// Entering mode none puts the deny-all ruleset in before the proxy
// stops: the namespace is never without rules.
func TestEnterNoneOrder(t *testing.T) {
	f, r, _ := enforced(t, conf.ModeAllowlist, false)
	f.reset()
	none, _ := conf.NewPolicy(conf.ModeNone, nil)
	u, err := f.system().updatePolicy(r.StateDir, r.Key, none)
	if err != nil {
		t.Fatal(err)
	}
	ops := f.ops()
	apply, stop := slices.Index(ops, "rules.Apply"), slices.Index(ops, "procs.Stop")
	if apply < 0 || stop < apply {
		t.Errorf("calls %v: want the deny-all ruleset before the proxy stops", ops)
	}
	if !u.ProxyStopped || !f.rules["/fake/ns/a"].DenyAll || f.leftovers() != "ruleset in /fake/ns/a" {
		t.Errorf("after entering none: %+v, installed %q", u, f.leftovers())
	}
}

// Leaving mode none starts the proxy before the redirect replaces the
// deny-all ruleset; a failure at any step (the host-side layer's after
// the redirect is in) leaves the sandbox in mode none with its old policy
// file, deny-all ruleset and no proxy.
func TestLeaveNoneRollsBack(t *testing.T) {
	for _, step := range []string{"", "proxy.Start", "proxy.wait", "rules.Apply", "layer.Apply"} {
		t.Run("fail "+step, func(t *testing.T) {
			f, r, _ := enforced(t, conf.ModeNone, true)
			s, _ := f.system().load(r.StateDir, r.Key)
			oldFile := readFile(t, s.PolicyPath())
			f.reset()
			if step != "" {
				f.fail[step] = errors.New("injected failure")
			}
			allow, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"example.org"})
			_, err := f.system().updatePolicy(r.StateDir, r.Key, allow)
			if step == "" {
				if err != nil {
					t.Fatal(err)
				}
				ops := f.ops()
				if start, apply := slices.Index(ops, "proxy.Start"), slices.Index(ops, "rules.Apply"); start < 0 || apply < start {
					t.Errorf("calls %v: want the proxy started before the redirect", ops)
				}
				if f.rules["/fake/ns/a"].DenyAll {
					t.Error("still deny-all after leaving none")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "injected failure") {
				t.Fatalf("update: %v, want the injected failure", err)
			}
			if !f.rules["/fake/ns/a"].DenyAll {
				t.Errorf("ruleset %+v, want deny-all kept", f.rules["/fake/ns/a"])
			}
			if left := f.leftovers(); left != "host-side layer of c1-eth0, ruleset in /fake/ns/a" {
				t.Errorf("left behind: %q, want only the deny-all ruleset and the host-side layer", left)
			}
			if got := readFile(t, s.PolicyPath()); got != oldFile {
				t.Errorf("policy file %q, want the old one %q back", got, oldFile)
			}
			if after, _ := f.system().load(r.StateDir, r.Key); after.Mode != conf.ModeNone || after.Supervisor != nil {
				t.Errorf("state after the failed update: mode %s, supervisor %v", after.Mode, after.Supervisor)
			}
		})
	}
}

// An operator's Stop ends the proxy and keeps the ruleset; Start starts a
// new proxy, which serves before the ruleset redirects to it.
func TestStopStart(t *testing.T) {
	f, r, first := enforced(t, conf.ModeAllowlist, false)
	f.reset()
	c, err := f.system().stop(r.StateDir, r.Key)
	if err != nil || !c.Changed || !c.State.Stopped {
		t.Fatalf("stop: %+v, %v", c, err)
	}
	if left := f.leftovers(); left != "ruleset in /fake/ns/a" {
		t.Errorf("after stop: %q, want the ruleset only", left)
	}
	if err := f.system().check(r.StateDir, r.Key); err == nil || !strings.Contains(err.Error(), "stopped by an operator") {
		t.Errorf("check after stop: %v", err)
	}
	if c, err := f.system().stop(r.StateDir, r.Key); err != nil || c.Changed {
		t.Errorf("second stop: %+v, %v: want nothing to do", c, err)
	}
	f.reset()
	c, err = f.system().start(r.StateDir, r.Key)
	if err != nil || !c.Changed || c.State.Supervisor.PID == first.Supervisor.PID {
		t.Fatalf("start: %+v, %v: want a new supervisor", c, err)
	}
	ops := f.ops()
	if wait, apply := slices.Index(ops, "proxy.wait"), slices.Index(ops, "rules.Apply"); wait < 0 || apply < wait {
		t.Errorf("calls %v: want the new proxy serving before the redirect", ops)
	}
	if err := f.system().check(r.StateDir, r.Key); err != nil {
		t.Errorf("check after start: %v", err)
	}
	f.reset()
	if c, err := f.system().start(r.StateDir, r.Key); err != nil || c.Changed {
		t.Errorf("second start: %+v, %v: want nothing to do", c, err)
	}
	wantOps(t, f)
}

// A Start that fails at any step leaves the sandbox as it was: stopped,
// with its ruleset and no new proxy.
func TestStartRollsBack(t *testing.T) {
	for _, step := range []string{"proxy.Start", "proxy.wait", "rules.Apply"} {
		t.Run(step, func(t *testing.T) {
			f, r, _ := enforced(t, conf.ModeAllowlist, false)
			if _, err := f.system().stop(r.StateDir, r.Key); err != nil {
				t.Fatal(err)
			}
			before := f.rules["/fake/ns/a"]
			f.fail[step] = errors.New("injected failure")
			if _, err := f.system().start(r.StateDir, r.Key); err == nil || !strings.Contains(err.Error(), "injected failure") {
				t.Fatalf("start: %v, want the injected failure", err)
			}
			if left := f.leftovers(); left != "ruleset in /fake/ns/a" {
				t.Errorf("left behind: %q, want the ruleset only", left)
			}
			if got := f.rules["/fake/ns/a"]; !reflect.DeepEqual(got, before) {
				t.Errorf("ruleset %+v, want %+v as before", got, before)
			}
			if s, _ := f.system().load(r.StateDir, r.Key); !s.Stopped {
				t.Error("not stopped any more after a failed start")
			}
		})
	}
}

// reenforceRequest is r asking for another policy and another allowDirect
// on the same sandbox, as a second ADD or hook run with a changed
// configuration does.
func reenforceRequest(t *testing.T, r Request) Request {
	t.Helper()
	p, err := conf.NewPolicy(r.Policy.Mode, []string{"example.org"})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.Policy = p
	r.Spec.AllowDirect = []conf.Direct{{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Ports: conf.PortRange{Lo: 443, Hi: 443}}}
	return r
}

// A re-enforce whose ruleset or host-side layer fails puts back what the
// earlier steps changed: the policy file, the ruleset, the host-side
// layer; the recorded state is the old one.
func TestReenforceRollsBack(t *testing.T) {
	for _, step := range []string{"rules.Apply", "layer.Apply"} {
		t.Run(step, func(t *testing.T) {
			f, r, first := enforced(t, conf.ModeAllowlist, true)
			oldFile, err := os.ReadFile(first.PolicyPath())
			if err != nil {
				t.Fatal(err)
			}
			oldRules, oldLayer := f.rules[first.NetNS], f.layers[first.Key]
			f.failOnce[step] = errors.New("injected")
			if _, err := f.system().enforce(reenforceRequest(t, r)); err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("enforce: %v, want the injected error", err)
			}
			if got, _ := os.ReadFile(first.PolicyPath()); string(got) != string(oldFile) {
				t.Errorf("policy file after the failure:\n%s\nwant the old one:\n%s", got, oldFile)
			}
			if got := f.rules[first.NetNS]; !reflect.DeepEqual(got, oldRules) {
				t.Errorf("ruleset after the failure %+v, want the old %+v", got, oldRules)
			}
			if got := f.layers[first.Key]; !reflect.DeepEqual(got.AllowDirect, oldLayer.AllowDirect) {
				t.Errorf("host-side layer's allowDirect after the failure %v, want the old %v", got.AllowDirect, oldLayer.AllowDirect)
			}
			s, err := f.system().load(r.StateDir, r.Key)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.AllowDirect) != 0 {
				t.Errorf("recorded allowDirect %v, want the old (none)", s.AllowDirect)
			}
		})
	}
}

// A re-enforce that was adding the host-side layer and failed after it
// removes the layer again.
func TestReenforceRemovesLayerItAdded(t *testing.T) {
	f, r, first := enforced(t, conf.ModeAllowlist, false)
	if _, ok := f.layers[first.Key]; ok {
		t.Fatal("host-side layer present before the test asked for one")
	}
	r2 := reenforceRequest(t, r)
	r2.Spec.HostLayer = true
	// The save after the layer fails: a directory stands where the
	// state file is written.
	stateFile := filepath.Join(first.Dir, stateFile)
	f.before["layer.Apply"] = func() {
		os.Remove(stateFile)
		os.MkdirAll(filepath.Join(stateFile, "x"), 0o755)
	}
	_, err := f.system().enforce(r2)
	os.RemoveAll(stateFile)
	if err == nil {
		t.Fatal("enforce succeeded with its state file unwritable")
	}
	if _, ok := f.layers[first.Key]; ok {
		t.Errorf("host-side layer left behind after the failed re-enforce: %+v", f.layers[first.Key])
	}
}
