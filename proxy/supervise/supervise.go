package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/internal/procstat"
	"github.com/doorman-net/doorman/proxy/launch"
)

// Defaults for the zero values of Config's durations.
const (
	DefaultReadyTimeout = 10 * time.Second
	DefaultStableAfter  = 10 * time.Second
	DefaultStopTimeout  = time.Second
	DefaultBackoffBase  = 100 * time.Millisecond
	DefaultBackoffMax   = 30 * time.Second
)

// oomScoreAdjRaise is how much higher a worker's oom_score_adj is than
// its supervisor's: within the cgroup, the OOM killer adds this many
// thousandths of the memory limit to the worker's size, so it picks the
// worker, which is replaced, over the supervisor, which holds the
// sandbox's listeners. Raising one's oom_score_adj needs no privilege.
const oomScoreAdjRaise = 100

// Config says what one supervisor runs.
type Config struct {
	// Sandbox names the sandbox, for messages.
	Sandbox string
	// Worker is how each worker is started: `doorman proxy` on the
	// config file, inheriting the listening sockets (which the
	// supervisor keeps open all along) as 3, 4, ..., then its heartbeat
	// socket (see HeartbeatTimeout) and its readiness pipe, on which it
	// writes "ready\n" once it serves (see package launch).
	Worker launch.Worker
	// Stderr receives the supervisor's own lines (and the workers'
	// standard error, where Worker sends it).
	Stderr *os.File
	// StatusFile is where the supervisor keeps its Status ("" for none).
	StatusFile string
	// Cgroup, if set, is joined by the supervisor before it starts any
	// worker; its OOM kills tell an OOM from another SIGKILL.
	Cgroup *cgroup.Group
	// ReadyTimeout bounds how long a worker may take to serve;
	// StableAfter is how long it must serve to reset the failure count;
	// StopTimeout how long it may take to exit after SIGTERM before it
	// gets SIGKILL. Zero means the defaults above.
	ReadyTimeout, StableAfter, StopTimeout time.Duration
	// BackoffBase and BackoffMax shape the delay before a worker that
	// follows failures in a row: none after the first failure, then
	// BackoffBase, doubling up to BackoffMax.
	BackoffBase, BackoffMax time.Duration
	// HeartbeatTimeout is how long a serving worker may go without
	// answering a heartbeat before it is killed (SIGKILL) and replaced
	// like one that died (zero: DefaultHeartbeatTimeout). Each worker
	// gets a SOCK_SEQPACKET socket on which it sends back every message
	// it gets (see heartbeat).
	HeartbeatTimeout time.Duration
	// Ready, if set, is called once, when the first worker serves, or
	// with ReadyOnStart as soon as it has started.
	Ready func()
	// ReadyOnStart calls Ready once the first worker has started (it
	// runs, in Cgroup, and the status file names it), before it serves,
	// and makes a first worker that does not get to serve a failure like
	// any later one's: replaced after the backoff, and said in the
	// status. Without it, the first worker must serve, or Run returns
	// why. A caller that has the sandbox's ruleset in place either way
	// leaves it closed, never open, until a worker serves: connections
	// wait in the listeners' backlog.
	ReadyOnStart bool
}

func (c *Config) defaults() {
	or := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	or(&c.ReadyTimeout, DefaultReadyTimeout)
	or(&c.StableAfter, DefaultStableAfter)
	or(&c.StopTimeout, DefaultStopTimeout)
	or(&c.BackoffBase, DefaultBackoffBase)
	or(&c.BackoffMax, DefaultBackoffMax)
	or(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
}

// Backoff is the delay before the next worker after failures workers in
// a row failed.
func (c *Config) Backoff(failures int) time.Duration {
	if failures <= 1 {
		return 0
	}
	d := c.BackoffBase
	for i := 2; i < failures && d < c.BackoffMax; i++ {
		d *= 2
	}
	return min(d, c.BackoffMax)
}

// worker is one running worker.
type worker struct {
	cmd     *exec.Cmd
	proc    Process
	hb      *heartbeat
	ready   <-chan error // the readiness line, or why there was none
	exited  chan struct{}
	oomFrom uint64 // the cgroup's OOM kills when it started
}

// supervisor is Run's state.
type supervisor struct {
	cfg    Config
	status Status
}

// Run supervises workers until ctx is done or the process gets SIGTERM or
// SIGINT, then stops the running worker. The first worker must serve: if
// it does not, Run returns why (with what it wrote to stderr, the caller
// shows it); with ReadyOnStart, only starting it must succeed. Later
// workers are replaced when they die, with the backoff described in the
// package doc.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	s := &supervisor{cfg: cfg, status: Status{Supervisor: Process{PID: os.Getpid(), Start: self.Start, Started: time.Now().UTC()},
		HeartbeatTimeout: Duration(cfg.HeartbeatTimeout)}}
	if cfg.Cgroup != nil {
		if err := cfg.Cgroup.Join(os.Getpid()); err != nil {
			return fmt.Errorf("join the proxy's cgroup: %w", err)
		}
		phasetrace.Mark("sup.cgroup")
	}

	w, err := s.start()
	if err != nil {
		return err
	}
	if cfg.ReadyOnStart {
		phasetrace.Mark("sup.ready")
		if cfg.Ready != nil {
			cfg.Ready()
		}
		if err := s.waitReady(ctx, w); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if w, err = s.next(ctx); err != nil || w == nil {
				return err
			}
		}
		phasetrace.Mark("sup.worker-ready")
	} else {
		if err := s.waitReady(ctx, w); err != nil {
			return err
		}
		phasetrace.Mark("sup.worker-ready")
		if cfg.Ready != nil {
			cfg.Ready()
		}
	}
	for {
		w, err = s.serve(ctx, w)
		if err != nil || w == nil {
			return err
		}
	}
}

