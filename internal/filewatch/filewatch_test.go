package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
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
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
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
