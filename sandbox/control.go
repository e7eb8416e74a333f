package sandbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/internal/procstat"
	"github.com/doorman-net/doorman/proxy/supervise"
)

// ProxyProblem says what is wrong with the proxy of a sandbox that has
// one (not in mode none), or nil: it was stopped by an operator; no
// worker runs (and, where its supervisor still runs, when the next one
// starts); its worker runs but serves nothing (see Unresponsive); its
// supervisor is gone, so a worker that dies is not replaced; its workers
// are crash looping. A proxy an earlier release started has no
// supervisor, and that is no problem.
func (s *State) ProxyProblem() error {
	sup := s.supervision
	var unresponsive string
	if !s.Stopped {
		unresponsive = s.Unresponsive()
	}
	switch {
	case s.Stopped:
		return errors.New("its proxy was stopped by an operator (doorman stop): the sandbox's TCP is refused until doorman start")
	case s.Serving() && unresponsive != "":
		return fmt.Errorf("proxy (pid %d) is unresponsive: %s", s.PID, unresponsive)
	case !s.Serving():
		if !s.SupervisorAlive() {
			return fmt.Errorf("proxy (pid %d) is not running", s.PID)
		}
		if sup != nil && sup.NextStart != nil {
			return fmt.Errorf("proxy is not running: its supervisor (pid %d) starts the next one in %v, after %d failures in a row (the last %s)",
				s.Supervisor.PID, time.Until(*sup.NextStart).Round(100*time.Millisecond), sup.Failures, lastExit(sup))
		}
		return fmt.Errorf("proxy is not running: its supervisor (pid %d) is starting the next one", s.Supervisor.PID)
	case s.Supervisor != nil && !s.SupervisorAlive():
		return fmt.Errorf("the proxy's supervisor (pid %d) is gone: the proxy (pid %d) serves on, but nothing replaces it if it dies (doorman start restores the supervisor)",
			s.Supervisor.PID, s.PID)
	case sup != nil && sup.CrashLooping():
		return fmt.Errorf("proxy is crash looping: %d workers in a row ended within %v of starting (the last %s)",
			sup.Failures, supervise.DefaultStableAfter, lastExit(sup))
	}
	return nil
}

// Unresponsive says why the sandbox's running worker serves nothing, or
// "" if nothing says so: its supervisor found it answering no heartbeat
// (it replaces it at the heartbeat timeout), or the kernel has it stopped
// (SIGSTOP, a debugger). A worker serves from its relay loop, which
// answers the heartbeats; one that does not hangs every connection of the
// sandbox while it runs and holds the listeners.
func (s *State) Unresponsive() string {
	sup := s.supervision
	replaced := "its supervisor replaces it"
	if sup != nil && sup.HeartbeatTimeout != 0 {
		replaced += " once it has answered none for " + time.Duration(sup.HeartbeatTimeout).String()
	}
	switch {
	case !s.SupervisorAlive():
		replaced = "nothing replaces it: its supervisor is gone"
	case sup == nil || sup.HeartbeatTimeout == 0:
		replaced = "its supervisor does not check heartbeats (an earlier release's)"
	}
	if st, err := procstat.Read(s.PID); err == nil && (st.State == 'T' || st.State == 't') {
		return fmt.Sprintf("it is stopped (SIGSTOP or a debugger) and serves nothing; %s", replaced)
	}
	if sup != nil && sup.State == supervise.StateUnresponsive && sup.Unresponsive != nil && sup.Worker != nil &&
		sup.Worker.PID == s.PID && s.SupervisorAlive() {
		return fmt.Sprintf("it has answered no heartbeat of its supervisor's for %v; %s",
			time.Since(*sup.Unresponsive).Round(100*time.Millisecond), replaced)
	}
	return ""
}

// lastExit says how the last worker ended, for messages.
func lastExit(st *supervise.Status) string {
	if st.LastExit == nil {
		return "unknown"
	}
	return fmt.Sprintf("%s after %v", st.LastExit.Reason, time.Duration(st.LastExit.Ran))
}

// ProxyChange reports what Stop or Start did.
type ProxyChange struct {
	// State is the sandbox's state afterwards.
	State *State
	// Changed is false when there was nothing to do: the proxy was
	// stopped already, or already runs under its supervisor.
	Changed bool
	// Replaced says Start replaced a proxy that served without a
	// supervisor (its supervisor gone, or an earlier release's proxy).
	Replaced bool
}

// Stop stops the proxy of the enforced sandbox key under stateDir and
// keeps it stopped: its supervisor, its worker and its cgroup go, and
// nothing restarts it (Check fails, saying so) until Start, a change of
// mode, or the runtime enforcing the sandbox anew. The ruleset stays: the
// sandbox's TCP, redirected to listeners nobody holds, is refused, and
// its DNS filter does not answer; the allowDirect destinations stay
// reachable (mode none cuts them too).
func Stop(stateDir, key string) (*ProxyChange, error) { return host.stop(stateDir, key) }

