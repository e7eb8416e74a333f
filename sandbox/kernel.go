package sandbox

import (
	"fmt"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/enforce/hostlayer"
)

// This file holds the seams where the sandbox lifecycle meets the kernel.
// Enforce, Teardown, Check and the policy updates decide what to change,
// in which order, and what to undo when a step fails; these interfaces do
// the changing. The host's implementations (see host) are packages
// enforce, hostlayer, launch, cgroup and the namespace and pidfd system
// calls, called as they were before the seams; the package's unit tests
// hand fakes that record the calls and fail where told, and need no root.

// ruleset is the sandbox's in-namespace ruleset (package enforce).
type ruleset interface {
	Present(netns string) (bool, error)
	Create(netns string, spec enforce.Spec) error
	Apply(netns string, spec enforce.Spec) error
	Check(netns string, spec enforce.Spec) error
	Remove(netns string) error
}

// hostLayer is the host-side layer in the runtime's namespace (package
// hostlayer).
type hostLayer interface {
	FindHostPeers(sandboxNS, runtimeNS string) ([]string, error)
	Apply(runtimeNS string, spec hostlayer.Spec) ([]hostlayer.Pin, error)
	Check(runtimeNS string, spec hostlayer.Spec) error
	Remove(runtimeNS, key string) error
}

// netnsOpener opens network namespaces by path: Check that one is there,
// Identity to say which one a path names now (its nsfs device and inode).
type netnsOpener interface {
	Check(path string) error
	Identity(path string) (dev, ino uint64, err error)
}

// proxyStarter starts a sandbox's proxy: its sockets in the sandbox's
// namespace (and, for the host-side layer, in this one), its config file,
// and its supervisor in grp (nil for none), recording the ports in s (see
// State.spawnProxy).
type proxyStarter interface {
	Start(s *State, grp *cgroup.Group, ready readiness) (spawned, error)
}

// spawned is a proxy's supervisor that was started, whose first worker
// may not serve yet (see spawnedProxy).
type spawned interface {
	// Pid is the supervisor's pid.
	Pid() int
	// supervisor names the supervisor; one that cannot be named is
	// killed with what it started.
	supervisor() (Proc, error)
	// wait waits until the supervisor says ready and returns its worker;
	// a proxy that fails to get ready is killed.
	wait() (Proc, error)
	// kill ends the proxy, its worker and its cgroup.
	kill()
}

// processes signals and watches recorded processes by pid and start time
// (through pidfds on the host).
type processes interface {
	Alive(pid int, start uint64) bool
	Stop(pid int, start uint64, grace time.Duration) error
}

// cgroups makes and removes the proxies' cgroups (package cgroup).
type cgroups interface {
	// Layout reads the host's cgroup hierarchies.
	Layout() (cgroupLayout, error)
	// Remove removes g, killing what runs there.
	Remove(g *cgroup.Group, timeout time.Duration) error
	// WarmMigration starts the warm-up of a move into a cgroup (see
	// cgroup.WarmMigration).
	WarmMigration()
}

// cgroupLayout makes cgroups in the host's hierarchies (cgroup.Layout).
type cgroupLayout interface {
	Create(parent, name string, lim cgroup.Limits, opts cgroup.CreateOptions) (*cgroup.Group, []string, error)
	Describe() string
}

// system is what the lifecycle changes outside the state directory. A
// State carries the system it was loaded or made with (nil: host).
type system struct {
	rules   ruleset
	layer   hostLayer
	netns   netnsOpener
	proxies proxyStarter
	procs   processes
	cgroups cgroups
}

// host is the real system: this host's kernel. It is never changed.
var host = &system{
	rules:   hostRules{},
	layer:   hostLayerRules{},
	netns:   hostNetNS{},
	proxies: hostProxies{},
	procs:   hostProcesses{},
	cgroups: hostCgroups{},
}

// sys is the system s was loaded or made with.
func (s *State) sys() *system {
	if s.system == nil {
		return host
	}
	return s.system
}

// hostRules is package enforce.
type hostRules struct{}

func (hostRules) Present(netns string) (bool, error)           { return enforce.Present(netns) }
func (hostRules) Create(netns string, spec enforce.Spec) error { return enforce.Create(netns, spec) }
func (hostRules) Apply(netns string, spec enforce.Spec) error  { return enforce.Apply(netns, spec) }
func (hostRules) Check(netns string, spec enforce.Spec) error  { return enforce.Check(netns, spec) }
func (hostRules) Remove(netns string) error                    { return enforce.Remove(netns) }

// hostLayerRules is package hostlayer.
type hostLayerRules struct{}

func (hostLayerRules) FindHostPeers(sandboxNS, runtimeNS string) ([]string, error) {
	return hostlayer.FindHostPeers(sandboxNS, runtimeNS)
}
func (hostLayerRules) Apply(runtimeNS string, spec hostlayer.Spec) ([]hostlayer.Pin, error) {
	return hostlayer.Apply(runtimeNS, spec)
}
func (hostLayerRules) Check(runtimeNS string, spec hostlayer.Spec) error {
	return hostlayer.Check(runtimeNS, spec)
}
func (hostLayerRules) Remove(runtimeNS, key string) error { return hostlayer.Remove(runtimeNS, key) }

// hostNetNS opens the host's namespace files.
type hostNetNS struct{}

// Check fails unless path is a network namespace other than the
// runtime's (ErrRuntimeNetNS).
func (h hostNetNS) Check(path string) error {
	n, err := ns.GetNS(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	n.Close()
	dev, ino, err := h.Identity(path)
	if err != nil {
		return err
	}
	ownDev, ownIno, err := h.Identity(runtimeNetNS)
	if err != nil {
		return err
	}
	if dev == ownDev && ino == ownIno {
		return fmt.Errorf("network namespace %s: %w", path, ErrRuntimeNetNS)
	}
	return nil
}

// Identity returns the device and inode of the namespace file at path.
func (hostNetNS) Identity(path string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, fmt.Errorf("network namespace %s: %w", path, err)
	}
	return st.Dev, st.Ino, nil
}

// hostProxies starts proxies as processes of this host.
type hostProxies struct{}

func (hostProxies) Start(s *State, grp *cgroup.Group, ready readiness) (spawned, error) {
	p, err := s.spawnProxy(grp, ready)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// hostProcesses are this host's processes, through pidfds.
type hostProcesses struct{}

func (hostProcesses) Alive(pid int, start uint64) bool { return proxyAlive(pid, start) }
func (hostProcesses) Stop(pid int, start uint64, grace time.Duration) error {
	return stopProcess(pid, start, grace)
}

// hostCgroups are this host's cgroup hierarchies.
type hostCgroups struct{}

func (hostCgroups) Layout() (cgroupLayout, error) {
	l, err := cgroup.ReadLayout()
	if err != nil {
		return nil, err
	}
	return l, nil
}
func (hostCgroups) Remove(g *cgroup.Group, timeout time.Duration) error { return g.Remove(timeout) }
func (hostCgroups) WarmMigration()                                      { cgroup.WarmMigration() }
