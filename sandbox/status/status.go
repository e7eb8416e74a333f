// Package status computes what `doorman ls` and `doorman show` report
// about a sandbox from its recorded state (package sandbox), its live
// policy file, its decision log and its proxy's processes and cgroup:
// above all the proxy's health, a small state machine over whether the
// worker serves, answers its supervisor's heartbeat, is stopped by an
// operator, and whether its supervisor lives and sees a crash loop
// (Facts.Health). It also lists the host's network namespaces that no
// sandbox accounts for (UnenforcedNamespaces, `ls --all`), asking the
// kernel through a small interface (Host) so that the decision is unit
// tested without root.
package status

import (
	"time"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/supervise"
	"github.com/doorman-net/doorman/sandbox"
)

// The proxy health values ls and show report (Proxy.Health).
const (
	HealthUp           = "up"           // running
	HealthDown         = "down"         // should run and does not: the sandbox's TCP is refused
	HealthNone         = "none"         // mode none: there is no proxy, nothing leaves
	HealthRestarting   = "restarting"   // no worker runs; its supervisor starts the next one
	HealthCrashLoop    = "crashloop"    // its workers keep dying soon after they start
	HealthUnsupervised = "unsupervised" // running, but its supervisor is gone: not replaced if it dies
	HealthUnresponsive = "unresponsive" // running, but serving nothing: stopped, or answering no heartbeat
	HealthStopped      = "stopped"      // stopped by an operator (doorman stop)
	HealthNA           = "n/a"          // not enforced (a pod passed through): no proxy, nothing held
)

// Info is one sandbox as ls and show report it; -o json writes it
// as is.
type Info struct {
	Key    string `json:"key"`
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	PodUID string `json:"podUID,omitempty"`
	// CgroupParent is the cgroup the runtime named for the sandbox (a
	// pod's cgroup parent: a cgroupfs path or a systemd slice), if any.
	CgroupParent string `json:"cgroupParent,omitempty"`
	Runtime      string `json:"runtime"`
	// RuntimeKind is the kind of runtime the workload runs on as doorman
	// detected it: runc, runsc, microvm or unknown (see package
	// runtimekind).
	RuntimeKind string `json:"runtimeKind"`
	Network     string `json:"network,omitempty"`
	IfName      string `json:"ifName,omitempty"`
	NetNS       string `json:"netns"`
	// Mode is the mode of the live policy file, what the proxy applies;
	// "invalid" if it does not load (the proxy then denies everything).
	Mode        string `json:"mode"`
	Entries     int    `json:"entries"`
	PolicyError string `json:"policyError,omitempty"`
	Label       string `json:"label"`
	Proxy       Proxy  `json:"proxy"`
	decisionlog.Counts
	CountError string    `json:"countError,omitempty"`
	Created    time.Time `json:"created"`
	StateDir   string    `json:"stateDir"`
	PolicyFile string    `json:"policyFile"`
	LogFile    string    `json:"logFile"`
	// Unenforced says why doorman enforces nothing here (a pod in an
	// excluded namespace); its mode is "-" and its proxy n/a.
	Unenforced string `json:"unenforced,omitempty"`

	policy *conf.Policy
	state  *sandbox.State
}

// Policy is the live policy Describe read; nil if it did not load or the
// sandbox is not enforced.
func (i *Info) Policy() *conf.Policy { return i.policy }

// State is the sandbox Describe described.
func (i *Info) State() *sandbox.State { return i.state }

// Proxy is a sandbox's proxy as ls and show report it: its health (one
// of the Health constants), process, supervisor and cgroup.
type Proxy struct {
	Health  string     `json:"health"`
	PID     int        `json:"pid,omitempty"`
	Started *time.Time `json:"started,omitempty"`
	// Problem is what CHECK says is wrong with the proxy, if anything.
	Problem string `json:"problem,omitempty"`
	// Unresponsive says why a proxy that runs serves nothing: it is
	// stopped, or it answers no heartbeat of its supervisor's.
	Unresponsive string `json:"unresponsive,omitempty"`
	// Supervisor is the proxy's parent, which replaces it when it dies;
	// none for a proxy an earlier release started.
	Supervisor *Supervisor `json:"supervisor,omitempty"`
	// Restarts, Failures (in a row), LastExit and NextStart are what
	// the supervisor last said (see supervise.Status).
	Restarts  int             `json:"restarts"`
	Failures  int             `json:"failures,omitempty"`
	LastExit  *supervise.Exit `json:"lastExit,omitempty"`
	NextStart *time.Time      `json:"nextStart,omitempty"`
	// Cgroup is where the proxy runs and what it may use; CgroupError
	// says why it runs without one.
	Cgroup      *Cgroup `json:"cgroup,omitempty"`
	CgroupError string  `json:"cgroupError,omitempty"`
	// LeftoverCgroups are earlier proxies' cgroups not removed yet.
	LeftoverCgroups []cgroup.Group `json:"leftoverCgroups,omitempty"`
}

// Supervisor is the process that replaces the proxy when it dies.
type Supervisor struct {
	PID     int        `json:"pid"`
	Alive   bool       `json:"alive"`
	Started *time.Time `json:"started,omitempty"`
}

// Cgroup is the proxy's cgroup, with what its files say now; where
// they cannot be read (its hierarchy is not mounted where this command
// runs), Unreadable says why and Limits and Usage are empty.
type Cgroup struct {
	*sandbox.ProxyCgroup
	Limits     cgroup.Limits `json:"limits"`
	Usage      cgroup.Usage  `json:"usage"`
	Unreadable string        `json:"unreadable,omitempty"`
}

