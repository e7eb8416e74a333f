package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/enforce/hostlayer"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/proxy/launch"
	"github.com/doorman-net/doorman/proxy/supervise"
	"github.com/doorman-net/doorman/spec"
)

// Request says what to enforce on one sandbox: who it is, what it
// enforces, and where its state and proxy binary are.
type Request struct {
	Attachment
	spec.Spec
	StateDir string // default hostconf.DefaultStateDir
	// ProxyBinary is the doorman binary to run as `doorman proxy`
	// (default: this executable).
	ProxyBinary string
}

func (r *Request) defaults() error {
	if r.StateDir == "" {
		r.StateDir = hostconf.DefaultStateDir
	}
	if r.LogDir == "" {
		r.LogDir = hostconf.DefaultLogDir
	}
	if r.ProxyBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the doorman binary: %w", err)
		}
		r.ProxyBinary = exe
	}
	if r.ID == "" {
		r.ID = r.Key
	}
	return validate(&r.Spec, r.Attachment)
}

// Enforce puts sandbox r under its policy: listeners in its netns, a proxy
// serving them, the ruleset, and the state record. Enforcing a sandbox that
// is already enforced with a live proxy updates its policy and re-applies
// the ruleset (idempotent). On any error nothing is left behind.
func Enforce(r Request) (*State, error) { return host.enforce(r) }

// enforce is Enforce on sys.
func (sys *system) enforce(r Request) (*State, error) {
	if err := r.defaults(); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	if err := sys.netns.Check(r.NetNS); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	if old, err := sys.load(r.StateDir, r.Key); err == nil && old.NetNS == r.NetNS && old.NetNSCurrent() &&
		(old.Mode == conf.ModeNone || old.ProxyAlive()) {
		return sys.reenforce(old, r)
	} else if err == nil {
		// Stale state (proxy dead, or another netns): start afresh.
		if err := sys.teardown(r.StateDir, r.Key); err != nil {
			return nil, err
		}
	}
	s, err := sys.enforceNew(r)
	if err != nil {
		return nil, fmt.Errorf("enforce sandbox %s in %s: %w", r.Key, r.NetNS, err)
	}
	return s, nil
}

func (sys *system) enforceNew(r Request) (_ *State, err error) {
	phasetrace.Mark("enforce.begin")
	present, err := sys.checkFree(r)
	if err != nil {
		return nil, err
	}
	s, err := sys.newState(r)
	if err != nil {
		return nil, err
	}
	var spawned spawned
	var grp *cgroup.Group
	rulesInstalled := false
	// Undo everything on failure, in reverse order. The container does
	// not start when enforcing fails, so no workload sees the gap.
	defer func() {
		if err != nil {
			if spawned != nil {
				spawned.kill()
			}
			s.stopProxy()
			if rulesInstalled {
				sys.rules.Remove(r.NetNS)
			}
			if s.HostLayer {
				sys.layer.Remove(runtimeNetNS, s.Key)
			}
			os.RemoveAll(s.Dir)
		}
	}()
	if r.Policy.Mode != conf.ModeNone {
		// The proxy's cgroup first, then a warm-up of the move into it
		// (see cgroup.WarmMigration), as early as can be: its wait
		// (an RCU grace period, 5-10 ms) then runs while the policy,
		// the listeners and the supervisor's own start go on, and is
		// over when the supervisor moves. Not the other way round: the
		// move holds the kernel's cgroup mutex all through its wait,
		// and making a cgroup takes that mutex. Only here: a front
		// door that starts no proxy (a re-ADD) must not wait for it.
		grp = s.makeCgroup()
		phasetrace.Mark("enforce.cgroup")
		sys.cgroups.WarmMigration()
	}
	if err := prepareInspect(r.CADir, r.Policy); err != nil {
		return nil, err
	}
	if err := writePolicy(s.PolicyPath(), r.Policy); err != nil {
		return nil, err
	}
	phasetrace.Mark("enforce.policy")
	if r.Policy.Mode != conf.ModeNone {
		ready := workerStarted
		if len(r.AllowDirect) > 0 {
			// allowDirect flows never reach the listeners: only a
			// serving worker logs them (its conntrack watch), so the
			// container must not start before it does.
			ready = workerServing
		}
		if spawned, err = sys.proxies.Start(s, grp, ready); err != nil {
			return nil, err
		}
	}
	if rulesInstalled, err = s.install(r, present); err != nil {
		return nil, err
	}
	if spawned != nil {
		// Recorded and saved while the supervisor gets its first worker
		// going: the state names the supervisor, and every Load takes
		// the worker from its status (see loadSupervision). A proxy
		// that then fails to get ready undoes it all, the state too.
		if err := s.supervisedBy(spawned); err != nil {
			return nil, err
		}
	}
	s.relabel()
	if err := s.save(); err != nil {
		return nil, err
	}
	phasetrace.Mark("enforce.saved")
	if spawned != nil {
		if err := s.started(spawned); err != nil {
			return nil, err
		}
		phasetrace.Mark("enforce.ready")
		spawned = nil
	}
	return s, nil
}

