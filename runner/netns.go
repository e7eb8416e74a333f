package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// netnsDir is where iproute2 keeps named network namespaces; a namespace
// made here shows in `ip netns list` and works with `ip netns exec`.
const netnsDir = "/run/netns"

// netnsPath is the path of the run sandbox name's namespace.
func netnsPath(name string) string { return filepath.Join(netnsDir, "doorman-"+name) }

// createNetns makes a new, empty network namespace and keeps it alive by
// bind-mounting it on path, which must not exist yet. It is what `ip netns
// add` does; the calling goroutine's thread never changes namespace.
func createNetns(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("network namespace %s already exists: is another run using that name?", path)
		}
		return fmt.Errorf("create network namespace mount point: %w", err)
	}
	f.Close()

	errc := make(chan error, 1)
	go func() {
		// The thread switches namespace, so it must never run other
		// goroutines again: it stays locked and ends with this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind-mount the new network namespace on %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// removeNetns unmounts and removes a namespace made by createNetns. The
// namespace itself goes when the last process in it has exited. A path
// that is not there is no error.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove network namespace %s: %w", path, err)
	}
	return nil
}

// killProcessesIn kills every process whose network namespace is the one
// at path: what the command left running (a daemon it started, a child it
// did not wait for) goes with the sandbox, as in a container. It waits up
// to a few seconds for them to be gone.
func killProcessesIn(path string) error {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("stat network namespace %s: %w", path, err)
	}
	find := func() []int {
		var pids []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := find()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still run in network namespace %s after SIGKILL", pids, path)
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