// Describe gathers what ls and show report about s. Counts come from the
// decision log, from the sandbox's creation on (a log outlives its
// sandbox, and a later one with the same key appends to it). It looks
// again at the runtime kind of s (sandbox.State.DetectRuntimeKind), in
// memory only; RuntimeKind is "-" where none is known.
func Describe(s *sandbox.State) *Info {
	s.DetectRuntimeKind()
	info := &Info{
		RuntimeKind: s.RuntimeKind,
		Key:         s.Key, ID: s.ID, Name: s.Name, PodUID: s.PodUID, CgroupParent: s.CgroupParent, Runtime: s.Runtime, Network: s.Network, IfName: s.IfName,
		NetNS: s.NetNS, Created: s.Created, StateDir: s.Dir, PolicyFile: s.PolicyPath(), LogFile: s.LogFile,
		state: s,
	}
	if info.RuntimeKind == "" {
		info.RuntimeKind = "-"
	}
	if s.Unenforced != "" {
		// A record without a policy, proxy or log.
		info.Unenforced, info.Mode, info.Entries, info.Label = s.Unenforced, "-", -1, s.Label
		info.Proxy.Health, info.PolicyFile, info.LogFile = HealthNA, "", ""
		return info
	}
	p, err := s.Policy()
	if err != nil {
		info.Mode, info.Entries, info.PolicyError = "invalid", -1, err.Error()
	} else {
		info.Mode, info.Entries, info.policy = string(p.Mode), len(p.Entries), p
	}
	info.Label = DisplayLabel(s.Label, conf.Mode(info.Mode))
	info.Proxy = describeProxy(s)
	if c, err := decisionlog.CountFile(s.LogFile, s.Created); err != nil {
		info.CountError = err.Error()
	} else {
		info.Counts = c
	}
	return info
}

// describeProxy gathers what ls and show report about s's proxy.
func describeProxy(s *sandbox.State) Proxy {
	var p Proxy
	sup := s.Supervision()
	f := Facts{
		ModeNone: s.Mode == conf.ModeNone, Stopped: s.Stopped, Serving: s.Serving(),
		Supervised: s.Supervisor != nil, SupervisorAlive: s.SupervisorAlive(),
		CrashLooping: sup != nil && sup.CrashLooping(),
	}
	if f.Serving {
		p.Unresponsive = s.Unresponsive()
		f.Unresponsive = p.Unresponsive != ""
	}
	if p.Health = f.Health(); p.Health == HealthNone {
		return p
	}
	if err := s.ProxyProblem(); err != nil {
		p.Problem = err.Error()
	}
	if f.Serving {
		p.PID = s.PID
		if t, err := s.ProxyStarted(); err == nil {
			p.Started = &t
		}
	}
	if s.Supervisor != nil {
		p.Supervisor = &Supervisor{PID: s.Supervisor.PID, Alive: s.SupervisorAlive()}
		if t, err := s.SupervisorStarted(); err == nil {
			p.Supervisor.Started = &t
		}
	}
	if sup != nil {
		p.Restarts, p.Failures, p.LastExit, p.NextStart = sup.Restarts, sup.Failures, sup.LastExit, sup.NextStart
	}
	if s.Cgroup != nil {
		p.Cgroup = &Cgroup{ProxyCgroup: s.Cgroup}
		if l, err := s.Cgroup.Limits(); err != nil {
			p.Cgroup.Unreadable = err.Error()
		} else {
			p.Cgroup.Limits, p.Cgroup.Usage = l, s.Cgroup.Usage()
		}
	}
	p.CgroupError, p.LeftoverCgroups = s.CgroupError, s.LeftoverCgroups
	return p
}

// DisplayLabel is the enforcement label to show for a sandbox recorded
// with label under mode. Enforcement covers nothing to speak of in mode
// open ("n/a"); a sandbox first enforced in mode open was recorded as
// "n/a", which says nothing about what it covers in another mode.
func DisplayLabel(label string, mode conf.Mode) string {
	switch {
	case mode == conf.ModeOpen:
		return "n/a"
	case label == "n/a":
		return "unknown (first enforced in mode open)"
	}
	return label
}

// Facts are what a sandbox's proxy health is judged on: what its state
// records and what its processes do now.
type Facts struct {
	// ModeNone: the sandbox's mode is none (no proxy is needed).
	ModeNone bool
	// Stopped: an operator stopped the proxy (doorman stop).
	Stopped bool
	// Serving: a worker runs. Unresponsive: it runs but serves nothing
	// (stopped by a signal, or answering no heartbeat).
	Serving, Unresponsive bool
	// Supervised: the sandbox records a supervisor; SupervisorAlive: it
	// runs; CrashLooping: it says its workers keep dying soon after they
	// start.
	Supervised, SupervisorAlive, CrashLooping bool
}

// Health is the proxy health (one of the Health constants) of f.
func (f Facts) Health() string {
	switch {
	case f.ModeNone && !f.Serving && !f.SupervisorAlive:
		return HealthNone
	case f.Stopped:
		return HealthStopped
	case f.Serving && f.Unresponsive:
		return HealthUnresponsive
	case f.Serving && f.CrashLooping && f.SupervisorAlive:
		return HealthCrashLoop
	case f.Serving && f.Supervised && !f.SupervisorAlive:
		return HealthUnsupervised
	case f.Serving:
		return HealthUp
	case f.SupervisorAlive && f.CrashLooping:
		return HealthCrashLoop
	case f.SupervisorAlive:
		return HealthRestarting
	}
	return HealthDown
}