// checkFree refuses a namespace another sandbox holds, and reports
// whether doorman's table is there. One network namespace has one doorman
// sandbox. Another one already enforced there (the same container's
// attachment to a second network whose chain has doorman, or an OCI
// hook's) would have its ruleset replaced by this one's, and removed at
// this one's DEL or failure: refuse, before anything is changed. A table
// nobody live holds is a leftover, which this sandbox replaces.
func (sys *system) checkFree(r Request) (present bool, err error) {
	if present, err = sys.rules.Present(r.NetNS); err != nil || !present {
		return present, err
	}
	if h, _ := sys.holder(r.StateDir, r.Key, r.NetNS); h != nil {
		return true, fmt.Errorf("network namespace %s is already enforced by doorman sandbox %s (%s): one network namespace has one doorman policy, so chain doorman in one of the container's networks only",
			r.NetNS, h.Key, h.describe())
	}
	return true, nil
}

// newState makes the state directory and the log directory of a new
// sandbox, and its State as r describes it.
func (sys *system) newState(r Request) (*State, error) {
	dir := filepath.Join(r.StateDir, r.Key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.LogDir, 0o750); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("log dir: %w", err)
	}
	s := &State{
		Key: r.Key, ID: r.ID, Name: r.Name, PodUID: r.PodUID, CgroupParent: r.CgroupParent, Runtime: r.Runtime, RuntimeKind: r.RuntimeKind, Network: r.Network, IfName: r.IfName,
		NetNS: r.NetNS, Mode: r.Policy.Mode, BaseLabel: r.Label, LogFile: filepath.Join(r.LogDir, r.Key+".log"), Created: time.Now().UTC(), Dir: dir,
		Spec:        r.Spec.Clone(),
		ProxyBinary: r.ProxyBinary, ProxyResolvers: ProxyResolversFor(r.UpstreamResolvers, r.Resolvers),
		system: sys,
	}
	s.ProxyLimits = spec.ProxyLimitsWithDefaults(r.ProxyLimits)
	var err error
	if s.NetNSDev, s.NetNSIno, err = sys.netns.Identity(r.NetNS); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// install puts in the ruleset of s and, where r asks for it, the
// host-side layer, while the proxy starts (redirected connections wait in
// the listeners' backlog until it accepts), and at the same time as each
// other: neither depends on the other or on the proxy. The host-side layer
// is applied on the calling goroutine, since runtimeNetNS names the
// calling thread's namespace. Both are waited for, whatever fails, so that
// an undo never races an Apply still in progress. rulesInstalled says the
// ruleset went in.
func (s *State) install(r Request, present bool) (rulesInstalled bool, err error) {
	spec := s.spec()
	rules := s.sys().rules
	install := rules.Create // never over a table that appeared meanwhile
	if present {
		install = rules.Apply // the leftover goes
	}
	applied := make(chan error, 1)
	go func() {
		err := install(r.NetNS, spec)
		phasetrace.Mark("enforce.ruleset")
		applied <- err
	}()
	var hostErr error
	if r.HostLayer {
		hostErr = s.applyHostLayer(r.HostIfaces, r.ipam())
		phasetrace.Mark("enforce.hostlayer")
	}
	if err := <-applied; err != nil {
		return false, err
	}
	return true, hostErr
}

// runtimeNetNS is the namespace the host-side layer lives in: the one the
// plugin or hook runs in, where the proxy runs too.
const runtimeNetNS = "/proc/thread-self/ns/net"