// serve waits while w serves: until it exits (then it starts the next
// worker, after the backoff, and returns it) or ctx is done (then it
// stops w and returns nil).
func (s *supervisor) serve(ctx context.Context, w *worker) (*worker, error) {
	stable := time.NewTimer(s.cfg.StableAfter - time.Since(w.proc.Started))
	defer stable.Stop()
	beat := time.NewTicker(HeartbeatInterval(s.cfg.HeartbeatTimeout))
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			s.stopWorker(w)
			return nil, nil
		case <-stable.C:
			if s.status.Failures != 0 {
				s.status.Failures = 0
				s.save()
			}
		case <-w.exited:
			s.ended(w, "")
			return s.next(ctx)
		case now := <-beat.C:
			select {
			case <-w.exited: // how it ended says more than its silence
				s.ended(w, "")
				return s.next(ctx)
			default:
			}
			if why := s.checkHeartbeat(w, w.hb.beat(now)); why != "" {
				kill(w)
				s.ended(w, why)
				return s.next(ctx)
			}
		}
	}
}

// checkHeartbeat judges w by how long it has left a heartbeat
// unanswered: past the timeout it returns why w is to be replaced; past
// two heartbeats the status says w is unresponsive, and once it answers
// again that it serves.
func (s *supervisor) checkHeartbeat(w *worker, silence time.Duration) (why string) {
	if silence >= s.cfg.HeartbeatTimeout {
		return fmt.Sprintf("unresponsive: answered no heartbeat for %v", silence.Round(100*time.Millisecond))
	}
	late := silence > 2*HeartbeatInterval(s.cfg.HeartbeatTimeout)
	switch {
	case late && s.status.State == StateServing:
		since := w.hb.since()
		s.status.State, s.status.Unresponsive = StateUnresponsive, &since
		s.save()
		s.logf("proxy (pid %d) has answered no heartbeat for %v: replaced if it answers none for %v", w.proc.PID, silence.Round(100*time.Millisecond), s.cfg.HeartbeatTimeout)
	case !late && s.status.State == StateUnresponsive:
		s.status.State, s.status.Unresponsive = StateServing, nil
		s.save()
		s.logf("proxy (pid %d) answers its heartbeats again", w.proc.PID)
	}
	return ""
}

// next starts workers, after the backoff, until one serves (returning it)
// or ctx is done (returning nil).
func (s *supervisor) next(ctx context.Context) (*worker, error) {
	for {
		delay := s.cfg.Backoff(s.status.Failures)
		if delay > 0 {
			at := time.Now().Add(delay).UTC()
			s.status.State, s.status.Worker, s.status.NextStart = StateBackoff, nil, &at
			s.save()
			s.logf("next proxy in %v (%d failures in a row)", delay.Round(time.Millisecond), s.status.Failures)
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, nil
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		w, err := s.start()
		if err != nil {
			// Starting a process failed (no descriptors, no memory):
			// a failure like any other, tried again later.
			s.status.Failures++
			s.status.LastExit = &Exit{Time: time.Now().UTC(), Reason: err.Error()}
			s.logf("%v", err)
			continue
		}
		s.status.Restarts++
		if err := s.waitReady(ctx, w); err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			continue
		}
		return w, nil
	}
}

// start starts a worker and records it as starting.
func (s *supervisor) start() (*worker, error) {
	hb, err := newHeartbeat()
	if err != nil {
		return nil, fmt.Errorf("start proxy: %w", err)
	}
	readR, readW, err := os.Pipe()
	if err != nil {
		hb.close()
		return nil, fmt.Errorf("start proxy: %w", err)
	}
	cmd := s.cfg.Worker.Command(hb.worker, readW)
	w := &worker{cmd: cmd, hb: hb, exited: make(chan struct{})}
	if s.cfg.Cgroup != nil {
		w.oomFrom, _ = s.cfg.Cgroup.OOMKills()
	}
	err = cmd.Start()
	readW.Close()
	hb.worker.Close()
	if err != nil {
		readR.Close()
		hb.close()
		return nil, fmt.Errorf("start proxy %s: %w", s.cfg.Worker.Path, err)
	}
	phasetrace.Mark("sup.worker-spawned")
	pid := cmd.Process.Pid
	w.proc = Process{PID: pid, Started: time.Now().UTC()}
	if st, err := procstat.Read(pid); err == nil {
		w.proc.Start = st.Start
	}
	raiseOOMScore(pid)
	go func() {
		cmd.Wait()
		close(w.exited)
	}()
	w.ready = launch.AwaitReady(readR)
	s.status.State, s.status.Worker, s.status.NextStart = StateStarting, &w.proc, nil
	s.save()
	return w, nil
}

