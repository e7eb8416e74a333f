package cniinstall

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// watching starts in.Watch and stops it at the end of the test (or when
// the returned function is called), failing the test if Watch returned an
// error.
func watching(t *testing.T, in *Installer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Watch(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Watch: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// entryCount reads the file as a runtime would and counts doorman's
// entries; -1 when the file is absent or does not load.
func entryCount(path string) int {
	l, err := libcni.ConfListFromFile(path)
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range l.Plugins {
		if p.Network.Type == PluginType {
			n++
		}
	}
	return n
}

// replaceAtomically writes data to path as most CNI agents do: a
// temporary file renamed over it.
func replaceAtomically(t testing.TB, path string, data []byte) {
	tmp := path + ".agent-tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
}

// TestWatchRestoresEntry: the primary CNI rewriting its file (in place, as
// `cp` does, or by replacing it) loses doorman's entry, and the watcher
// puts it back, logging why.
func TestWatchRestoresEntry(t *testing.T) {
	orig := testdata(t, "10-calico.conflist")
	n := newNode(t, map[string][]byte{"10-calico.conflist": orig})
	log := &logBuffer{}
	in := n.installer(log)
	watching(t, in)
	p := n.path("10-calico.conflist")
	eventually(t, "the entry", func() bool { return entryCount(p) == 1 })

	for i, rewrite := range []func(){
		func() { replaceAtomically(t, p, orig) },
		func() { os.WriteFile(p, orig, 0o644) },
		func() { os.Remove(p); os.WriteFile(p, orig, 0o644) },
	} {
		rewrite()
		eventually(t, fmt.Sprintf("the entry back after rewrite %d", i), func() bool { return entryCount(p) == 1 })
		got, _ := os.ReadFile(p)
		assertInsertedOnly(t, orig, got)
	}
	eventually(t, "a line naming the rewrite", func() bool { return log.find(t, "wrote", p, "rewritten without it") != nil })
}

// TestWatchNewPrimary: a file that sorts first appearing (Cilium's
// 05-cilium.conflist beside a previous CNI's) gets the entry.
func TestWatchNewPrimary(t *testing.T) {
	n := newNode(t, map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")})
	log := &logBuffer{}
	watching(t, n.installer(log))
	eventually(t, "the entry", func() bool { return entryCount(n.path("10-flannel.conflist")) == 1 })
	replaceAtomically(t, n.path("05-cilium.conflist"), testdata(t, "05-cilium.conflist"))
	eventually(t, "the entry in the new primary", func() bool { return entryCount(n.path("05-cilium.conflist")) == 1 })
	// The line follows the write.
	eventually(t, "the line naming the new primary", func() bool {
		return log.find(t, "wrote", n.path("05-cilium.conflist"), "became the primary network configuration (was 10-flannel.conflist)") != nil
	})
	// A .conf that becomes the primary is converted.
	replaceAtomically(t, n.path("01-mynet.conf"), testdata(t, "10-mynet.conf"))
	eventually(t, "the conversion", func() bool { return entryCount(n.path("01-mynet.conflist")) == 1 })
	eventually(t, "the .conf gone", func() bool { _, err := os.Stat(n.path("01-mynet.conf")); return os.IsNotExist(err) })
}

// TestWatchWaitsForPrimary: on a node whose CNI has not written its file
// yet, the watcher waits, and installs when it appears.
func TestWatchWaitsForPrimary(t *testing.T) {
	n := newNode(t, nil)
	log := &logBuffer{}
	watching(t, n.installer(log))
	eventually(t, "the waiting line", func() bool {
		for _, l := range log.lines(t) {
			if l["msg"] == "waiting" {
				return true
			}
		}
		return false
	})
	replaceAtomically(t, n.path("10-kindnet.conflist"), testdata(t, "10-kindnet.conflist"))
	eventually(t, "the entry", func() bool { return entryCount(n.path("10-kindnet.conflist")) == 1 })
	eventually(t, "the ready line", func() bool {
		return log.find(t, "ready", n.path("10-kindnet.conflist"), "primary network configuration") != nil
	})
}

// TestWatchStopLeavesEntry: cancelling the watch (what SIGTERM does)
// leaves the entry in place.
func TestWatchStopLeavesEntry(t *testing.T) {
	n := newNode(t, map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.installer(nil).Watch(ctx) }()
	eventually(t, "the entry", func() bool { return entryCount(n.path("10-flannel.conflist")) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if entryCount(n.path("10-flannel.conflist")) != 1 {
		t.Error("the entry is gone after the watch stopped")
	}
}

// TestWatchConfDirRemoved: losing the conf dir ends the watch with an
// error, so that the DaemonSet restarts the installer.
func TestWatchConfDirRemoved(t *testing.T) {
	n := newNode(t, map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")})
	done := make(chan error, 1)
	go func() { done <- n.installer(nil).Watch(context.Background()) }()
	eventually(t, "the entry", func() bool { return entryCount(n.path("10-flannel.conflist")) == 1 })
	if err := os.RemoveAll(n.confDir); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("Watch returned nil")
	}
}

// TestWatchRace: while the primary CNI replaces its file over and over,
// every read of the file by a runtime finds a whole, loadable conflist
// with at most one doorman entry, and once the rewrites stop the entry is
// back. Run with -race.
func TestWatchRace(t *testing.T) {
	orig := testdata(t, "10-aws.conflist")
	// The agent writes two versions in turn, so that a write of its that
	// doorman lost (putting back an older one) shows at the end.
	versions := [][]byte{orig, bytes.Replace(orig, []byte(`"pluginLogLevel": "DEBUG"`), []byte(`"pluginLogLevel": "INFO"`), 1)}
	if bytes.Equal(versions[0], versions[1]) {
		t.Fatal("test data: no second version")
	}
	n := newNode(t, map[string][]byte{"10-aws.conflist": orig})
	in := n.installer(nil)
	// Short timings so that the installer writes often while the agent
	// does.
	in.Debounce, in.MaxDelay = time.Millisecond, 5*time.Millisecond
	stopWatch := watching(t, in)
	p := n.path("10-aws.conflist")
	eventually(t, "the entry", func() bool { return entryCount(p) == 1 })

	var stop atomic.Bool
	var reads, withEntry atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the runtime, reading
		defer wg.Done()
		for !stop.Load() {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
			l, err := libcni.ConfListFromBytes(data)
			if err != nil {
				t.Errorf("read %d: the runtime cannot load the file: %v\n%s", reads.Load(), err, data)
				return
			}
			c := 0
			for _, pl := range l.Plugins {
				if pl.Network.Type == PluginType {
					c++
				}
			}
			if c > 1 {
				t.Errorf("%d doorman entries:\n%s", c, data)
				return
			}
			if c == 1 {
				withEntry.Add(1)
			}
			reads.Add(1)
		}
	}()
	go func() { // the primary CNI's agent, rewriting
		defer wg.Done()
		defer stop.Store(true)
		for i := 0; i < 300 && !t.Failed(); i++ {
			replaceAtomically(t, p, versions[i%2])
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	eventually(t, "the entry after the rewrites", func() bool { return entryCount(p) == 1 })
	stopWatch()
	// The agent's last write (i = 299: versions[1]) is what the file
	// holds, with the entry.
	got, _ := os.ReadFile(p)
	assertInsertedOnly(t, versions[1], got)
	t.Logf("%d reads, %d with the entry", reads.Load(), withEntry.Load())
	// No temporary file of doorman's is left behind.
	ents, _ := os.ReadDir(n.confDir)
	for _, e := range ents {
		if isTempFile(e.Name()) {
			t.Errorf("left %s", e.Name())
		}
	}
}

// TestWatchRaceTwoInstallers: two installers watching one node (the
// DaemonSet's and one run by hand) never write two entries.
func TestWatchRaceTwoInstallers(t *testing.T) {
	orig := testdata(t, "10-flannel.conflist")
	n := newNode(t, map[string][]byte{"10-flannel.conflist": orig})
	for i := 0; i < 2; i++ {
		in := n.installer(nil)
		in.Debounce, in.MaxDelay = time.Millisecond, 5*time.Millisecond
		watching(t, in)
	}
	p := n.path("10-flannel.conflist")
	for i := 0; i < 50; i++ {
		replaceAtomically(t, p, orig)
		if c := entryCount(p); c > 1 {
			t.Fatalf("%d entries", c)
		}
		time.Sleep(2 * time.Millisecond)
	}
	eventually(t, "the entry", func() bool { return entryCount(p) == 1 })
	data, _ := os.ReadFile(p)
	if bytes.Count(data, []byte(`"doorman"`)) != 1 {
		t.Errorf("file:\n%s", data)
	}
}