// ErrRuntimeNetNS is Enforce's error for a namespace that is the
// runtime's own (the host's), refused before anything is applied:
// doorman's ruleset there would send every TCP connection of the host,
// the other sandboxes' proxies' upstream dials among them, to this
// sandbox's proxy.
var ErrRuntimeNetNS = errors.New("it is the runtime's own network namespace: doorman enforces a container's namespace, never the one its proxies dial from")

// ipam is the host-side layer's Spec.IPAM for r.
func (r *Request) ipam() map[string][]netip.Addr {
	if r.IfName == "" || len(r.Addrs) == 0 {
		return nil
	}
	return map[string][]netip.Addr{r.IfName: r.Addrs}
}

// applyHostLayer installs the host-side layer for s, pinning the
// identities recorded in s and, on interfaces without one, those it reads
// there (with ipam's addresses, see Request.Addrs), and records them. No
// host interface to hold (no veth) is not an error: the sandbox keeps its
// label.
func (s *State) applyHostLayer(ifaces []string, ipam map[string][]netip.Addr) error {
	if !s.NetNSCurrent() {
		return s.errNetNSGone()
	}
	if len(ifaces) == 0 {
		// Look the veth peers up here rather than in Apply, so that the
		// state records which interfaces hold the layer.
		var err error
		ifaces, err = s.sys().layer.FindHostPeers(s.NetNS, runtimeNetNS)
		if errors.Is(err, hostlayer.ErrNoHostPeer) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	if err := s.applyHostSpec(ifaces, ipam); err != nil {
		return err
	}
	s.HostLayer, s.HostIfaces = true, ifaces
	s.relabel()
	return nil
}

// applyHostSpec applies the host-side layer of s on ifaces and records
// the pins it installed.
func (s *State) applyHostSpec(ifaces []string, ipam map[string][]netip.Addr) error {
	spec, err := s.hostSpec(ifaces)
	if err != nil {
		return err
	}
	spec.IPAM = ipam
	pins, err := s.sys().layer.Apply(runtimeNetNS, spec)
	if err != nil {
		return err
	}
	s.Pins = recordPins(pins)
	return nil
}

// reapplyHostLayer applies the host-side layer of s again, where it holds
// one, after its proxy's ports changed (a new proxy, mode none).
func (s *State) reapplyHostLayer() error {
	if !s.HostLayer {
		return nil
	}
	if err := s.applyHostSpec(s.HostIfaces, nil); err != nil {
		return fmt.Errorf("host-side layer: %w", err)
	}
	return nil
}

// hostSpec is the host-side layer's spec for the sandbox on ifaces. With
// the DNS filter on, the sandbox's own DNS never leaves by its veth (the
// filter forwards from the proxy's namespace), so the resolvers get no
// exemption: one would let a workload that flushed its ruleset query them
// unfiltered.
func (s *State) hostSpec(ifaces []string) (hostlayer.Spec, error) {
	spec := hostlayer.Spec{Key: s.Key, SandboxNetNS: s.NetNS, HostIfaces: ifaces, AllowICMP: s.AllowICMP}
	if !s.DNSFilter {
		spec.Resolvers = s.Resolvers
	}
	// What the sandbox sends past its own ruleset (a runtime with a
	// network stack of its own) goes to the proxy's host-side listeners:
	// its TCP, and its DNS to the resolvers where the filter is on.
	spec.Redirect = hostlayer.Redirect{TCP4: s.HostPort4, TCP6: s.HostPort6, DNS4: s.HostDNSPort4, DNS6: s.HostDNSPort6}
	if s.DNSFilter && (s.HostDNSPort4 != 0 || s.HostDNSPort6 != 0) {
		spec.Redirect.DNSResolvers = s.Resolvers
	}
	for _, d := range s.AllowDirect {
		spec.AllowDirect = append(spec.AllowDirect, d.Entry())
	}
	var err error
	if spec.Pins, err = s.layerPins(); err != nil {
		return spec, err
	}
	return spec, nil
}

// spawnProxy creates the proxy's sockets inside the sandbox's netns,
// writes its config file and starts its proxy (s.ProxyBinary) on them in
// grp (s.Cgroup's group, made by makeCgroup; nil for none), recording the
// ports in s. The caller waits for it as ready says (see started). On
// error it removes s.Cgroup.
func (s *State) spawnProxy(grp *cgroup.Group, ready readiness) (_ *spawnedProxy, err error) {
	defer func() {
		if err != nil {
			s.removeCgroup()
		}
	}()
	if s.legacyErr != nil {
		return nil, s.legacyErr
	}
	filter := s.DNSFilter
	socks, err := listenIn(s.NetNS, filter && hasFamily(s.Resolvers, true), filter && hasFamily(s.Resolvers, false))
	if err != nil {
		return nil, err
	}
	phasetrace.Mark("enforce.listeners")
	defer socks.close()
	cfg := launch.Config{
		Sandbox: s.ID, PodUID: s.PodUID, PolicyFile: s.PolicyPath(), LogFile: s.LogFile, Resolvers: s.ProxyResolvers,
		DrainTimeout: spec.Duration(proxyDrainTimeout),
		Proxy:        s.Proxy,
	}
	if filter {
		cfg.DNSUpstreams = dnsUpstreams(s.Resolvers)
	}
	if s.ProxyBinary == "" {
		if s.ProxyBinary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the doorman binary: %w", err)
		}
	}
	var host *sockets
	if s.Spec.HostLayer || s.HostLayer {
		// The proxy runs in this namespace, the layer's: it logs what
		// the layer drops for the sandbox from its counters.
		cfg.HostLayerKey = s.Key
		cfg.HostDropsState = filepath.Join(s.Dir, hostDropsFile)
		if host, err = listenHost(filter && hasFamily(s.Resolvers, true), filter && hasFamily(s.Resolvers, false)); err != nil {
			return nil, err
		}
		defer host.close()
	}
	tcp, dnsUDP, dnsTCP, err := socks.files()
	if err != nil {
		return nil, err
	}
	if host != nil {
		htcp, hUDP, hTCP, err := host.files()
		if err != nil {
			closeFiles(slices.Concat(tcp, dnsUDP, dnsTCP))
			return nil, err
		}
		// The sandbox's own listeners first: the proxy finds the
		// sandbox's namespace through its first listener.
		tcp, dnsUDP, dnsTCP = append(tcp, htcp...), append(dnsUDP, hUDP...), append(dnsTCP, hTCP...)
	}
	// The listeners, in the order the config names them (see package
	// launch): inherited as descriptors 3 and up.
	var files []*os.File
	pass := func(fds *[]int, fs []*os.File) {
		for _, f := range fs {
			*fds = append(*fds, 3+len(files))
			files = append(files, f)
		}
	}
	pass(&cfg.Listeners.TCP, tcp)
	pass(&cfg.Listeners.DNSUDP, dnsUDP)
	pass(&cfg.Listeners.DNSTCP, dnsTCP)
	defer closeFiles(files)
	s.Port4, s.Port6 = socks.tcp4.port, socks.tcp6.port
	s.DNSPort4, s.DNSPort6 = 0, 0
	if len(cfg.DNSUpstreams) > 0 {
		s.DNSPort4, s.DNSPort6 = socks.dns4.port, socks.dns6.port
	}
	s.HostPort4, s.HostPort6, s.HostDNSPort4, s.HostDNSPort6 = 0, 0, 0, 0
	if host != nil {
		s.HostPort4, s.HostPort6 = host.tcp4.port, host.tcp6.port
		if len(cfg.DNSUpstreams) > 0 {
			s.HostDNSPort4, s.HostDNSPort6 = host.dns4.port, host.dns6.port
		}
	}
	path := filepath.Join(s.Dir, proxyConfigFile)
	if err := cfg.WriteFile(path); err != nil {
		return nil, err
	}
	phasetrace.Mark("enforce.proxy-config")
	status := filepath.Join(s.Dir, supervisorFile)
	p, err := launch.Start(launch.Request{Binary: s.ProxyBinary, Sandbox: s.ID, ConfigFile: path, StatusFile: status,
		LogFile: s.LogFile, Cgroup: grp, Listeners: files, ReadyOnStart: ready == workerStarted})
	phasetrace.Mark("enforce.spawned")
	if err != nil {
		return nil, err
	}
	return &spawnedProxy{Process: p, status: status, cgroup: grp}, nil
}

