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
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/enforce/hostlayer"
)

// directEnforced is a fake kernel with sandbox c1-eth0 enforced in mode
// allowlist in /fake/ns/a with the host-side layer, allowDirect
// 198.51.100.0/24 and ICMP.
func directEnforced(t *testing.T) (*fakeKernel, Request) {
	t.Helper()
	f := newFakeKernel()
	r := fakeRequest(t, "c1-eth0", "/fake/ns/a", conf.ModeAllowlist)
	r.Spec.HostLayer = true
	r.Spec.AllowDirect = []conf.Direct{{Prefix: netip.MustParsePrefix("198.51.100.0/24")}}
	r.Spec.AllowICMP = true
	if _, err := f.system().enforce(r); err != nil {
		t.Fatal(err)
	}
	f.reset()
	return f, r
}

// installed is what f has installed for the sandbox of r: its ruleset
// and its host-side layer.
func installed(f *fakeKernel, r Request) (enforce.Spec, hostlayer.Spec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rules[r.NetNS], f.layers[r.Key]
}

// Narrowing allowDirect applies the ruleset, then the host-side layer,
// with the new destinations and ICMP, and saves them in the state.
func TestUpdateDirectNarrows(t *testing.T) {
	f, r := directEnforced(t)
	u, err := f.system().updateDirect(r.StateDir, r.Key, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	wantOps(t, f, "rules.Apply", "layer.Apply")
	rules, layer := installed(f, r)
	if len(rules.Direct) != 0 || rules.AllowICMP || len(layer.AllowDirect) != 0 || layer.AllowICMP {
		t.Errorf("after narrowing: ruleset direct %v icmp %v, host-side layer direct %v icmp %v; want none",
			rules.Direct, rules.AllowICMP, layer.AllowDirect, layer.AllowICMP)
	}
	if rules.Port4 == 0 || rules.DenyAll {
		t.Errorf("ruleset %+v: the redirect to the proxy must stay", rules)
	}
	if !u.Changed {
		t.Error("Changed false after a change")
	}
	after, err := f.system().load(r.StateDir, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.AllowDirect) != 0 || after.AllowICMP {
		t.Errorf("state: allowDirect %v icmp %v, want none", after.AllowDirect, after.AllowICMP)
	}
	// And widening again puts them back.
	wide := []conf.Direct{{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Ports: conf.PortRange{Lo: 443, Hi: 443}}}
	if _, err := f.system().updateDirect(r.StateDir, r.Key, wide, true); err != nil {
		t.Fatal(err)
	}
	rules, layer = installed(f, r)
	if len(rules.Direct) != 1 || rules.Direct[0].Prefix != wide[0].Prefix || rules.Direct[0].PortLo != 443 || !rules.AllowICMP ||
		len(layer.AllowDirect) != 1 || layer.AllowDirect[0].Prefix != wide[0].Prefix || !layer.AllowICMP {
		t.Errorf("after widening: ruleset %+v, host-side layer %+v", rules, layer)
	}
}

// The values in force already change nothing: no call, Changed false.
func TestUpdateDirectUnchanged(t *testing.T) {
	f, r := directEnforced(t)
	s, _ := f.system().load(r.StateDir, r.Key)
	u, err := f.system().updateDirect(r.StateDir, r.Key, slices.Clone(s.AllowDirect), s.AllowICMP)
	if err != nil {
		t.Fatal(err)
	}
	wantOps(t, f)
	if u.Changed {
		t.Error("Changed true for the values in force")
	}
}

// A failure at any step (the ruleset, the host-side layer, saving the
// state) leaves the old ruleset, the old host-side layer and the old state.
func TestUpdateDirectRollsBack(t *testing.T) {
	for _, step := range []string{"rules.Apply", "layer.Apply", "save"} {
		t.Run("fail "+step, func(t *testing.T) {
			f, r := directEnforced(t)
			oldRules, oldLayer := installed(f, r)
			stateFile := filepath.Join(r.StateDir, r.Key, stateFile)
			oldState := readFile(t, stateFile)
			switch step {
			case "save":
				// The state file cannot be replaced once the
				// host-side layer is in: a directory holds its
				// place (and the old file is put back after).
				f.before["layer.Apply"] = func() {
					delete(f.before, "layer.Apply")
					os.Rename(stateFile, stateFile+".old")
					os.MkdirAll(filepath.Join(stateFile, "x"), 0o700)
				}
			default:
				f.fail[step] = errors.New("injected failure")
			}
			_, err := f.system().updateDirect(r.StateDir, r.Key, nil, false)
			if step == "save" {
				os.RemoveAll(stateFile)
				os.Rename(stateFile+".old", stateFile)
			}
			if err == nil {
				t.Fatal("update succeeded, want the failure")
			}
			if step != "save" && !strings.Contains(err.Error(), "injected failure") {
				t.Errorf("error %v, want the injected failure", err)
			}
			rules, layer := installed(f, r)
			if !reflect.DeepEqual(rules, oldRules) {
				t.Errorf("ruleset %+v, want the old one %+v", rules, oldRules)
			}
			if !reflect.DeepEqual(layer.AllowDirect, oldLayer.AllowDirect) || layer.AllowICMP != oldLayer.AllowICMP {
				t.Errorf("host-side layer %+v, want the old one %+v", layer, oldLayer)
			}
			if got := readFile(t, stateFile); got != oldState {
				t.Errorf("state changed:\n%s\nwant\n%s", got, oldState)
			}
			if step == "rules.Apply" {
				wantOps(t, f, "rules.Apply")
			}
		})
	}
}

// A sandbox whose namespace path names another namespace now is refused
// before anything is applied.
func TestUpdateDirectNetNSGone(t *testing.T) {
	f, r := directEnforced(t)
	f.netns[r.NetNS] = 999
	if _, err := f.system().updateDirect(r.StateDir, r.Key, nil, false); err == nil {
		t.Fatal("update of a sandbox whose namespace is gone succeeded")
	}
	wantOps(t, f)
}
