package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/internal/procstat"
	"github.com/doorman-net/doorman/proxy/launch"
	"github.com/doorman-net/doorman/proxy/supervise"
)

// readyTimeout bounds how long Enforce waits for a new proxy to say it is
// ready (see readiness).
const readyTimeout = 10 * time.Second

// proxyConfigFile, in a sandbox's state directory, is the config file of
// its proxy (see launch.Config), written each time one is started. It is
// readable by its owner only: it carries the OTLP headers.
const proxyConfigFile = "proxy-config.json"

// supervisorFile, in a sandbox's state directory, is its supervisor's
// status (see supervise.Status): the worker serving now, restarts, how the
// last one ended.
const supervisorFile = "supervisor.json"

// hostDropsFile is where the proxy keeps what it has logged of each
// host-side drop rule, so that a new worker does not log it again (see
// package proxy/droplog).
const hostDropsFile = "hostdrops.json"

// proxyDrainTimeout is how long a sandbox's proxy lets open connections
// finish once it is told to stop: the sandbox is going.
const proxyDrainTimeout = 500 * time.Millisecond

// supervisorGrace is how long a supervisor may take to stop its worker
// (which drains for proxyDrainTimeout, then gets SIGKILL) and exit after
// SIGTERM, before it gets SIGKILL itself.
const supervisorGrace = 2 * time.Second