// supervisedBy records p's supervisor as the sandbox's proxy, which is
// not ready yet: no worker is named until started.
func (s *State) supervisedBy(p spawned) error {
	sup, err := p.supervisor()
	if err != nil {
		return err
	}
	s.Supervisor, s.PID, s.PIDStart, s.Stopped = &sup, 0, 0, false
	return nil
}

// started records the proxy p, once its supervisor says ready (see
// readiness): the supervisor (unless supervisedBy did), its first
// worker, and what its status says.
func (s *State) started(p spawned) error {
	if s.Supervisor == nil || s.Supervisor.PID != p.Pid() {
		if err := s.supervisedBy(p); err != nil {
			return err
		}
	}
	worker, err := p.wait()
	if err != nil {
		return err
	}
	s.PID, s.PIDStart = worker.PID, worker.Start
	s.loadSupervision()
	return nil
}

// dnsUpstreams are the resolvers the DNS filter forwards to from the
// proxy's namespace: the sandbox's, except loopback ones (Docker's
// embedded 127.0.0.11 lives in the sandbox itself and is not redirected;
// the servers behind it are among the resolvers, see hook).
func dnsUpstreams(resolvers []netip.Addr) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range resolvers {
		if !a.IsLoopback() && a.IsValid() {
			out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
		}
	}
	return out
}

