package k8scluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// shared is the cluster of the test binary (Shared), started by the first
// test that asks for it and stopped by StopShared.
var shared struct {
	mu   sync.Mutex
	life *lifetime
	c    *Cluster
	skip string // why the cluster cannot run here: later tests skip too
	err  string // why it did not start: later tests fail at once
}

// Shared returns the test binary's cluster, starting it (Start with
// default Options) for the first test that asks. Starting a cluster costs
// tens of seconds, so tests share it; each keeps its objects in namespaces
// of its own (Namespace) and its hosts under names of its own (AddHost).
// Tests using it must not run in parallel (t.Parallel): for as long as a
// test runs, the cluster reports its failures (a component that dies, a
// testnet host's error) to that test, and a failed test gets the tail of
// every component's log. A cluster that failed to start fails every later
// test at once; one that cannot run here (no root, binaries missing)
// skips them.
//
// The cluster outlives the test that started it: TestMain must call
// StopShared after m.Run.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	switch {
	case shared.skip != "":
		t.Skip(shared.skip)
	case shared.err != "":
		t.Fatal(shared.err)
	}
	if shared.c == nil {
		l := newLifetime(t)
		shared.life = l
		ok := false
		// Also runs when Start ends t with FailNow or SkipNow.
		defer func() {
			if ok {
				return
			}
			if msg := l.skipReason(); msg != "" {
				shared.skip = msg
			} else {
				shared.err = "k8scluster: the shared cluster failed to start in " + t.Name() + " (see its log)"
			}
			l.setCurrent(nil)
			l.runCleanups()
			shared.life = nil
		}()
		c := Start(l, Options{})
		ok = true
		shared.c = c
		t.Logf("k8scluster: shared %v: node Ready in %v", c, c.ReadyIn().Round(time.Millisecond))
	}
	l := shared.life
	l.setCurrent(t)
	c := shared.c
	t.Cleanup(func() {
		if t.Failed() {
			c.DumpLogs(t)
		}
		l.setCurrent(nil)
	})
	return c
}

// StopShared stops the shared cluster, if a test started one, and returns
// the errors its teardown met (or that it met while no test was running).
// Call it from TestMain after m.Run.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	l := shared.life
	if l == nil {
		return nil
	}
	l.setCurrent(nil)
	l.runCleanups()
	shared.c, shared.life = nil, nil
	if errs := l.errors(); len(errs) > 0 {
		return fmt.Errorf("k8scluster: the shared cluster:\n%s", strings.Join(errs, "\n"))
	}
	return nil
}

// lifetime is the testing.TB a shared cluster lives under, outliving any
// one test: its Cleanup functions run at StopShared (or at once, should
// the start fail); its reports (Log, Error, Fatal, Skip) go to the test
// using the cluster at the time, else to stderr, the errors kept for
// StopShared. Its Context ends when its cleanups start. Setenv and Chdir,
// which would change the whole process for good, panic.
type lifetime struct {
	testing.TB // nil: a method not written here panics

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cur      testing.TB
	cleanups []func()
	errs     []string
	skip     string
}

// abort is what FailNow panics with when no test is running (during
// StopShared); runCleanups recovers it.
type abort struct{}

func newLifetime(t testing.TB) *lifetime {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifetime{ctx: ctx, cancel: cancel, cur: t}
}

func (l *lifetime) setCurrent(t testing.TB) {
	l.mu.Lock()
	l.cur = t
	l.mu.Unlock()
}

func (l *lifetime) current() testing.TB {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// runCleanups runs the cleanups, last registered first; a cleanup may
// register more.
func (l *lifetime) runCleanups() {
	l.cancel()
	for {
		l.mu.Lock()
		if len(l.cleanups) == 0 {
			l.mu.Unlock()
			return
		}
		f := l.cleanups[len(l.cleanups)-1]
		l.cleanups = l.cleanups[:len(l.cleanups)-1]
		l.mu.Unlock()
		func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(abort); !ok {
						panic(r)
					}
				}
			}()
			f()
		}()
	}
}

func (l *lifetime) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

func (l *lifetime) skipReason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.skip
}

func (l *lifetime) Helper() {}

func (l *lifetime) Name() string { return "k8scluster.Shared" }

func (l *lifetime) Context() context.Context { return l.ctx }

func (l *lifetime) Cleanup(f func()) {
	l.mu.Lock()
	l.cleanups = append(l.cleanups, f)
	l.mu.Unlock()
}

func (l *lifetime) TempDir() string {
	dir, err := os.MkdirTemp("", "dm-k8s-tmp-")
	if err != nil {
		l.Fatalf("TempDir: %v", err)
	}
	l.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (l *lifetime) ArtifactDir() string { return l.TempDir() }

func (l *lifetime) Output() io.Writer {
	if t := l.current(); t != nil {
		return t.Output()
	}
	return os.Stderr
}

func (l *lifetime) Attr(key, value string) {
	if t := l.current(); t != nil {
		t.Attr(key, value)
	}
}

func (l *lifetime) Log(args ...any) { l.Logf("%s", fmt.Sprintln(args...)) }

func (l *lifetime) Logf(format string, args ...any) {
	if t := l.current(); t != nil {
		t.Helper()
		t.Logf(format, args...)
		return
	}
	fmt.Fprintf(os.Stderr, "k8scluster (shared): "+format+"\n", args...)
}

func (l *lifetime) Error(args ...any) { l.Errorf("%s", fmt.Sprintln(args...)) }

func (l *lifetime) Errorf(format string, args ...any) {
	if t := l.current(); t != nil {
		t.Helper()
		t.Errorf(format, args...)
		return
	}
	msg := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.errs = append(l.errs, msg)
	l.mu.Unlock()
	fmt.Fprintf(os.Stderr, "k8scluster (shared): error: %s\n", msg)
}

func (l *lifetime) Fail() {
	if t := l.current(); t != nil {
		t.Fail()
		return
	}
	l.Errorf("failed")
}

func (l *lifetime) Failed() bool {
	if t := l.current(); t != nil && t.Failed() {
		return true
	}
	return len(l.errors()) > 0
}

func (l *lifetime) FailNow() {
	if t := l.current(); t != nil {
		t.FailNow()
	}
	panic(abort{})
}

func (l *lifetime) Fatal(args ...any) { l.Error(args...); l.FailNow() }

func (l *lifetime) Fatalf(format string, args ...any) { l.Errorf(format, args...); l.FailNow() }

func (l *lifetime) Skip(args ...any) { l.Skipf("%s", fmt.Sprint(args...)) }

func (l *lifetime) Skipf(format string, args ...any) {
	l.mu.Lock()
	l.skip = fmt.Sprintf(format, args...)
	l.mu.Unlock()
	if t := l.current(); t != nil {
		t.Skipf(format, args...)
	}
	panic(abort{})
}

func (l *lifetime) SkipNow() { l.Skipf("skipped") }

func (l *lifetime) Skipped() bool { return l.skipReason() != "" }

func (l *lifetime) Setenv(key, value string) {
	panic(errors.New("k8scluster: Setenv on a shared cluster's lifetime"))
}

func (l *lifetime) Chdir(dir string) {
	panic(errors.New("k8scluster: Chdir on a shared cluster's lifetime"))
}
