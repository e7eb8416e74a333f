package cniinstall

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults of Installer's timing.
const (
	DefaultDebounce = 100 * time.Millisecond
	DefaultMaxDelay = 500 * time.Millisecond
	DefaultResync   = 30 * time.Second
)

// Watch makes a pass (see Install), then keeps doorman's entry in the
// primary configuration until ctx is done: every change in ConfDir (a
// rewrite or replacement of the primary file, a new file that becomes the
// primary, a removal) is followed, once the burst of events settles, by
// another pass, and so is every Resync interval without one. A pass that
// fails is logged and made again on the next event; a conf dir without a
// valid configuration is waited for. The log says when the node becomes
// as installed, and when a pass starts failing, once each time.
//
// When ctx is done Watch returns nil and leaves the entry where it is:
// pods must not start outside doorman while the installer restarts.
// It returns an error only when it cannot watch ConfDir (it is missing, or
// removed while watched).
func (in *Installer) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", in.ConfDir, err)
	}
	defer w.Close()
	// Watch first, pass second: a change between the two is an event.
	if err := w.Add(in.ConfDir); err != nil {
		return fmt.Errorf("watch %s: %w", in.ConfDir, err)
	}
	return in.watch(ctx, fsnotifySource{w}, func() error {
		_, err := in.Install()
		return err
	})
}

// watchSource is what Watch reacts to: the conf dir's events and the
// watch's errors (an overflow: events were lost). On the host it is an
// fsnotify watch of ConfDir; the package's tests hand a fake.
type watchSource interface {
	Events() <-chan fsnotify.Event
	Errors() <-chan error
}

// fsnotifySource is an fsnotify watch as a watchSource.
type fsnotifySource struct{ w *fsnotify.Watcher }

func (s fsnotifySource) Events() <-chan fsnotify.Event { return s.w.Events }
func (s fsnotifySource) Errors() <-chan error          { return s.w.Errors }

// debouncer says when the pass after a burst of events is due: debounce
// after the latest event, and no later than maxDelay after the first.
type debouncer struct {
	debounce, maxDelay time.Duration
	burst              time.Time // when the pending burst began; zero when none
}

// event records an event at now and returns how long until the pass.
func (d *debouncer) event(now time.Time) time.Duration {
	if d.burst.IsZero() {
		d.burst = now
	}
	wait := d.debounce
	if left := d.burst.Add(d.maxDelay).Sub(now); left < wait {
		wait = max(left, 0)
	}
	return wait
}

// pending reports whether a burst waits for its pass.
func (d *debouncer) pending() bool { return !d.burst.IsZero() }

// done ends the burst: its pass is being made.
func (d *debouncer) done() { d.burst = time.Time{} }

// watch is Watch's loop on src: install makes a pass (Install on the
// host).
func (in *Installer) watch(ctx context.Context, src watchSource, install func() error) error {
	debounce, maxDelay, resync := in.Debounce, in.MaxDelay, in.Resync
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	if resync <= 0 {
		resync = DefaultResync
	}

	lastProblem := "(not yet)"
	pass := func() (again bool) {
		err := install()
		problem := ""
		if err != nil {
			problem = err.Error()
		}
		if problem != lastProblem && in.Log != nil {
			switch {
			case err == nil:
				in.Log.Info("ready", "file", in.lastPrimary, "reason", "doorman's entry is in the primary network configuration")
			case errors.Is(err, ErrNoPrimary):
				in.Log.Warn("waiting", "dir", in.ConfDir, "reason", "no valid network configuration yet: doorman's entry goes in when the primary CNI writes one", "error", problem)
			default:
				in.Log.Error("failed", "dir", in.ConfDir, "error", problem)
			}
		}
		lastProblem = problem
		return errors.Is(err, errChanged)
	}

	timer := time.NewTimer(0)
	if !timer.Stop() {
		<-timer.C
	}
	burst := debouncer{debounce: debounce, maxDelay: maxDelay}
	schedule := func() { timer.Reset(burst.event(time.Now())) }
	tick := time.NewTicker(resync)
	defer tick.Stop()

	if pass() {
		schedule()
	}
	for {
		select {
		case <-ctx.Done():
			if in.Log != nil {
				in.Log.Info("stopping", "dir", in.ConfDir, "reason", "doorman's entry stays in place (uninstall with --uninstall)")
			}
			return nil
		case ev, ok := <-src.Events():
			if !ok {
				return errors.New("the watch of the conf dir ended")
			}
			if ev.Name == in.ConfDir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				return fmt.Errorf("%s was removed", in.ConfDir)
			}
			if isTempFile(ev.Name) {
				continue
			}
			schedule()
		case err, ok := <-src.Errors():
			if !ok {
				return errors.New("the watch of the conf dir ended")
			}
			// An overflow means events were lost: look again.
			if in.Log != nil {
				in.Log.Warn("watch", "dir", in.ConfDir, "error", err.Error())
			}
			schedule()
		case <-timer.C:
			burst.done()
			if pass() {
				schedule()
			}
		case <-tick.C:
			if !burst.pending() && pass() {
				schedule()
			}
		}
	}
}
