package proxy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/internal/filewatch"
	"github.com/doorman-net/doorman/proxy/decisionlog"
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
// replace the file by rename, so the directory is watched, not the inode
// (see package internal/filewatch). A process that follows other files
// too gives Follower's files to one filewatch.Follower instead. Without
// an inotify instance or a watch it polls, and logs why.
func (w *PolicyWatcher) Run(ctx context.Context) {
	w.Follower().Run(ctx)
}

// Follower follows the policy file alone; add files to its Files to follow
// them with the same inotify instance.
func (w *PolicyWatcher) Follower() filewatch.Follower {
	return filewatch.Follower{
		Files: []filewatch.File{{Path: w.path, Changed: func() { w.reload() }}},
		Unwatched: func(path string, err error) {
			w.logger.Warn(decisionlog.MsgPolicyUnwatched, decisionlog.PathKey, path, decisionlog.ErrKey, err.Error())
		},
		Lost: func(err error) {
			w.logger.Warn(decisionlog.MsgPolicyWatch, decisionlog.PathKey, w.path, decisionlog.ErrKey, err.Error())
		},
	}
}