// ProxyResolversFor returns the DNS servers a sandbox's proxy resolves
// allowed names with: override (an operator's upstreamResolver) if given,
// else the servers its DNS filter forwards to (see dnsUpstreams), whether
// or not the filter is on. One DNS view: a name that only the container's
// resolvers know (Docker's --dns, cluster DNS, a split horizon) is one the
// proxy finds too. None means the host's /etc/resolv.conf, the last resort
// of a sandbox with no resolver the proxy can reach.
func ProxyResolversFor(override []netip.AddrPort, resolvers []netip.Addr) []netip.AddrPort {
	if len(override) > 0 {
		return slices.Clone(override)
	}
	return dnsUpstreams(resolvers)
}

func hasFamily(addrs []netip.Addr, v4 bool) bool {
	for _, a := range addrs {
		if !a.IsLoopback() && a.Unmap().Is4() == v4 {
			return true
		}
	}
	return false
}

// reenforce updates a live sandbox: new policy file (the proxy picks it
// up), ruleset re-applied with the same listeners. A change into or out of
// mode none goes through EditPolicy's path, which never leaves the
// namespace without rules. When a step fails, what the earlier steps
// changed is put back (the policy file, the ruleset, the host-side layer,
// the mode) and the recorded state stays as it was: nothing is half
// applied.
func (sys *system) reenforce(s *State, r Request) (_ *State, err error) {
	caDir := s.CADir
	if r.CADir != "" {
		caDir = r.CADir
	}
	if err := prepareInspect(caDir, r.Policy); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	old := *s
	old.AllowDirect, old.Resolvers, old.HostIfaces, old.Pins = slices.Clone(s.AllowDirect), slices.Clone(s.Resolvers), slices.Clone(s.HostIfaces), slices.Clone(s.Pins)
	oldData, readErr := os.ReadFile(s.PolicyPath())
	var done reenforced
	defer func() {
		if err == nil {
			return
		}
		if undo := sys.undoReenforce(&old, r, oldData, readErr, done); undo != nil {
			err = fmt.Errorf("%w; putting the sandbox back as it was failed too: %w", err, undo)
		}
	}()
	if r.CADir != "" {
		s.CADir, s.UpstreamCAFile = r.CADir, r.UpstreamCAFile
	}
	if (s.Mode == conf.ModeNone) != (r.Policy.Mode == conf.ModeNone) {
		// The update writes the policy file.
		u, err := sys.updatePolicy(r.StateDir, r.Key, r.Policy)
		if err != nil {
			return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
		}
		done.modeMoved = true
		s = u.State
		if r.CADir != "" {
			s.CADir, s.UpstreamCAFile = r.CADir, r.UpstreamCAFile
		}
	} else {
		done.policyWritten = true
		if err := writePolicy(s.PolicyPath(), r.Policy); err != nil {
			return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
		}
	}
	s.Mode, s.AllowICMP, s.BaseLabel = r.Policy.Mode, r.AllowICMP, r.Label
	if r.RuntimeKind != "" {
		s.RuntimeKind = r.RuntimeKind
	}
	if s.NetNSIno == 0 {
		// Recorded by an older doorman: the caller's path names the
		// sandbox's namespace now, so record which one it is.
		if dev, ino, err := sys.netns.Identity(s.NetNS); err == nil {
			s.NetNSDev, s.NetNSIno = dev, ino
		}
	}
	if !s.DNSFilter {
		// Without the filter the resolvers are only rules: take the new
		// ones. With it they are the running filter's upstreams, fixed
		// when the proxy started, and the recorded ones stay.
		s.Resolvers = r.Resolvers
	}
	// The proxy logs the flows of both lists while the rules change.
	// (A proxy that does not confirm in time costs lines, not rules.)
	if err := s.logDirect(directUnion(old.AllowDirect, r.AllowDirect)); err != nil && !errors.Is(err, errDirectUnconfirmed) {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	s.AllowDirect = slices.Clone(r.AllowDirect)
	done.rulesTried = true
	if err := sys.rules.Apply(s.NetNS, s.spec()); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	if s.HostLayer {
		done.layerTried = true
		if err := s.applyHostSpec(s.HostIfaces, r.ipam()); err != nil {
			return nil, fmt.Errorf("enforce sandbox %s: host-side layer: %w", r.Key, err)
		}
	} else if r.HostLayer {
		done.layerTried = true
		s.Spec.HostLayer = true
		if err := s.applyHostLayer(r.HostIfaces, r.ipam()); err != nil {
			return nil, fmt.Errorf("enforce sandbox %s: host-side layer: %w", r.Key, err)
		}
	}
	s.relabel()
	if err := s.save(); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	// Failing here leaves the proxy logging the union: more lines, none
	// lost.
	s.logDirect(s.AllowDirect)
	return s, nil
}

// reenforced says which steps of a reenforce ran (or were tried): the
// mode moved through a policy update, the policy file written, the
// ruleset and the host-side layer applied.
type reenforced struct {
	modeMoved, policyWritten, rulesTried, layerTried bool
}

// undoReenforce puts a sandbox whose reenforce failed back to old, its
// state before: the mode (through the policy update that moved it), or
// the policy file's bytes (when the file was readable before); the
// ruleset; the host-side layer (removed if reenforce was adding it). The
// steps that ran are in done.
func (sys *system) undoReenforce(old *State, r Request, oldData []byte, readErr error, done reenforced) error {
	var undo []error
	switch {
	case done.modeMoved:
		// The update saved the new mode; a second one moves it back.
		p, err := conf.ParseFile(oldData)
		if readErr != nil || err != nil {
			undo = append(undo, fmt.Errorf("the old policy file did not load, so mode %s stays", r.Policy.Mode))
		} else if _, err := sys.updatePolicy(r.StateDir, r.Key, p); err != nil {
			undo = append(undo, fmt.Errorf("move back to mode %s: %w", old.Mode, err))
		}
		// That update re-applied the ruleset, and the host-side layer
		// where the old state held one.
		done.rulesTried = false
		done.layerTried = done.layerTried && !old.HostLayer
	case done.policyWritten && readErr == nil:
		if err := writeAtomic(old.PolicyPath(), oldData, 0o644); err != nil {
			undo = append(undo, fmt.Errorf("put the old policy file back: %w", err))
		}
	}
	if done.rulesTried {
		if err := sys.rules.Apply(old.NetNS, old.spec()); err != nil {
			undo = append(undo, fmt.Errorf("put the old ruleset back: %w", err))
		}
	}
	if err := old.logDirect(old.AllowDirect); err != nil {
		undo = append(undo, err)
	}
	if done.layerTried {
		if old.HostLayer {
			if err := old.reapplyHostLayer(); err != nil {
				undo = append(undo, fmt.Errorf("put the old host-side layer back: %w", err))
			}
		} else if err := sys.layer.Remove(runtimeNetNS, old.Key); err != nil {
			undo = append(undo, fmt.Errorf("remove the host-side layer it was adding: %w", err))
		}
	}
	return errors.Join(undo...)
}

// spec is the ruleset the state says is installed.
func (s *State) spec() enforce.Spec {
	spec := enforce.Spec{
		Port4: s.Port4, Port6: s.Port6, Resolvers: s.Resolvers, AllowICMP: s.AllowICMP,
		DenyAll: s.Mode == conf.ModeNone, DNSPort4: s.DNSPort4, DNSPort6: s.DNSPort6,
	}
	for _, d := range s.AllowDirect {
		spec.Direct = append(spec.Direct, enforce.Direct{Prefix: d.Prefix, PortLo: d.Ports.Lo, PortHi: d.Ports.Hi})
	}
	return spec
}

// Teardown stops the sandbox's proxy, removes its ruleset, its host-side
// layer and its state. A sandbox that is not there, or whose netns is
// gone, is no error; one that is not there may still have the host-side
// layer a Retire left, which goes.
func Teardown(stateDir, key string) error { return host.teardown(stateDir, key) }

// teardown is Teardown on sys.
func (sys *system) teardown(stateDir, key string) error {
	_, err := sys.takeDown(stateDir, key, false)
	return err
}

// Retire is Teardown for a sandbox that a runtime's garbage collection
// (CNI GC) says is stale: GC, unlike DEL, leaves the container's
// interface in place (the bridge plugin's GC only frees addresses), and
// a runtime that does not know a running container (a second runtime
// sharing the network's name) lists it as stale. So where the sandbox's
// namespace still exists, its ruleset is not removed but replaced by the
// one of mode none, which denies everything, and stays there (it goes
// with the namespace, or when a sandbox is enforced there again), and so
// does its host-side layer, which holds against a workload that flushes
// that ruleset or sends past it (its redirects now end at closed ports):
// a later Teardown of the key (the DEL of the runtime that knows the
// container) removes it. Everything else goes as with Teardown. It
// reports whether it left them.
func Retire(stateDir, key string) (deniedAll bool, err error) {
	return host.retire(stateDir, key)
}

// retire is Retire on sys.
func (sys *system) retire(stateDir, key string) (bool, error) {
	return sys.takeDown(stateDir, key, true)
}

// takeDown is Teardown, or with denyAll Retire, whose result it returns.
func (sys *system) takeDown(stateDir, key string, denyAll bool) (deniedAll bool, _ error) {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	s, err := sys.load(stateDir, key)
	if errors.Is(err, os.ErrNotExist) {
		// The host-side layer a Retire left goes with the sandbox's
		// last DEL (see Retire); there is none, mostly.
		if err := sys.layer.Remove(runtimeNetNS, key); err != nil {
			return false, fmt.Errorf("tear down sandbox %s: %w", key, err)
		}
		return false, nil
	}
	if err != nil {
		if ValidKey(key) != nil {
			return false, nil // no sandbox can have that key
		}
		dir := filepath.Join(stateDir, key)
		err = sys.takeDownUnread(dir, key)
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, rmErr)
		}
		if err != nil {
			return false, fmt.Errorf("tear down sandbox %s, whose state does not load: %w", key, err)
		}
		return false, nil
	}
	if s.Unenforced != "" {
		// Nothing was enforced: no proxy, rules or host-side layer.
		if err := os.RemoveAll(s.Dir); err != nil {
			return false, fmt.Errorf("tear down sandbox %s: %w", key, err)
		}
		return false, nil
	}
	// The proxy, the sandbox's ruleset and its host-side rules do not
	// depend on each other, so they go at the same time: each removal of
	// rules ends waiting for the kernel to free them after an RCU grace
	// period (about 10 ms), and the proxy takes milliseconds to exit;
	// one after another, these waits would add up. The host-side layer
	// is removed on the calling goroutine, since runtimeNetNS names the
	// calling thread's namespace. The state goes last, whatever failed
	// (the error says what).
	//
	// The ruleset is removed only from the namespace the sandbox was
	// enforced in: a /proc/PID/ns/net path whose process has exited may
	// name another container's namespace by now, whose rules are not this
	// sandbox's to remove. (The proxy, running until this point, keeps the
	// sandbox's namespace from being freed, so no other one has taken its
	// inode.) A namespace that is gone took its rules with it.
	current := s.NetNSCurrent()
	var proxyErr, rulesErr, hostErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		proxyErr = s.stopProxy()
	}()
	go func() {
		defer wg.Done()
		switch {
		case current && denyAll:
			spec := s.spec()
			spec.DenyAll = true
			rulesErr = sys.rules.Apply(s.NetNS, spec)
		case current:
			rulesErr = sys.rules.Remove(s.NetNS)
		}
	}()
	if s.HostLayer && !(current && denyAll) {
		hostErr = sys.layer.Remove(runtimeNetNS, s.Key)
	}
	wg.Wait()
	errs := []error{proxyErr, hostErr, rulesErr}
	if s.CADir != "" {
		// The trust bundle a front door registered for this sandbox.
		errs = append(errs, ca.RemoveBundle(s.CADir, s.Key))
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		errs = append(errs, err)
	}
	deniedAll = current && denyAll && rulesErr == nil
	if err := errors.Join(errs...); err != nil {
		return deniedAll, fmt.Errorf("tear down sandbox %s: %w", key, err)
	}
	return deniedAll, nil
}

