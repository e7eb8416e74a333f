package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/enforce/hostlayer"
	"github.com/doorman-net/doorman/proxy/supervise"
)

// fakeKernel is a system that changes nothing on the host: it records
// each call in order, keeps what is installed (rulesets, host-side
// layers, processes, cgroups) so that a test can say what a failure left
// behind, and fails the calls a test names. It needs no root.
type fakeKernel struct {
	mu    sync.Mutex
	calls []string
	// fail makes the named call (as recorded, without its argument:
	// "rules.Create", "proxy.wait") return its error.
	fail map[string]error
	// failOnce makes the next named call fail, and only that one (a
	// step that fails while its undo succeeds).
	failOnce map[string]error
	// before runs before the named call that does not fail (outside
	// the lock), as when something else changes the host meanwhile.
	before map[string]func()
	// netns are the namespaces that exist, by path: their inode.
	netns map[string]uint64
	// rules are the installed rulesets, by namespace; layers the
	// host-side layers, by sandbox key.
	rules  map[string]enforce.Spec
	layers map[string]hostlayer.Spec
	// peers are the host-side interfaces FindHostPeers finds.
	peers []string
	// live are the running processes, by pid; cgroups the proxies'
	// cgroups, by path.
	live    map[int]bool
	cgroups map[string]bool
	nextPID int
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{
		fail: map[string]error{}, failOnce: map[string]error{}, before: map[string]func(){}, netns: map[string]uint64{"/fake/ns/a": 101, "/fake/ns/b": 102},
		rules: map[string]enforce.Spec{}, layers: map[string]hostlayer.Spec{}, peers: []string{"veth0"},
		live: map[int]bool{}, cgroups: map[string]bool{}, nextPID: 4100000,
	}
}

// system is f as the lifecycle takes it.
func (f *fakeKernel) system() *system {
	return &system{rules: fakeRules{f}, layer: fakeLayer{f}, netns: fakeNetNS{f}, proxies: fakeProxies{f}, procs: fakeProcs{f}, cgroups: fakeCgroups{f}}
}

// call records op on arg and returns the error the test set for op.
func (f *fakeKernel) call(op, arg string) error {
	f.mu.Lock()
	f.calls = append(f.calls, op+" "+arg)
	err, hook := f.fail[op], f.before[op]
	if once, ok := f.failOnce[op]; ok && err == nil {
		err = once
		delete(f.failOnce, op)
	}
	f.mu.Unlock()
	if err == nil && hook != nil {
		hook()
	}
	return err
}

// ops are the calls made so far, without their arguments.
func (f *fakeKernel) ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		op, _, _ := strings.Cut(c, " ")
		out = append(out, op)
	}
	return out
}