// Proc names one process: its pid and its start time, which together are
// never reused (see package procstat).
type Proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"pidStart"`
}

// alive reports whether p still runs (and is not a zombie).
func (p *Proc) alive(procs processes) bool { return p != nil && procs.Alive(p.PID, p.Start) }

// readiness is how far a new proxy's start goes before it counts as
// started.
type readiness int

const (
	// workerServing waits until the first worker serves: a worker that
	// cannot serve is the caller's error. An operator's doorman start
	// and a change of mode use it: they replace a proxy, which stays
	// until its successor is known to serve.
	workerServing readiness = iota
	// workerStarted waits until the supervisor holds the listeners, has
	// read and checked the config, runs in the proxy's cgroup and has
	// started the first worker there, not until that worker serves (a
	// Go process start and its set-up, about 5 ms). A new sandbox's
	// ruleset sends every connection to the listeners, so until the
	// worker serves they wait in the backlog: the sandbox is closed,
	// never open. A first worker that does not get to serve is replaced
	// like any later one, and Check and ls report it (not running,
	// crash looping). Enforce uses it: a CNI ADD or OCI hook waits for
	// it, and the container's start with it.
	workerStarted
)

// spawnedProxy is a sandbox's supervisor that was started, whose first
// worker may not serve yet: the process, its status file and its cgroup.
type spawnedProxy struct {
	*launch.Process
	status string
	cgroup *cgroup.Group
}

// supervisor names the supervisor process, which runs from the moment
// launch.Start returns (its exec succeeded), ready or not. One that cannot
// be named (it is gone already) is killed with what it started.
func (p *spawnedProxy) supervisor() (Proc, error) {
	pid := p.Pid()
	start, err := processStart(pid)
	if err != nil {
		// Gone already (and reaped): it said why on its way out.
		exited, why := p.ExitedWithin(time.Second)
		p.kill()
		if exited {
			return Proc{}, why
		}
		return Proc{}, fmt.Errorf("proxy supervisor pid %d: %w", pid, err)
	}
	return Proc{PID: pid, Start: start}, nil
}

// wait waits until the supervisor says ready (the first worker serves,
// or has started: see readiness) and returns that worker. A proxy that
// fails to get ready is killed.
func (p *spawnedProxy) wait() (worker Proc, err error) {
	if err := p.Ready(readyTimeout); err != nil {
		p.kill()
		return Proc{}, err
	}
	// The supervisor wrote its status before it said ready.
	if st, err := supervise.ReadStatus(p.status); err == nil && st.Worker != nil {
		worker = Proc{PID: st.Worker.PID, Start: st.Worker.Start}
	}
	return worker, nil
}

// kill ends a proxy that is not wanted after all: the supervisor, the
// worker it started, and the cgroup they ran in.
func (p *spawnedProxy) kill() {
	p.Kill()
	if st, err := supervise.ReadStatus(p.status); err == nil && st.Worker != nil {
		stopProcess(st.Worker.PID, st.Worker.Start, 0)
	}
	if p.cgroup != nil {
		p.cgroup.Remove(5 * time.Second)
	}
}

// processStart reads a process's start time: together with the pid it
// names one process, so a pid reused after the proxy died is never
// signalled.
func processStart(pid int) (uint64, error) {
	st, err := procstat.Read(pid)
	return st.Start, err
}

// openProxy returns a pidfd for the recorded proxy, or -1 if that process
// is gone (the pid is free or now names another process).
func openProxy(pid int, start uint64) (int, error) {
	if pid <= 0 {
		return -1, nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// Check the start time after opening the pidfd: if it matches now,
	// the pidfd refers to our proxy and stays valid even if it exits.
	got, err := processStart(pid)
	if err != nil || got != start {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// proxyAlive reports whether the recorded process still runs (and is not
// a zombie).
func proxyAlive(pid int, start uint64) bool {
	fd, err := openProxy(pid, start)
	if err != nil || fd < 0 {
		return false
	}
	defer unix.Close(fd)
	st, err := procstat.Read(pid)
	return err == nil && !st.Exited()
}

// stopProcess terminates the recorded process through a pidfd: SIGTERM, then
// SIGKILL if it has not exited within grace (at once for no grace). One
// already gone is fine.
func stopProcess(pid int, start uint64, grace time.Duration) error {
	fd, err := openProxy(pid, start)
	if err != nil || fd < 0 {
		return err
	}
	defer unix.Close(fd)
	if grace > 0 {
		if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("signal proxy %d: %w", pid, err)
		}
		if waitPidfd(fd, grace) {
			return nil
		}
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill proxy %d: %w", pid, err)
	}
	if !waitPidfd(fd, 5*time.Second) {
		return fmt.Errorf("proxy %d did not exit after SIGKILL", pid)
	}
	return nil
}

// waitPidfd waits until the process behind fd has exited.
func waitPidfd(fd int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms < 0 {
			ms = 0
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if n > 0 {
			return true
		}
		if err != nil || ms == 0 {
			return false
		}
	}
}

// stopProxy stops the sandbox's proxy and removes its cgroup: the
// supervisor first (on SIGTERM it stops its worker, and starts no other),
// then whatever still runs (the worker of a supervisor that is gone or
// would not stop; a proxy an earlier release started), then the cgroup,
// which kills anything left in it. It records that nothing runs.
func (s *State) stopProxy() error {
	var errs []error
	if s.Supervisor != nil {
		errs = append(errs, s.sys().procs.Stop(s.Supervisor.PID, s.Supervisor.Start, supervisorGrace))
		// The last worker it started, which its status names.
		s.loadSupervision()
	}
	errs = append(errs, s.sys().procs.Stop(s.PID, s.PIDStart, time.Second))
	errs = append(errs, s.removeCgroup())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.PID, s.PIDStart, s.Supervisor, s.supervision = 0, 0, nil, nil
	os.Remove(filepath.Join(s.Dir, supervisorFile))
	return nil
}

// loadSupervision reads the supervisor's status file, if the sandbox
// records a supervisor, and takes the worker it names as the sandbox's
// proxy: the recorded pid is the worker that served when the state was
// saved, and the supervisor replaces it when it dies. A status file of
// another supervisor (one that a failed start left) is ignored.
func (s *State) loadSupervision() {
	s.supervision = nil
	if s.Supervisor == nil || s.Dir == "" {
		return
	}
	st, err := supervise.ReadStatus(filepath.Join(s.Dir, supervisorFile))
	if err != nil || st.Supervisor.PID != s.Supervisor.PID || st.Supervisor.Start != s.Supervisor.Start {
		return
	}
	s.supervision = st
	if st.Worker != nil {
		s.PID, s.PIDStart = st.Worker.PID, st.Worker.Start
	} else {
		s.PID, s.PIDStart = 0, 0
	}
}

// Supervision is what the sandbox's supervisor last said of its proxy
// (see supervise.Status), or nil: a sandbox in mode none, stopped, or
// whose proxy an earlier release started has none, and one whose
// supervisor has gone keeps what it said last.
func (s *State) Supervision() *supervise.Status { return s.supervision }

// SupervisorAlive reports whether the sandbox records a supervisor and it
// runs.
func (s *State) SupervisorAlive() bool { return s.Supervisor.alive(s.sys().procs) }

// Serving reports whether a proxy worker of the sandbox runs: the one its
// supervisor last started, or the one an earlier release started.
func (s *State) Serving() bool { return s.sys().procs.Alive(s.PID, s.PIDStart) }

// ProxyAlive reports whether the sandbox's proxy is alive: a worker
// serving, or a supervisor that starts the next one.
func (s *State) ProxyAlive() bool { return s.Serving() || s.SupervisorAlive() }

// clockTicks is USER_HZ, the unit of process start times in /proc: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProxyStarted returns when the sandbox's proxy process started. It fails
// if the proxy is not running.
func (s *State) ProxyStarted() (time.Time, error) {
	if !s.Serving() {
		return time.Time{}, errors.New("proxy not running")
	}
	return startTime(s.PIDStart)
}

// startTime is the wall clock time of a process start time (clock ticks
// since boot).
func startTime(ticks uint64) (time.Time, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("/proc/stat btime: %w", err)
			}
			return time.Unix(boot, 0).Add(time.Duration(ticks) * time.Second / clockTicks), nil
		}
	}
	return time.Time{}, errors.New("/proc/stat has no btime")
}

// SupervisorStarted returns when the sandbox's supervisor started. It
// fails if it is not running.
func (s *State) SupervisorStarted() (time.Time, error) {
	if !s.SupervisorAlive() {
		return time.Time{}, errors.New("supervisor not running")
	}
	return startTime(s.Supervisor.Start)
}