// takeDownUnread takes down what can be found of sandbox key, whose state
// in dir does not load (a file edited by hand, or written by a release
// whose fields this one cannot read): its proxy, which the supervisor's
// status file names, and its host-side layer, which is the key's. The
// ruleset's namespace and the proxy's cgroup were named by the state
// alone: the plugin's DEL removes a table nobody holds from the namespace
// it names (see RemoveOrphanRules); the cgroup, empty once the proxy is
// stopped, stays (a later proxy of the key would take it again).
func (sys *system) takeDownUnread(dir, key string) error {
	var errs []error
	if st, err := supervise.ReadStatus(filepath.Join(dir, supervisorFile)); err == nil {
		errs = append(errs, sys.procs.Stop(st.Supervisor.PID, st.Supervisor.Start, supervisorGrace))
		if st.Worker != nil {
			errs = append(errs, sys.procs.Stop(st.Worker.PID, st.Worker.Start, time.Second))
		}
	}
	errs = append(errs, sys.layer.Remove(runtimeNetNS, key))
	return errors.Join(errs...)
}

// RemoveOrphanRules removes doorman's ruleset from the network namespace at
// nsPath, where a failed or interrupted enforcement of sandbox key may have
// left it, unless another live sandbox is enforced there: then the ruleset
// is that one's. A namespace that is gone is no error.
func RemoveOrphanRules(stateDir, key, nsPath string) error {
	return host.removeOrphanRules(stateDir, key, nsPath)
}

