package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/internal/filewatch"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/directlog"
	"github.com/doorman-net/doorman/proxy/launch"
)

// directLog logs the sandbox's allowDirect flows, which never reach the
// listeners, from conntrack, and follows a live change of the list: the
// sandbox rewrites the config file's allowDirect (sandbox.UpdateDirect),
// the worker logs the new destinations' flows from then on without a
// restart and says so in launch.DirectLoggedFile, which the sandbox
// waits for before its rules admit them. Failing to watch costs those
// lines, not the proxy.
type directLog struct {
	ctx        context.Context
	wg         *sync.WaitGroup
	cfg        launch.Config // the sandbox, its netns, the list in force
	configFile string        // where cfg was read from; "" for none
	ln         net.Listener  // the first listener: in the sandbox's netns
	logger     *slog.Logger
	stderr     io.Writer

	mu      sync.Mutex
	watcher *directlog.Watcher // nil when no entry can match
	stop    context.CancelFunc // ends watcher's Run
	// confirmed: launch.DirectLoggedFile holds the list in force. An
	// empty list at the start needs no file (a sandbox waits only for a
	// list that grew); a worker started with entries writes it from its
	// follower's first read, off the path to serving.
	confirmed bool
}

// startDirectLog opens the watcher of cfg's allowDirect flows, if it has
// any, and runs it until ctx is done. configFile, if not "", is the file
// cfg was read from.
func startDirectLog(ctx context.Context, wg *sync.WaitGroup, cfg launch.Config, configFile string, ln net.Listener, logger *slog.Logger, stderr io.Writer) *directLog {
	d := &directLog{ctx: ctx, wg: wg, cfg: cfg, configFile: configFile, ln: ln, logger: logger, stderr: stderr,
		confirmed: len(cfg.AllowDirect) == 0}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.open()
	return d
}

// File is the config file as a filewatch.File, its allowDirect read again
// when it changes; ok is false for a worker without a config file.
func (d *directLog) File() (f filewatch.File, ok bool) {
	return filewatch.File{Path: d.configFile, Changed: d.reload}, d.configFile != ""
}

// reload takes the allowDirect of the config file if it differs from the
// list in force, and confirms the list in force once a watcher follows it
// (or it is empty). A file that does not load keeps the list in force:
// the sandbox writes it atomically, so a file that fails is not one it
// wrote (the next Changed reads it again).
func (d *directLog) reload() {
	next, err := launch.Load(d.configFile)
	if err != nil || next.Sandbox != d.cfg.Sandbox {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !slices.Equal(next.AllowDirect, d.cfg.AllowDirect) {
		d.cfg.AllowDirect = next.AllowDirect
		d.confirmed = false
		if d.watcher == nil || !d.watcher.SetEntries(d.entries()) {
			// No socket yet, or nothing left to match: a new
			// watcher, or none.
			if d.stop != nil {
				d.stop()
				d.watcher, d.stop = nil, nil
			}
			d.open()
		}
	}
	if !d.confirmed && (d.watcher != nil || len(d.cfg.AllowDirect) == 0) {
		d.confirm()
	}
}

// entries are the config's allowDirect as entries.
func (d *directLog) entries() []conf.Entry {
	entries := make([]conf.Entry, len(d.cfg.AllowDirect))
	for i, dd := range d.cfg.AllowDirect {
		entries[i] = dd.Entry()
	}
	return entries
}

// open opens and runs a watcher for the list in force, when it has
// entries. d.mu is held.
func (d *directLog) open() {
	if len(d.cfg.AllowDirect) == 0 {
		return
	}
	w, err := d.openWatcher()
	if err != nil {
		d.logger.Error(decisionlog.MsgDirectNotLogged, decisionlog.SandboxKey, d.cfg.Sandbox, decisionlog.ErrKey, err.Error())
		fmt.Fprintf(d.stderr, "doorman proxy: %v\n", err)
		return
	}
	ctx, stop := context.WithCancel(d.ctx)
	d.watcher, d.stop = w, stop
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := w.Run(ctx); err != nil {
			d.logger.Error(decisionlog.MsgDirectNoLongerLogged, decisionlog.SandboxKey, d.cfg.Sandbox, decisionlog.ErrKey, err.Error())
		}
	}()
}

// confirm writes the list in force to launch.DirectLoggedFile. d.mu is
// held. Failing costs the sandbox a wait (it then goes on, with a note).
func (d *directLog) confirm() {
	if d.configFile == "" {
		return
	}
	err := launch.WriteDirectLogged(d.configFile, d.cfg.AllowDirect)
	if err != nil {
		fmt.Fprintf(d.stderr, "doorman proxy: %v\n", err)
	}
	d.confirmed = err == nil
}

// openWatcher opens the watcher of the allowDirect flows in the namespace
// cfg.NetNS or, if that is empty, the one the first listener was created
// in.
func (d *directLog) openWatcher() (*directlog.Watcher, error) {
	var nsFile *os.File
	var err error
	if d.cfg.NetNS != "" {
		nsFile, err = os.Open(d.cfg.NetNS)
	} else if sc, ok := d.ln.(syscall.Conn); ok {
		nsFile, err = directlog.NetNSOf(sc)
	} else {
		err = fmt.Errorf("listener %v has no file descriptor: give the netns", d.ln.Addr())
	}
	if err != nil {
		return nil, fmt.Errorf("allowDirect log: %w", err)
	}
	defer nsFile.Close()
	return directlog.Open(directlog.Config{Sandbox: d.cfg.Sandbox, Entries: d.entries(), NetNS: int(nsFile.Fd()), Logger: d.logger})
}
