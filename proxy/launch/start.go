package launch

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/internal/testhook"
)

// Request says how to start a sandbox's supervisor.
type Request struct {
	// Binary is the doorman binary to run as `doorman supervise`.
	Binary string
	// Sandbox is the config's sandbox id, put on the command line for ps.
	Sandbox string
	// ConfigFile is the proxy's config file (see Config); StatusFile is
	// where the supervisor keeps its status (see supervise.Status).
	ConfigFile, StatusFile string
	// LogFile is the sandbox's decision log: the supervisor's and its
	// workers' standard error are appended to LogFile+".stderr", where a
	// proxy that fails early says why.
	LogFile string
	// Cgroup, if set, is the proxy's cgroup: the supervisor is moved
	// into it while it starts up, and joins it before it starts a worker.
	Cgroup *cgroup.Group
	// Listeners are the sockets the supervisor holds and every worker
	// serves, inherited as 3, 4, ... in the order of the config's
	// listeners.
	Listeners []*os.File
	// ReadyOnStart makes the supervisor say ready once its first worker
	// has started, rather than once it serves (see supervise.Config).
	ReadyOnStart bool
}

// maxStartError bounds how much of a proxy's own error output an error
// that it did not start quotes.
const maxStartError = 1024

// Process is a supervisor Start started, which may not be ready yet.
type Process struct {
	cmd     *exec.Cmd
	ready   <-chan error
	exited  chan error
	errPath string
	errFrom int64 // where this supervisor's output starts in errPath
}

// Start starts a detached `doorman supervise` (its own session, stdio on
// /dev/null, so it outlives the plugin and the runtime and never holds the
// runtime's pipes open), handing it the listeners; where r names a cgroup
// it is moved there at once. The caller may install the sandbox's ruleset
// meanwhile (connections wait in the listeners' backlog), then calls
// Ready.
func Start(r Request) (*Process, error) {
	readR, readW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		readR.Close()
		readW.Close()
		return nil, err
	}
	defer devnull.Close()

	// ExtraFiles start at fd 3: the listeners, then the readiness pipe.
	extra := append(slices.Clip(r.Listeners), readW)
	args := []string{"supervise", "--sandbox", r.Sandbox, "--config", r.ConfigFile, "--status", r.StatusFile}
	if r.Cgroup != nil {
		for _, d := range r.Cgroup.Dirs {
			args = append(args, "--cgroup", d)
		}
	}
	args = append(args, "--ready-fd", strconv.Itoa(2+len(extra)))
	if r.ReadyOnStart {
		args = append(args, "--ready-on-start")
	}
	cmd := exec.Command(r.Binary, args...)
	cmd.Stdin, cmd.Stdout = devnull, devnull
	// Early failures (bad flags, unreadable policy) and the supervisor's
	// account of its workers go to the decision log's directory, as the
	// proxy's own stderr.
	errPath := r.LogFile + ".stderr"
	errLog, err := os.OpenFile(errPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		readR.Close()
		readW.Close()
		return nil, fmt.Errorf("proxy stderr log: %w", err)
	}
	defer errLog.Close()
	var errFrom int64
	if fi, err := errLog.Stat(); err == nil {
		errFrom = fi.Size()
	}
	cmd.Stderr = errLog
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// One P: a sandbox's proxy spends its time in splice and the
	// network stack, not in Go code, and with one P it wakes no second
	// thread per connection. Measured side by side (docs/benchmarks.md):
	// about 10% more new connections per second and 7% less CPU per
	// connection than with two, bulk throughput unchanged. The
	// supervisor passes its environment on to each worker.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=1"}
	if e := phasetrace.Env(); e != "" {
		cmd.Env = append(cmd.Env, e)
	}
	cmd.Env = append(cmd.Env, testhook.Env()...)
	err = cmd.Start()
	readW.Close()
	if err != nil {
		readR.Close()
		return nil, fmt.Errorf("start proxy %s: %w", r.Binary, err)
	}
	p := &Process{cmd: cmd, ready: AwaitReady(readR), exited: make(chan error, 1), errPath: errPath, errFrom: errFrom}
	go func() {
		if r.Cgroup != nil {
			// Move the supervisor into its cgroup from here, while it
			// is still starting up, rather than leave the move to it
			// alone: the kernel's wait on a move (an RCU grace period,
			// unless a move happened in the one before, see
			// cgroup.WarmMigration) then runs beside its start-up, and
			// its own Join, which it makes before it starts a worker
			// and which stays what places the worker, finds the move
			// done or waits for it to be. Errors are its Join's to
			// report. Before cmd.Wait: until the supervisor is reaped,
			// its pid cannot name another process.
			r.Cgroup.Join(cmd.Process.Pid)
		}
		// A long-lived caller (the CLI, tests) reaps the supervisor here;
		// once the caller exits, the supervisor belongs to no one and
		// runs on.
		p.exited <- cmd.Wait()
	}()
	return p, nil
}

// Pid is the supervisor's pid: it runs from the moment Start returns (its
// exec succeeded), ready or not.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Ready waits until the supervisor says ready, for at most timeout. A
// supervisor that exits first, says something else or nothing in time is
// an error quoting what it wrote to its stderr; the caller kills it.
func (p *Process) Ready(timeout time.Duration) error {
	select {
	case err := <-p.ready:
		if err != nil {
			return p.startError(fmt.Errorf("proxy %w", err))
		}
		return nil
	case err := <-p.exited:
		p.exited <- err
		return p.startError(fmt.Errorf("proxy exited before serving (%v)", err))
	case <-time.After(timeout):
		return fmt.Errorf("proxy not ready after %v", timeout)
	}
}

// ExitedWithin reports whether the supervisor exits within d, and if so
// why: for a supervisor that cannot be named, as one that failed at once.
func (p *Process) ExitedWithin(d time.Duration) (bool, error) {
	select {
	case werr := <-p.exited:
		p.exited <- werr
		return true, p.startError(fmt.Errorf("proxy exited before serving (%v)", werr))
	case <-time.After(d):
		return false, nil
	}
}

// Kill kills the supervisor and waits (up to 5 seconds) until it has
// exited. Its worker, if it started one, is the caller's to stop.
func (p *Process) Kill() {
	p.cmd.Process.Kill()
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(5 * time.Second):
	}
}

// startError is err, the reason the proxy did not get to serve, with what
// the proxy itself said on its way out (a bad flag, an unreadable file):
// the caller's error is often all an operator sees.
func (p *Process) startError(err error) error {
	f, ferr := os.Open(p.errPath)
	if ferr != nil {
		return fmt.Errorf("%w; see %s", err, p.errPath)
	}
	defer f.Close()
	var b strings.Builder
	io.Copy(&b, io.NewSectionReader(f, p.errFrom, maxStartError))
	said := strings.Join(strings.Fields(b.String()), " ")
	if said == "" {
		return fmt.Errorf("%w; see %s", err, p.errPath)
	}
	return fmt.Errorf("%w: %s (in %s)", err, said, p.errPath)
}
