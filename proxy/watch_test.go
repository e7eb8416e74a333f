package proxy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/doorman-net/doorman/internal/filewatch"
)

// waitAllows waits up to within for the proxy's policy to admit (or, with
// want false, not admit) name on port 443, and fails the test otherwise.
func waitAllows(t *testing.T, p *Proxy, name string, want bool, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, ok := p.Policy().MatchName(name, 443)
		if ok == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, policy admits %s: %v, want %v (policy %s)", within, name, ok, want, p.Policy())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchedEnv writes content to the policy file, starts a test proxy and a
// PolicyWatcher that keeps it in line with the file, and returns the
// proxy's environment. The watcher stops with the test.
func watchedEnv(t *testing.T, file, content string) *testEnv {
	t.Helper()
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, nil, Config{})
	w, err := NewPolicyWatcher(e.p, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithCancel()
	t.Cleanup(cancel)
	go w.Run(ctx)
	return e
}

// TestWatcherFollowsEdits checks that edits reach the proxy within the
// one-second promise through inotify alone: the safety poll is several
// seconds apart.
func TestWatcherFollowsEdits(t *testing.T) {
	if filewatch.DefaultCheck <= 2*time.Second {
		t.Fatalf("filewatch.DefaultCheck %v: this test needs it above 2 s to show the watch works", filewatch.DefaultCheck)
	}
	file := filepath.Join(t.TempDir(), "policy")
	e := watchedEnv(t, file, "a.test\n")

	writeAtomic(t, file, "b.test\n") // replaced by rename, as doorman allow does
	waitAllows(t, e.p, "b.test", true, time.Second)
	waitAllows(t, e.p, "a.test", false, 0)

	if err := os.WriteFile(file, []byte("c.test\n"), 0o644); err != nil { // written in place
		t.Fatal(err)
	}
	waitAllows(t, e.p, "c.test", true, time.Second)
}

// TestWatcherDirectoryReplaced removes the watched directory: the proxy
// denies everything while the file is gone, then polls, and follows the
// file once a new directory holds it.
func TestWatcherDirectoryReplaced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sbx")
	os.Mkdir(dir, 0o755)
	file := filepath.Join(dir, "policy")
	e := watchedEnv(t, file, "a.test\n")

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitAllows(t, e.p, "a.test", false, time.Second)
	os.Mkdir(dir, 0o755)
	writeAtomic(t, file, "b.test\n")
	waitAllows(t, e.p, "b.test", true, time.Second)
}
