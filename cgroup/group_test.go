package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain makes this test binary, started with envHelper set, a process
// that grows its memory until it is killed, or sleeps.
func TestMain(m *testing.M) {
	switch os.Getenv(envHelper) {
	case "grow":
		var keep [][]byte
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = byte(i) | 1 // touched: resident
			}
			keep = append(keep, b)
			time.Sleep(time.Millisecond)
		}
	case "sleep":
		time.Sleep(time.Hour)
		os.Exit(0)
	case "unread":
		// Once stdin says so, connect to the address given and read
		// nothing (see TestSocketMemory).
		fmt.Scanln()
		// A receive buffer of 32 MiB, not autotuned: without the
		// group's limit the sender would fill it.
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 16<<20) })
		}}
		c, err := d.Dial("tcp", os.Getenv(envDirs))
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		defer c.Close()
		time.Sleep(time.Hour)
		os.Exit(0)
	case "hidden":
		// Run where a fresh /sys hides the hierarchies (see
		// TestHiddenHierarchies): remove the group.
		g := &Group{Dirs: strings.Split(os.Getenv(envDirs), ",")}
		err := g.Remove(5 * time.Second)
		if errors.Is(err, ErrNotMounted) {
			fmt.Print("not mounted")
			os.Exit(3)
		}
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	envHelper = "DOORMAN_CGROUP_TEST_HELPER"
	envDirs   = "DOORMAN_CGROUP_TEST_DIRS"
)

// startHelper starts this test binary as a helper process (see TestMain).
func startHelper(t *testing.T, what string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envHelper+"="+what)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// testLayout is this machine's layout, and a parent cgroup of the test's
// own that the test removes (with anything left below it, which fails it).
func testLayout(t *testing.T) (*Layout, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	l, err := ReadLayout()
	if err != nil {
		t.Fatal(err)
	}
	if hs, _ := l.limited(); len(hs) == 0 {
		t.Skipf("no hierarchy holds %v here (%s)", Controllers, l.Describe())
	}
	var b [4]byte
	rand.Read(b[:])
	parent := "/dm-cgtest-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		hs, _ := l.limited()
		for _, h := range hs {
			dir, _ := h.Dir(parent)
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.IsDir() {
					t.Errorf("cgroup left behind: %s", filepath.Join(dir, e.Name()))
					syscall.Rmdir(filepath.Join(dir, e.Name()))
				}
			}
			if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
				t.Errorf("remove the test's parent %s: %v", dir, err)
			}
		}
	})
	return l, parent
}

