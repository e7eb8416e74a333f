package cniinstall

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// The watch loop's reactions, driven through a fake event source and a
// fake pass: no inotify, no conf dir, no root. The tests in watch_test.go
// run the same loop on a real conf dir.

// fakeSource is a watchSource a test sends events and errors into.
type fakeSource struct {
	events chan fsnotify.Event
	errs   chan error
}

func newFakeSource() *fakeSource {
	return &fakeSource{events: make(chan fsnotify.Event), errs: make(chan error)}
}

func (s *fakeSource) Events() <-chan fsnotify.Event { return s.events }
func (s *fakeSource) Errors() <-chan error          { return s.errs }

// fakePasses counts the passes the loop makes and answers each with the
// next of results (then nil).
type fakePasses struct {
	mu      sync.Mutex
	n       int
	results []error
}

func (p *fakePasses) pass() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if len(p.results) == 0 {
		return nil
	}
	err := p.results[0]
	p.results = p.results[1:]
	return err
}

func (p *fakePasses) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// waitPasses waits until p has made n passes, failing t after a second.
func (p *fakePasses) waitPasses(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for p.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d passes, want %d", p.count(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// loop is a watch loop of an Installer on /conf that a test runs: how to
// stop it, what it returned, and its log.
type loop struct {
	cancel context.CancelFunc
	done   chan error
	log    *bytes.Buffer
	mu     *sync.Mutex
}

// startLoop runs the watch loop on src with p's passes until the test
// ends.
func startLoop(t *testing.T, src watchSource, p *fakePasses, resync time.Duration) *loop {
	t.Helper()
	l := &loop{done: make(chan error, 1), log: &bytes.Buffer{}, mu: &sync.Mutex{}}
	in := &Installer{ConfDir: "/conf", Debounce: 20 * time.Millisecond, MaxDelay: 60 * time.Millisecond, Resync: resync,
		Log: slog.New(slog.NewTextHandler(lockedWriter{l.mu, l.log}, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go func() { l.done <- in.watch(ctx, src, p.pass) }()
	t.Cleanup(func() { cancel(); <-l.done })
	return l
}

// logged is the loop's log so far.
func (l *loop) logged() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.log.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

// A burst of events makes one pass once it settles; doorman's own
// temporary files make none.
func TestWatchLoopDebouncesBursts(t *testing.T) {
	src, p := newFakeSource(), &fakePasses{}
	startLoop(t, src, p, time.Hour)
	p.waitPasses(t, 1) // the first pass, before any event
	for range 5 {
		src.events <- fsnotify.Event{Name: "/conf/10-net.conflist", Op: fsnotify.Write}
	}
	p.waitPasses(t, 2)
	src.events <- fsnotify.Event{Name: "/conf/.10-net.conflist.doorman-tmp-1", Op: fsnotify.Create}
	time.Sleep(100 * time.Millisecond)
	if n := p.count(); n != 2 {
		t.Errorf("%d passes, want 2: one for the burst, none for doorman's temporary file", n)
	}
}

// A burst that never settles still gets its pass, MaxDelay after it began.
func TestWatchLoopMaxDelay(t *testing.T) {
	src, p := newFakeSource(), &fakePasses{}
	startLoop(t, src, p, time.Hour)
	p.waitPasses(t, 1)
	start := time.Now()
	for time.Since(start) < 150*time.Millisecond {
		src.events <- fsnotify.Event{Name: "/conf/10-net.conflist", Op: fsnotify.Write}
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.count(); n < 2 {
		t.Errorf("%d passes during a burst of 150ms, want one at least every MaxDelay (60ms)", n)
	}
}

// The debouncer's schedule: Debounce after each event, never later than
// MaxDelay after the burst's first.
func TestDebouncer(t *testing.T) {
	d := debouncer{debounce: 100 * time.Millisecond, maxDelay: 500 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		at   time.Duration
		want time.Duration
	}{{0, 100 * time.Millisecond}, {80 * time.Millisecond, 100 * time.Millisecond}, {450 * time.Millisecond, 50 * time.Millisecond}, {600 * time.Millisecond, 0}} {
		if got := d.event(t0.Add(tc.at)); got != tc.want {
			t.Errorf("event at +%v: pass in %v, want %v", tc.at, got, tc.want)
		}
	}
	if !d.pending() {
		t.Error("not pending after events")
	}
	d.done()
	if d.pending() {
		t.Error("pending after done")
	}
	if got := d.event(t0.Add(time.Second)); got != 100*time.Millisecond {
		t.Errorf("first event of a new burst: pass in %v, want the debounce", got)
	}
}

// A pass that lost a race with another writer (errChanged) is made again
// without waiting for an event.
func TestWatchLoopPassAgainAfterRace(t *testing.T) {
	src, p := newFakeSource(), &fakePasses{results: []error{errChanged, errChanged}}
	startLoop(t, src, p, time.Hour)
	p.waitPasses(t, 3)
}

// Lost events (an overflow) make a pass, and say so.
func TestWatchLoopOverflow(t *testing.T) {
	src, p := newFakeSource(), &fakePasses{}
	l := startLoop(t, src, p, time.Hour)
	p.waitPasses(t, 1)
	src.errs <- fsnotify.ErrEventOverflow
	p.waitPasses(t, 2)
	if !strings.Contains(l.logged(), "queue or buffer overflow") {
		t.Errorf("log %q: want the overflow", l.logged())
	}
}

// The resync makes a pass with no event, and each problem is logged once
// until it changes.
func TestWatchLoopResyncLogsOnce(t *testing.T) {
	broken := errors.New("broken file")
	src, p := newFakeSource(), &fakePasses{results: []error{ErrNoPrimary, ErrNoPrimary, broken, broken, broken}}
	l := startLoop(t, src, p, 10*time.Millisecond)
	p.waitPasses(t, 7)
	log := l.logged()
	for what, want := range map[string]int{"msg=waiting": 1, "msg=failed": 1, "msg=ready": 1} {
		if got := strings.Count(log, what); got != want {
			t.Errorf("%s logged %d times, want %d:\n%s", what, got, want, log)
		}
	}
	if strings.Index(log, "msg=waiting") > strings.Index(log, "msg=failed") || strings.Index(log, "msg=failed") > strings.Index(log, "msg=ready") {
		t.Errorf("log out of order:\n%s", log)
	}
}

// Stopping leaves the entry (no pass, no uninstall) and returns nil; the
// conf dir's removal, or the end of the watch, is an error.
func TestWatchLoopEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(l *loop, src *fakeSource)
		want string
	}{
		{"cancelled", func(l *loop, _ *fakeSource) { l.cancel() }, ""},
		{"conf dir removed", func(_ *loop, src *fakeSource) {
			src.events <- fsnotify.Event{Name: "/conf", Op: fsnotify.Remove}
		}, "/conf was removed"},
		{"conf dir renamed", func(_ *loop, src *fakeSource) {
			src.events <- fsnotify.Event{Name: "/conf", Op: fsnotify.Rename}
		}, "/conf was removed"},
		{"events closed", func(_ *loop, src *fakeSource) { close(src.events) }, "watch of the conf dir ended"},
		{"errors closed", func(_ *loop, src *fakeSource) { close(src.errs) }, "watch of the conf dir ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, p := newFakeSource(), &fakePasses{}
			l := &loop{done: make(chan error, 1), log: &bytes.Buffer{}, mu: &sync.Mutex{}}
			in := &Installer{ConfDir: "/conf", Resync: time.Hour, Log: slog.New(slog.NewTextHandler(lockedWriter{l.mu, l.log}, nil))}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l.cancel = cancel
			go func() { l.done <- in.watch(ctx, src, p.pass) }()
			p.waitPasses(t, 1)
			tc.end(l, src)
			var err error
			select {
			case err = <-l.done:
			case <-time.After(time.Second):
				t.Fatal("the loop did not end")
			}
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("watch: %v, want %q", err, tc.want)
			}
			if tc.want == "" && !strings.Contains(l.logged(), "msg=stopping") {
				t.Errorf("log %q: want the stop, entry left in place", l.logged())
			}
			if n := p.count(); n != 1 {
				t.Errorf("%d passes, want only the first", n)
			}
		})
	}
}
