package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/internal/atomicfile"
	"github.com/doorman-net/doorman/internal/procstat"
)

// Files under the run directory.
const (
	lockFile   = "lock" // flock(2)ed while the network is changed
	ipamSubdir = "ipam" // host-local's dataDir; one directory per bridge below
	recordFile = "run.json"
	cacheDir   = "cni-cache" // libcni's cache, inside a run's directory
)

// record is what a run writes before it makes anything, so that whoever
// finds it after the run's process died can undo the run.
type record struct {
	Name     string            `json:"name"`
	PID      int               `json:"pid"`      // the `doorman run` process
	PIDStart uint64            `json:"pidStart"` // its start time, so a reused pid is not taken for it
	NetNS    string            `json:"netns"`
	Bridge   string            `json:"bridge"`
	CNIPath  []string          `json:"cniPath"`
	Networks []json.RawMessage `json:"networks"` // the conflists, in ADD order
	Created  time.Time         `json:"created"`
}

func (r *record) save(dir string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, recordFile), bytes.NewReader(data), atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("write run record: %w", err)
	}
	return nil
}

func loadRecord(dir string) (*record, error) {
	data, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("run record %s: %w", filepath.Join(dir, recordFile), err)
	}
	return &r, nil
}

// alive reports whether the run's process still runs.
func (r *record) alive() bool {
	start, err := processStart(r.PID)
	return err == nil && start == r.PIDStart
}

// processStart reads a process's start time: with the pid it names one
// process. A process that has exited has none.
func processStart(pid int) (uint64, error) {
	st, err := procstat.Read(pid)
	if err == nil && st.Exited() {
		err = fmt.Errorf("process %d has exited", pid)
	}
	return st.Start, err
}

// runLock is the run directory's lock: held while a run changes the
// network (ADD, DEL, the bridge and masquerade table), so that one run
// never removes the bridge another is attaching to.
type runLock struct{ f *os.File }

// lockRunDir takes the lock, waiting for it until ctx is done.
func lockRunDir(ctx context.Context, runDir string) (*runLock, error) {
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(runDir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("run directory lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &runLock{f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (l *runLock) unlock() { l.f.Close() } // closing the file releases the flock

// reapStale tears down every run under runDir whose process is gone.
// Called with the lock held.
func reapStale(ctx context.Context, runDir string, logf func(string, ...any)) {
	ents, err := os.ReadDir(runDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == ipamSubdir || CheckName(e.Name()) != nil {
			continue
		}
		dir := filepath.Join(runDir, e.Name())
		r, err := loadRecord(dir)
		if errors.Is(err, os.ErrNotExist) {
			// A run between mkdir and its first record write holds
			// the lock, so this is debris: nothing was made yet.
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute {
				os.RemoveAll(dir)
			}
			continue
		}
		if err != nil {
			logf("doorman run: skipping unreadable run record: %v", err)
			continue
		}
		if r.alive() {
			continue
		}
		s := &Sandbox{rec: *r, dir: dir, runDir: runDir}
		if err := s.teardown(ctx); err != nil {
			logf("doorman run: reaping run %s (process %d is gone): %v", r.Name, r.PID, err)
		} else {
			logf("doorman run: reaped run %s left behind by process %d", r.Name, r.PID)
		}
	}
}