// reset forgets the calls made so far.
func (f *fakeKernel) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// leftovers describes what is installed or running, "" for nothing.
func (f *fakeKernel) leftovers() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for ns := range f.rules {
		out = append(out, "ruleset in "+ns)
	}
	for key := range f.layers {
		out = append(out, "host-side layer of "+key)
	}
	for pid, up := range f.live {
		if up {
			out = append(out, fmt.Sprintf("process %d", pid))
		}
	}
	for path := range f.cgroups {
		out = append(out, "cgroup "+path)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

type fakeRules struct{ f *fakeKernel }

func (r fakeRules) Present(ns string) (bool, error) {
	if err := r.f.call("rules.Present", ns); err != nil {
		return false, err
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	_, ok := r.f.rules[ns]
	return ok, nil
}

func (r fakeRules) Create(ns string, spec enforce.Spec) error {
	if err := r.f.call("rules.Create", ns); err != nil {
		return err
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if _, ok := r.f.rules[ns]; ok {
		return errors.New("table exists")
	}
	r.f.rules[ns] = spec
	return nil
}

func (r fakeRules) Apply(ns string, spec enforce.Spec) error {
	if err := r.f.call("rules.Apply", ns); err != nil {
		return err
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	r.f.rules[ns] = spec
	return nil
}

func (r fakeRules) Check(ns string, spec enforce.Spec) error {
	if err := r.f.call("rules.Check", ns); err != nil {
		return err
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if got, ok := r.f.rules[ns]; !ok || !reflect.DeepEqual(got, spec) {
		return fmt.Errorf("ruleset in %s differs", ns)
	}
	return nil
}

func (r fakeRules) Remove(ns string) error {
	if err := r.f.call("rules.Remove", ns); err != nil {
		return err
	}
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	delete(r.f.rules, ns)
	return nil
}

type fakeLayer struct{ f *fakeKernel }

func (l fakeLayer) FindHostPeers(sandboxNS, runtimeNS string) ([]string, error) {
	if err := l.f.call("layer.FindHostPeers", sandboxNS); err != nil {
		return nil, err
	}
	if len(l.f.peers) == 0 {
		return nil, hostlayer.ErrNoHostPeer
	}
	return l.f.peers, nil
}

func (l fakeLayer) Apply(runtimeNS string, spec hostlayer.Spec) ([]hostlayer.Pin, error) {
	if err := l.f.call("layer.Apply", spec.Key); err != nil {
		return nil, err
	}
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	l.f.layers[spec.Key] = spec
	var pins []hostlayer.Pin
	for _, i := range spec.HostIfaces {
		pins = append(pins, hostlayer.Pin{HostIface: i})
	}
	return pins, nil
}

func (l fakeLayer) Check(runtimeNS string, spec hostlayer.Spec) error {
	if err := l.f.call("layer.Check", spec.Key); err != nil {
		return err
	}
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	if _, ok := l.f.layers[spec.Key]; !ok {
		return fmt.Errorf("no host-side layer of %s", spec.Key)
	}
	return nil
}

func (l fakeLayer) Remove(runtimeNS, key string) error {
	if err := l.f.call("layer.Remove", key); err != nil {
		return err
	}
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	delete(l.f.layers, key)
	return nil
}

type fakeNetNS struct{ f *fakeKernel }

func (n fakeNetNS) Check(path string) error {
	if err := n.f.call("netns.Check", path); err != nil {
		return err
	}
	if _, err := n.identity(path); err != nil {
		return err
	}
	return nil
}

func (n fakeNetNS) Identity(path string) (dev, ino uint64, err error) {
	ino, err = n.identity(path)
	return 1, ino, err
}

func (n fakeNetNS) identity(path string) (uint64, error) {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	ino, ok := n.f.netns[path]
	if !ok {
		return 0, fmt.Errorf("network namespace %s: %w", path, os.ErrNotExist)
	}
	return ino, nil
}

type fakeProxies struct{ f *fakeKernel }

// Start starts a supervisor (an even pid marked live) and records ports
// in s, as the host's does.
func (p fakeProxies) Start(s *State, grp *cgroup.Group, ready readiness) (spawned, error) {
	if err := p.f.call("proxy.Start", s.Key); err != nil {
		if grp != nil {
			s.removeCgroup()
		}
		return nil, err
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.nextPID += 2
	pid := p.f.nextPID
	p.f.live[pid] = true
	s.Port4, s.Port6 = 15001, 15002
	if s.Spec.HostLayer || s.HostLayer {
		s.HostPort4 = 15003
	}
	return &fakeSpawned{f: p.f, pid: pid, grp: grp, status: filepath.Join(s.Dir, supervisorFile)}, nil
}

// fakeSpawned is a started supervisor; its worker is pid+1, which it
// names in its status file before it says ready, as the host's does.
type fakeSpawned struct {
	f      *fakeKernel
	pid    int
	grp    *cgroup.Group
	status string
}

func (p *fakeSpawned) Pid() int { return p.pid }

func (p *fakeSpawned) supervisor() (Proc, error) {
	if err := p.f.call("proxy.supervisor", ""); err != nil {
		p.kill()
		return Proc{}, err
	}
	return Proc{PID: p.pid, Start: 1}, nil
}

func (p *fakeSpawned) wait() (Proc, error) {
	if err := p.f.call("proxy.wait", ""); err != nil {
		p.kill()
		return Proc{}, err
	}
	st, _ := json.Marshal(supervise.Status{
		Supervisor: supervise.Process{PID: p.pid, Start: 1},
		Worker:     &supervise.Process{PID: p.pid + 1, Start: 1},
		State:      supervise.StateServing,
	})
	if err := os.WriteFile(p.status, st, 0o600); err != nil {
		return Proc{}, err
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.live[p.pid+1] = true
	return Proc{PID: p.pid + 1, Start: 1}, nil
}

func (p *fakeSpawned) kill() {
	p.f.call("proxy.kill", "")
	p.f.mu.Lock()
	delete(p.f.live, p.pid)
	delete(p.f.live, p.pid+1)
	p.f.mu.Unlock()
	if p.grp != nil {
		fakeCgroups{p.f}.Remove(p.grp, 0)
	}
}

type fakeProcs struct{ f *fakeKernel }

func (p fakeProcs) Alive(pid int, start uint64) bool {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	return pid > 0 && p.f.live[pid]
}

func (p fakeProcs) Stop(pid int, start uint64, grace time.Duration) error {
	if pid <= 0 {
		return nil
	}
	if err := p.f.call("procs.Stop", fmt.Sprint(pid)); err != nil {
		return err
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	delete(p.f.live, pid)
	if pid%2 == 0 {
		delete(p.f.live, pid+1) // a supervisor stops its worker
	}
	return nil
}

type fakeCgroups struct{ f *fakeKernel }

func (c fakeCgroups) Layout() (cgroupLayout, error) {
	if err := c.f.call("cgroups.Layout", ""); err != nil {
		return nil, err
	}
	return fakeLayout(c), nil
}

func (c fakeCgroups) Remove(g *cgroup.Group, timeout time.Duration) error {
	if err := c.f.call("cgroups.Remove", g.Path); err != nil {
		return err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	delete(c.f.cgroups, g.Path)
	return nil
}

func (c fakeCgroups) WarmMigration() { c.f.call("cgroups.WarmMigration", "") }

type fakeLayout struct{ f *fakeKernel }

func (l fakeLayout) Create(parent, name string, lim cgroup.Limits, opts cgroup.CreateOptions) (*cgroup.Group, []string, error) {
	path := filepath.Join(parent, name)
	if err := l.f.call("cgroups.Create", path); err != nil {
		return nil, nil, err
	}
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	l.f.cgroups[path] = true
	return &cgroup.Group{Path: path}, nil, nil
}

func (fakeLayout) Describe() string { return "fake" }
