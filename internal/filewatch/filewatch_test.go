package filewatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// One Follower follows two files in two directories: a file replaced by
// rename calls its own Changed and not the other's (beyond the start's
// and the ticks', which the test keeps out of the way with a long Check).
func TestFollowerTwoFiles(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := filepath.Join(dirA, "a"), filepath.Join(dirB, "b")
	var na, nb atomic.Int32
	f := Follower{
		Files: []File{{Path: a, Changed: func() { na.Add(1) }}, {Path: b, Changed: func() { nb.Add(1) }}},
		Check: time.Hour,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	defer func() {
		cancel()
		<-done
	}()
	wait := func(n *atomic.Int32, want int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); n.Load() < want; {
			if time.Now().After(deadline) {
				t.Fatalf("Changed called %d times, want %d", n.Load(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(&na, 1) // the read once the watch is in place
	wait(&nb, 1)
	replace := func(path string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	replace(a)
	wait(&na, 2)
	if got := nb.Load(); got != 1 {
		t.Errorf("b's Changed called %d times after a changed, want 1", got)
	}
	replace(b)
	wait(&nb, 2)
}

// A host with hundreds of sandboxes runs out of inotify instances
// (fs.inotify.max_user_instances, 128 by default, counts every proxy of
// the user): a Follower that cannot make one says so for each file and
// polls, so that a live edit still reaches the proxy. It does not return,
// which left the policy file unread for the proxy's whole life.
func TestFollowerWithoutInotify(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy")
	var n atomic.Int32
	var unwatched []string
	f := Follower{
		Files:     []File{{Path: path, Changed: func() { n.Add(1) }}},
		Unwatched: func(p string, err error) { unwatched = append(unwatched, p+": "+err.Error()) },
		Poll:      20 * time.Millisecond,
		Check:     time.Hour,
		newWatcher: func() (*fsnotify.Watcher, error) {
			return nil, fmt.Errorf("inotify_init1: %w", syscall.EMFILE)
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	select {
	case <-done:
		t.Fatal("Run returned without an inotify instance: the file is never read again")
	case <-time.After(200 * time.Millisecond):
	}
	if got := n.Load(); got < 3 {
		t.Errorf("Changed called %d times in 200ms of polling every 20ms, want at least 3", got)
	}
	cancel()
	<-done
	if len(unwatched) != 1 || !strings.Contains(unwatched[0], path) || !strings.Contains(unwatched[0], "too many open files") {
		t.Errorf("Unwatched told %q, want the file and the reason", unwatched)
	}
}