// A group has its limits in every hierarchy, takes a process in with all
// its threads, and Remove kills what runs in it and removes it.
func TestCreateJoinRemove(t *testing.T) {
	l, parent := testLayout(t)
	lim := Limits{Memory: 64 << 20, Pids: 100, CPUWeight: 50, SocketMemory: 16 << 20}
	g, missing, err := l.Create(parent, "g1", lim, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s in %v, missing %v", l.Describe(), g.Path, g.Dirs, missing)
	if g.Path != parent+"/g1" || len(g.Dirs) == 0 {
		t.Fatalf("group %+v", g)
	}
	got, err := g.Limits()
	if err != nil {
		t.Fatal(err)
	}
	want := lim
	if _, ok := l.For("cpu"); ok {
		if h, _ := l.For("cpu"); !h.V2 {
			want.CPUWeight = SharesOf(50) * 100 / 1024 // v1 rounds through shares
		}
	}
	if h, ok := l.For("memory"); ok && h.V2 {
		want.SocketMemory = 0 // counted in memory.max, no limit of its own
	}
	for _, c := range missing {
		switch c {
		case "memory":
			want.Memory, want.SocketMemory = 0, 0
		case "pids":
			want.Pids = 0
		case "cpu":
			want.CPUWeight = 0
		}
	}
	if got != want {
		t.Errorf("limits read back %+v, want %+v", got, want)
	}

	cmd := startHelper(t, "sleep")
	if err := g.Join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	procs, err := g.Procs()
	if err != nil || !slices.Contains(procs, cmd.Process.Pid) {
		t.Fatalf("Procs = %v, %v; want %d in it", procs, err, cmd.Process.Pid)
	}
	of, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for ctrl, path := range of {
		for _, c := range Controllers {
			if slices.Contains(strings.Split(ctrl, ","), c) && !slices.Contains(missing, c) && path != g.Path {
				t.Errorf("/proc/%d/cgroup: %s:%s, want %s", cmd.Process.Pid, ctrl, path, g.Path)
			}
		}
	}
	// (Its memory was charged before it joined, where it was.)
	if u := g.Usage(); u.Pids == 0 && !slices.Contains(missing, "pids") {
		t.Errorf("usage %+v with a process in the group", u)
	}

	if err := g.Remove(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if g.Exists() {
		t.Errorf("%v still there after Remove", g.Dirs)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the process in the group: %v, want killed", err)
	}
	if err := g.Remove(time.Second); err != nil {
		t.Errorf("Remove of a removed group: %v", err)
	}
}

// A leftover empty group is taken over; one that holds a process is
// ErrBusy and stays as it was; a failing Create leaves nothing it made.
func TestCreateLeftoversAndFailure(t *testing.T) {
	l, parent := testLayout(t)
	g, _, err := l.Create(parent, "g", Limits{Pids: 10}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := l.Create(parent, "g", Limits{Pids: 20}, CreateOptions{})
	if err != nil {
		t.Fatalf("Create over an empty leftover: %v", err)
	}
	if lim, _ := again.Limits(); lim.Pids != 20 {
		t.Errorf("leftover taken over with pids %d, want 20", lim.Pids)
	}
	cmd := startHelper(t, "sleep")
	if err := g.Join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Create(parent, "g", Limits{}, CreateOptions{}); !errors.Is(err, ErrBusy) {
		t.Errorf("Create over a group with a process: %v, want ErrBusy", err)
	}
	if procs, _ := g.Procs(); !slices.Contains(procs, cmd.Process.Pid) {
		t.Errorf("the busy group lost its process: %v", procs)
	}
	if err := g.Remove(5 * time.Second); err != nil {
		t.Fatal(err)
	}

	// A CPU weight out of range fails after the directories were made:
	// they go, and so does the parent Create made for them, unless kept.
	deep := parent + "/a/b"
	if _, _, err := l.Create(deep, "bad", Limits{CPUWeight: 20000}, CreateOptions{Keep: []string{parent + "/a"}}); err == nil || !strings.Contains(err.Error(), "20000") {
		t.Fatalf("Create with cpu weight 20000: %v", err)
	}
	hs, _ := l.limited()
	for _, h := range hs {
		b, _ := h.Dir(deep)
		a := filepath.Dir(b)
		if _, err := os.Stat(b); err == nil {
			t.Errorf("failed Create left %s", b)
		}
		if _, err := os.Stat(a); err != nil {
			t.Errorf("failed Create removed the kept parent %s: %v", a, err)
		}
		syscall.Rmdir(a)
	}
}

// On cgroup v1, the TCP sockets of a group's processes are charged to it
// and hold no more than its SocketMemory: a connection whose receiver in
// the group reads nothing takes in what fits and no more, and the sender
// waits; Usage says what they hold.
func TestSocketMemory(t *testing.T) {
	l, parent := testLayout(t)
	h, ok := l.For("memory")
	if !ok || h.V2 {
		t.Skip("no v1 memory controller: v2 has no socket limit of its own")
	}
	const limit = 2 << 20
	g, _, err := l.Create(parent, "tcp", Limits{SocketMemory: limit}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove(5 * time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The helper makes its socket once it is in the group (a socket is
	// charged to the cgroup of the process that made it): when its
	// stdin gives it a line.
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envHelper+"=unread", envDirs+"="+ln.Addr().String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := g.Join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetWriteBuffer(64 << 10) // the sender's own queue stays small
	c.SetWriteDeadline(time.Now().Add(3 * time.Second))
	sent, _ := c.Write(make([]byte, 256<<20))
	u := g.Usage()
	t.Logf("sent %d KiB into a receiver that reads nothing; the group's sockets hold %d KiB (limit %d KiB)", sent>>10, u.SocketMemory>>10, limit>>10)
	if sent >= 8<<20 {
		t.Errorf("sent %d bytes into a receiver that reads nothing, with a 32 MiB buffer limited to %d", sent, limit)
	}
	if u.SocketMemory == 0 || u.SocketMemory > limit+limit/2 {
		t.Errorf("the group's sockets hold %d bytes, limit %d", u.SocketMemory, limit)
	}
}

// A process that outgrows the group's memory limit is killed by the
// kernel, and OOMKills counts it.
func TestOOMKills(t *testing.T) {
	l, parent := testLayout(t)
	if _, ok := l.For("memory"); !ok {
		t.Skip("no memory controller")
	}
	g, _, err := l.Create(parent, "oom", Limits{Memory: 24 << 20}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Remove(5 * time.Second); err != nil {
			t.Error(err)
		}
	}()
	before, ok := g.OOMKills()
	if !ok {
		t.Skip("this kernel does not count OOM kills per cgroup")
	}
	// The helper joins the group before it grows: it starts asleep in
	// its first allocation loop, so join it at once.
	cmd := startHelper(t, "grow")
	if err := g.Join(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("the growing process ended with %v, want SIGKILL", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a process growing by 1 MiB a millisecond was not killed at a 24 MiB limit within 60s")
	}
	after, _ := g.OOMKills()
	if after != before+1 {
		t.Errorf("OOMKills %d, then %d: want one more", before, after)
	}
}

// A group whose hierarchy is not mounted here is not taken for removed:
// Remove says so rather than forget it.
func TestRemoveNotMounted(t *testing.T) {
	g := &Group{Path: "/doorman.slice/x", Dirs: []string{filepath.Join(t.TempDir(), "memory/doorman.slice/x")}}
	if err := g.Remove(time.Second); !errors.Is(err, ErrNotMounted) {
		t.Errorf("Remove of a group on no cgroup filesystem: %v, want ErrNotMounted", err)
	}
	if _, err := g.Procs(); !errors.Is(err, ErrNotMounted) {
		t.Errorf("Procs: %v, want ErrNotMounted", err)
	}
}

// In a mount namespace with a fresh /sys, which hides the hierarchies (as
// `ip netns exec` makes one), a group made outside is removed through PID
// 1's root, killing what runs in it, where this process may look there;
// where it may not, Remove says so (ErrNotMounted) rather than take the
// group for gone.
func TestHiddenHierarchies(t *testing.T) {
	l, parent := testLayout(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare (util-linux)")
	}
	g, _, err := l.Create(parent, "hidden", Limits{Pids: 50}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove(5 * time.Second)
	sleeper := startHelper(t, "sleep")
	if err := g.Join(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", `umount -l /sys && mount -t sysfs none /sys && exec "$0"`, os.Args[0])
	cmd.Env = append(os.Environ(), envHelper+"=hidden", envDirs+"="+strings.Join(g.Dirs, ","))
	out, err := cmd.CombinedOutput()
	_, hostVisible := os.Stat(hostRoot + "/sys")
	switch {
	case hostVisible == nil && err != nil:
		t.Fatalf("removing the group where the hierarchies are hidden: %v\n%s", err, out)
	case hostVisible == nil:
		if g.Exists() {
			t.Errorf("%v still there", g.Dirs)
		}
		if err := sleeper.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("the process in the group: %v, want killed", err)
		}
	case string(out) != "not mounted":
		t.Fatalf("%s is out of reach here (%v), so Remove must fail with ErrNotMounted; got %v: %s", hostRoot, hostVisible, err, out)
	default:
		t.Logf("%s is out of reach here (%v): Remove said so", hostRoot, hostVisible)
		if procs, _ := g.Procs(); len(procs) != 1 {
			t.Errorf("the group's process after a failed Remove: %v", procs)
		}
	}
}