// waitReady waits until w serves; if it does not (it exits, says nothing,
// takes longer than ReadyTimeout, or ctx is done), w is stopped, its end
// recorded as a failure, and the error says why.
func (s *supervisor) waitReady(ctx context.Context, w *worker) error {
	t := time.NewTimer(s.cfg.ReadyTimeout)
	defer t.Stop()
	var why string
	select {
	case err := <-w.ready:
		if err == nil {
			s.status.State = StateServing
			s.save()
			return nil
		}
		// The pipe closes when the worker exits: say how it did.
		select {
		case <-w.exited:
		case <-time.After(s.cfg.StopTimeout):
			why = "closed its readiness pipe without serving"
		}
	case <-w.exited:
	case <-t.C:
		why = fmt.Sprintf("did not serve within %v", s.cfg.ReadyTimeout)
	case <-ctx.Done():
		s.stopWorker(w)
		return ctx.Err()
	}
	if why != "" {
		kill(w)
	}
	exit := s.ended(w, why)
	return fmt.Errorf("proxy %s", exit.Reason)
}

// ended records how w ended (why, if the supervisor ended it, else what
// its exit status says) and returns it.
func (s *supervisor) ended(w *worker, why string) *Exit {
	<-w.exited
	w.hb.close()
	ran := time.Since(w.proc.Started)
	e := &Exit{Time: time.Now().UTC(), PID: w.proc.PID, Ran: Duration(ran.Round(time.Millisecond))}
	e.Reason = why
	if why == "" {
		e.Reason = describeExit(w.cmd.ProcessState)
		if ws, ok := w.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && s.cfg.Cgroup != nil {
			if n, ok := s.cfg.Cgroup.OOMKills(); ok && n > w.oomFrom {
				e.OOM = true
				e.Reason = "killed by the OOM killer at the proxy's memory limit"
			}
		}
	}
	if ran < s.cfg.StableAfter {
		s.status.Failures++
	} else {
		s.status.Failures = 1
	}
	s.status.LastExit, s.status.Worker, s.status.Unresponsive = e, nil, nil
	s.save()
	s.logf("proxy (pid %d) %s after %v", w.proc.PID, e.Reason, ran.Round(time.Millisecond))
	return e
}

// describeExit says how a process ended.
func describeExit(ps *os.ProcessState) string {
	if ps == nil {
		return "ended"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			return "killed by " + signalName(ws.Signal())
		case ws.Exited():
			return fmt.Sprintf("exited with status %d", ws.ExitStatus())
		}
	}
	return ps.String()
}

// signalName is SIGKILL for syscall.SIGKILL.
func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT",
		syscall.SIGINT: "SIGINT", syscall.SIGBUS: "SIGBUS", syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGPIPE: "SIGPIPE", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGILL: "SIGILL",
	}
	if n, ok := names[sig]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%v)", int(sig), sig)
}

// stopWorker stops w: SIGTERM (it drains), then SIGKILL after StopTimeout.
func (s *supervisor) stopWorker(w *worker) {
	s.status.State, s.status.Unresponsive = StateStopping, nil
	s.save()
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(s.cfg.StopTimeout):
		kill(w)
		<-w.exited
	}
	w.hb.close()
	s.status.Worker = nil
	s.save()
}

func kill(w *worker) { w.cmd.Process.Kill() }

// raiseOOMScore makes worker pid the OOM killer's choice over its
// supervisor (see oomScoreAdjRaise). Failing to costs only that.
func raiseOOMScore(pid int) {
	data, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return
	}
	own, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return
	}
	os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(min(1000, own+oomScoreAdjRaise))), 0)
}

// save writes the status file; failing to is said on stderr.
func (s *supervisor) save() {
	if s.cfg.StatusFile == "" {
		return
	}
	if err := s.status.write(s.cfg.StatusFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.logf("status: %v", err)
	}
}

// logf writes a line to the supervisor's stderr.
func (s *supervisor) logf(format string, a ...any) {
	if s.cfg.Stderr == nil {
		return
	}
	fmt.Fprintf(s.cfg.Stderr, "%s doorman supervise %s: %s\n", time.Now().UTC().Format(time.RFC3339), s.cfg.Sandbox, fmt.Sprintf(format, a...))
}
