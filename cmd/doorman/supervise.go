package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/proxy/proxyconf"
	"github.com/doorman-net/doorman/proxy/supervise"
)

// runSupervise is `doorman supervise`: the parent of one sandbox's proxy,
// which holds its listeners and starts a new `doorman proxy` whenever
// the running one dies (see package supervise).
func runSupervise(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman supervise", flag.ContinueOnError)
	fs.SetOutput(stderr)
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
		fmt.Fprintln(stderr, "usage: doorman supervise --config FILE [--sandbox ID] [--status FILE] [--cgroup DIR]... [--ready-fd N [--ready-on-start]]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "doorman supervise: %v\n", err)
		return 1
	}
	if config == "" || fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	cfg, err := proxyconf.Load(config)
	if err != nil {
		return fail(err)
	}
	if sandbox != "" && sandbox != cfg.Sandbox {
		return fail(fmt.Errorf("--sandbox %q: %s is the config of sandbox %q", sandbox, config, cfg.Sandbox))
	}
	files, err := inheritedListeners(cfg.Listeners, readyFD)
	if err != nil {
		return fail(err)
	}
	if err := checkDecisionLog(cfg.LogFile); err != nil {
		return fail(err)
	}
	phasetrace.Mark("sup.config")
	sc := supervise.Config{
		Sandbox: cfg.Sandbox,
		// The running binary, even once an upgrade has replaced the file
		// it was started from: a worker of another release might not
		// read this release's config file.
		Path:        "/proc/self/exe",
		Args:        []string{os.Args[0], "proxy", "--sandbox", cfg.Sandbox, "--config", config},
		Env:         os.Environ(),
		Files:       files,
		Stderr:      os.Stderr,
		StatusFile:  status,
		StopTimeout: cfg.DrainTimeout.Or(proxyconf.DefaultDrainTimeout) + supervise.DefaultStopTimeout/2,
		// A worker that answers no heartbeat this long is replaced.
		HeartbeatTimeout: cfg.Limits.Effective(0).HeartbeatTimeout,
		Ready:            readySignal(readyFD),
		// A worker that runs is one the sandbox's ruleset already
		// sends connections to: they wait in the backlog until it
		// serves (see package supervise).
		ReadyOnStart: readyOnStart,
	}
	if len(cgroupDirs) > 0 {
		sc.Cgroup = &cgroup.Group{Dirs: cgroupDirs}
	}
	if err := supervise.Run(context.Background(), sc); err != nil {
		return fail(err)
	}
	return 0
}

// inheritedListeners are the descriptors cfg's listeners are, which
// every worker inherits at the same numbers: they must be 3, 4, ... in a
// row, and readyFD, if any, follows them. None of them passes to a worker
// but as one of these (close-on-exec).
func inheritedListeners(l proxyconf.Listeners, readyFD int) ([]*os.File, error) {
	if len(l.Addrs) > 0 {
		return nil, fmt.Errorf("listeners.addrs: a supervised proxy serves inherited descriptors only")
	}
	fds := append(append(append([]int(nil), l.TCP...), l.DNSUDP...), l.DNSTCP...)
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

// checkDecisionLog fails if the decision log at path ("" or "-" for
// stderr) cannot be opened to append, as every worker opens it first
// thing: a supervisor that says ready before its first worker serves
// (--ready-on-start) must not have read a config that no worker can
// serve.
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