// stop is Stop on sys.
func (sys *system) stop(stateDir, key string) (*ProxyChange, error) {
	return sys.control(stateDir, key, "stop", func(s *State) (*ProxyChange, error) {
		if s.Stopped {
			return &ProxyChange{State: s}, nil
		}
		err := s.stopProxy()
		s.Stopped = true
		// The host-side listeners went with the proxy: the layer stops
		// redirecting to their ports (another process may bind them
		// now), and drops what it redirected there.
		if s.HostPort4 != 0 || s.HostPort6 != 0 || s.HostDNSPort4 != 0 || s.HostDNSPort6 != 0 {
			s.HostPort4, s.HostPort6, s.HostDNSPort4, s.HostDNSPort6 = 0, 0, 0, 0
			if herr := s.reapplyHostLayer(); err == nil {
				err = herr
			}
		}
		if serr := s.save(); err == nil {
			err = serr
		}
		return &ProxyChange{State: s, Changed: true}, err
	})
}

// Start starts the proxy of the enforced sandbox key under stateDir under
// a supervisor: after Stop, after every process of it died, or in place of
// a proxy that serves without a supervisor (whose supervisor was killed,
// or which an earlier release started). The new proxy serves new
// listeners, then the ruleset is swapped for one that redirects to them
// (one batch), then the old proxy is stopped: connections never go
// unenforced, and on failure the sandbox stays as it was. A proxy that
// runs under its supervisor is left alone.
func Start(stateDir, key string) (*ProxyChange, error) { return host.start(stateDir, key) }

// start is Start on sys.
func (sys *system) start(stateDir, key string) (*ProxyChange, error) {
	return sys.control(stateDir, key, "start", func(s *State) (*ProxyChange, error) {
		if !s.Stopped && s.SupervisorAlive() {
			return &ProxyChange{State: s}, nil
		}
		if !s.NetNSCurrent() {
			return nil, s.errNetNSGone()
		}
		if err := sys.netns.Check(s.NetNS); err != nil {
			return nil, err
		}
		old := *s
		replaced := !s.Stopped && s.Serving()
		next := *s
		next.Supervisor, next.supervision, next.Cgroup, next.CgroupError = nil, nil, nil, ""
		spawned, err := sys.proxies.Start(&next, next.makeCgroup(), workerServing)
		if err != nil {
			return nil, err
		}
		if err := next.started(spawned); err != nil {
			return nil, err
		}
		if err := sys.rules.Apply(next.NetNS, next.spec()); err != nil {
			next.stopProxy()
			return nil, fmt.Errorf("redirect to the new proxy: %w", err)
		}
		if err := next.reapplyHostLayer(); err != nil {
			sys.rules.Apply(old.NetNS, old.spec())
			next.stopProxy()
			return nil, fmt.Errorf("redirect to the new proxy: %w", err)
		}
		// Stop the old proxy by its own record. Its cgroup is another
		// than the new one's where it still held processes; one it left
		// empty may have been made anew for the new proxy, and is the
		// new one's now.
		if old.Cgroup != nil && next.Cgroup != nil && old.Cgroup.Path == next.Cgroup.Path {
			old.Cgroup = nil
		}
		oldErr := old.stopProxy()
		next.Stopped, next.LeftoverCgroups = false, old.LeftoverCgroups
		if err := next.save(); err != nil {
			return nil, err
		}
		if oldErr != nil {
			oldErr = fmt.Errorf("the new proxy serves, but the old one did not stop: %w", oldErr)
		}
		return &ProxyChange{State: &next, Changed: true, Replaced: replaced}, oldErr
	})
}

// control runs do on sandbox key under stateDir, holding the state
// directory's lock as the policy updates do. A sandbox in mode none has
// no proxy to stop or start.
func (sys *system) control(stateDir, key, verb string, do func(*State) (*ProxyChange, error)) (*ProxyChange, error) {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	unlock, err := lockDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("%s the proxy of sandbox %s: %w", verb, key, err)
	}
	defer unlock()
	s, err := sys.load(stateDir, key)
	if err != nil {
		return nil, fmt.Errorf("%s the proxy of sandbox %s: %w", verb, key, err)
	}
	if s.Mode == conf.ModeNone {
		return nil, fmt.Errorf("%s the proxy of sandbox %s: it is in mode none, which has no proxy (a mode change to allowlist or open starts one)", verb, key)
	}
	c, err := do(s)
	if err != nil {
		return c, fmt.Errorf("%s the proxy of sandbox %s: %w", verb, key, err)
	}
	return c, nil
}
