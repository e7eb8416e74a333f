package launch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/doorman-net/doorman/cgroup"
)

// ErrUsage is the error of a command line that is not what Start or a
// user would write: its usage has been printed.
var ErrUsage = errors.New("usage")

// Supervised is what a supervisor was handed by Start.
type Supervised struct {
	// Config is the proxy's config, read and checked; ConfigFile is
	// where it is, for each worker to read.
	Config     Config
	ConfigFile string
	// StatusFile is where to keep the supervisor's status ("" none).
	StatusFile string
	// Cgroup, if set, is to be joined before any worker starts.
	Cgroup *cgroup.Group
	// Listeners are the inherited listeners, 3, 4, ..., close-on-exec:
	// each worker gets them as its own 3, 4, ... (see Worker).
	Listeners []*os.File
	// Ready says ready to whoever started the supervisor; nil if it
	// reads no readiness.
	Ready func()
	// ReadyOnStart says ready once the first worker has started.
	ReadyOnStart bool
}

// Supervise reads a supervisor's command line (`doorman supervise
// --config FILE [--sandbox ID] [--status FILE] [--cgroup DIR]...
// [--ready-fd N [--ready-on-start]]`, args without the verb), loads and
// checks the config, and takes the listeners it inherited, which must be
// 3, 4, ... in a row, followed by the readiness pipe. It fails, too, if
// the decision log cannot be opened to append, as every worker opens it
// first thing: a supervisor that says ready before its first worker serves
// must not have read a config that no worker can serve. A command line
// that does not parse is ErrUsage, its usage printed to usage.
func Supervise(args []string, usage io.Writer) (*Supervised, error) {
	fs := flag.NewFlagSet("doorman supervise", flag.ContinueOnError)
	fs.SetOutput(usage)
	var (
		sandbox, config, status string
		cgroupDirs              listFlag
		readyFD                 int
		readyOnStart            bool
	)
	fs.StringVar(&sandbox, "sandbox", "", "sandbox id (must be the config's; for ps)")
	fs.StringVar(&config, "config", "", "the proxy's config `file` (required): each worker runs `doorman proxy --config FILE`, with the inherited descriptors it lists")
	fs.StringVar(&status, "status", "", "status `file` to keep (JSON): the worker serving, restarts, how the last one ended")
	fs.Var(&cgroupDirs, "cgroup", "cgroup `dir` to join before any worker starts (repeatable: one per hierarchy)")
	fs.IntVar(&readyFD, "ready-fd", -1, "file descriptor to write \"ready\\n\" to (then close) once the first worker serves")
	fs.BoolVar(&readyOnStart, "ready-on-start", false, "say ready once the first worker has started, before it serves; a first worker that does not serve is then replaced like a later one")
	fs.Usage = func() {
		fmt.Fprintln(usage, "usage: doorman supervise --config FILE [--sandbox ID] [--status FILE] [--cgroup DIR]... [--ready-fd N [--ready-on-start]]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, ErrUsage
	}
	if config == "" || fs.NArg() != 0 {
		fs.Usage()
		return nil, ErrUsage
	}
	cfg, err := loadFor(config, sandbox)
	if err != nil {
		return nil, err
	}
	files, err := inheritListeners(cfg.Listeners, readyFD)
	if err != nil {
		return nil, err
	}
	if err := checkDecisionLog(cfg.LogFile); err != nil {
		return nil, err
	}
	s := &Supervised{Config: cfg, ConfigFile: config, StatusFile: status, Listeners: files,
		Ready: readySignal(readyFD), ReadyOnStart: readyOnStart}
	if len(cgroupDirs) > 0 {
		s.Cgroup = &cgroup.Group{Dirs: cgroupDirs}
	}
	return s, nil
}

// inheritListeners are the descriptors l's listeners are, which every
// worker inherits at the same numbers: they must be 3, 4, ... in a row,
// and readyFD, if any, follows them. None of them passes to a worker but
// as one of these (close-on-exec).
func inheritListeners(l Listeners, readyFD int) ([]*os.File, error) {
	if len(l.Addrs) > 0 {
		return nil, fmt.Errorf("listeners.addrs: a supervised proxy serves inherited descriptors only")
	}
	fds := l.fds()
	seen := map[int]bool{}
	for _, fd := range fds {
		if fd < 3 || fd >= 3+len(fds) || seen[fd] {
			return nil, fmt.Errorf("listeners: descriptors %v are not 3 to %d, each once", fds, 2+len(fds))
		}
		seen[fd] = true
	}
	if readyFD >= 0 && readyFD != 3+len(fds) {
		return nil, fmt.Errorf("--ready-fd %d: want %d, after the listeners", readyFD, 3+len(fds))
	}
	files := make([]*os.File, len(fds))
	for i := range files {
		fd := 3 + i
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return nil, fmt.Errorf("listener descriptor %d: %w", fd, err)
		}
		syscall.CloseOnExec(fd)
		files[i] = os.NewFile(uintptr(fd), fmt.Sprintf("listener-%d", fd))
	}
	if readyFD >= 0 {
		syscall.CloseOnExec(readyFD)
	}
	return files, nil
}

// fds are the descriptors of l, in the order they are inherited.
func (l Listeners) fds() []int {
	return append(append(append([]int(nil), l.TCP...), l.DNSUDP...), l.DNSTCP...)
}

// checkDecisionLog fails if the decision log at path ("" or "-" for
// stderr) cannot be opened to append.
func checkDecisionLog(path string) error {
	if path == "" || path == "-" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	return f.Close()
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
