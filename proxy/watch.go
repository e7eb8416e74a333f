package proxy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// How often the policy file is read without an inotify event. Without a
// watch (a filesystem without inotify, the directory replaced) polling is
// all there is, and pollInterval keeps the one-second promise. With one,
// events carry every change and a lost event is reported (queue
// overflow, which triggers a read at once), so the poll is only a safety
// net: checkInterval. An idle proxy then wakes every few seconds instead
// of twice a second, and a host runs one per sandbox.
const (
	pollInterval  = 500 * time.Millisecond
	checkInterval = 5 * time.Second
)

// PolicyWatcher keeps a proxy's policy in line with a policy file in the
// plain allowlist form (see conf.ParseFile). A file that cannot be read or
// parsed puts the proxy in deny-all, never back on an older, wider policy.
type PolicyWatcher struct {
	path   string
	proxy  *Proxy
	logger *slog.Logger
	last   []byte
	failed bool

	mu     sync.Mutex
	others []PolicySetter
}

// PolicySetter is anything else that enforces the same policy file as the
// proxy (the DNS filter).
type PolicySetter interface {
	SetPolicy(*conf.Policy)
}

// Also makes t follow the policy file too, starting with the policy in
// force now.
func (w *PolicyWatcher) Also(t PolicySetter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.others = append(w.others, t)
	t.SetPolicy(w.proxy.Policy())
}

// set puts pol in force everywhere.
func (w *PolicyWatcher) set(pol *conf.Policy) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.proxy.SetPolicy(pol)
	for _, t := range w.others {
		t.SetPolicy(pol)
	}
}

// NewPolicyWatcher loads path into p now and returns a watcher for Run. The
// returned error reports a file that did not load; p is then in deny-all.
func NewPolicyWatcher(p *Proxy, path string, logger *slog.Logger) (*PolicyWatcher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &PolicyWatcher{path: path, proxy: p, logger: logger}
	return w, w.reload()
}

// reload reads the file and applies it if it changed.
func (w *PolicyWatcher) reload() error {
	data, err := os.ReadFile(w.path)
	if err == nil && !w.failed && w.last != nil && bytes.Equal(data, w.last) {
		return nil
	}
	var pol *conf.Policy
	if err == nil {
		pol, err = conf.ParseFile(data)
	}
	if err == nil {
		// An injection whose secret cannot be read is refused with the
		// policy that asks for it: nothing half-applied.
		err = pol.CheckSecrets()
	}
	if err != nil {
		err = fmt.Errorf("policy file %s: %w", w.path, err)
		if !w.failed {
			decisionlog.PolicyLoad{Sandbox: w.proxy.sandbox, Path: w.path, Err: err}.Log(context.Background(), w.logger)
		}
		w.failed, w.last = true, nil
		w.set(conf.DenyAll())
		return err
	}
	w.failed, w.last = false, data
	w.set(pol)
	decisionlog.PolicyLoad{Sandbox: w.proxy.sandbox, Path: w.path, Mode: string(pol.Mode), Entries: len(pol.Entries)}.Log(context.Background(), w.logger)
	return nil
}

// Run watches the file until ctx is done. Editors and `doorman allow`
// replace the file by rename, so the directory is watched, not the inode.
func (w *PolicyWatcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch policy file: %w", err)
	}
	defer fw.Close()
	dir := filepath.Dir(w.path)
	interval := checkInterval
	if err := fw.Add(dir); err != nil {
		w.logger.Warn(decisionlog.MsgPolicyUnwatched, decisionlog.PathKey, w.path, decisionlog.ErrKey, err.Error())
		interval = pollInterval
	}
	// An edit between the load in NewPolicyWatcher and the watch above
	// raised no event: read the file once more now.
	w.reload()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	base := filepath.Base(w.path)
	events, errs := fw.Events, fw.Errors
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				// The watcher gave up: poll from here on.
				events = nil
				tick.Reset(pollInterval)
				continue
			}
			if filepath.Base(ev.Name) == base {
				w.reload()
			}
			if filepath.Clean(ev.Name) == filepath.Clean(dir) && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The directory itself went: its watch with it.
				tick.Reset(pollInterval)
				w.reload()
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				tick.Reset(pollInterval)
				continue
			}
			// A lost event (queue overflow) or a broken watch: the file
			// is read now and, from here on, polled.
			w.logger.Warn(decisionlog.MsgPolicyWatch, decisionlog.PathKey, w.path, decisionlog.ErrKey, err.Error())
			tick.Reset(pollInterval)
			w.reload()
		case <-tick.C:
			w.reload()
		}
	}
}