// removeOrphanRules is RemoveOrphanRules on sys.
func (sys *system) removeOrphanRules(stateDir, key, nsPath string) error {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	// After an ordinary Teardown the table is gone: say so with one
	// look-up, before reading every sandbox's state to find a holder.
	if ok, err := sys.rules.Present(nsPath); err == nil && !ok {
		return nil
	}
	if h, _ := sys.holder(stateDir, key, nsPath); h != nil {
		return nil
	}
	return sys.rules.Remove(nsPath)
}

// Check reports an error if sandbox key is not enforced as recorded: no
// state, proxy not running, stopped, crash looping or no longer
// supervised (see ProxyProblem), or the ruleset differs from what doorman
// installs.
func Check(stateDir, key string) error { return host.check(stateDir, key) }

// check is Check on sys.
func (sys *system) check(stateDir, key string) error {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	s, err := sys.load(stateDir, key)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if s.Unenforced != "" {
		return nil // as recorded: nothing enforced
	}
	if s.Mode != conf.ModeNone {
		if err := s.ProxyProblem(); err != nil {
			return fmt.Errorf("check sandbox %s: %w", key, err)
		}
	}
	if !s.NetNSCurrent() {
		return fmt.Errorf("check sandbox %s: %w", key, s.errNetNSGone())
	}
	if err := sys.rules.Check(s.NetNS, s.spec()); err != nil {
		return fmt.Errorf("check sandbox %s: %w", key, err)
	}
	if s.HostLayer {
		spec, err := s.hostSpec(s.HostIfaces)
		if err == nil {
			err = sys.layer.Check(runtimeNetNS, spec)
		}
		if err != nil {
			return fmt.Errorf("check sandbox %s: host-side layer: %w", key, err)
		}
	}
	return nil
}
