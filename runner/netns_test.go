package runner

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/hostconf"
)

// testNetns makes a throwaway namespace with createNetns, named
// dm-chain-<hex> under /run/netns, removed at the end of the test.
func testNetns(t *testing.T) (string, ns.NetNS) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	b := make([]byte, 4)
	rand.Read(b)
	path := filepath.Join(netnsDir, "dm-chain-"+hex.EncodeToString(b))
	if err := createNetns(path); err != nil {
		t.Fatal(err)
	}
	n, err := ns.GetNS(path)
	if err != nil {
		removeNetns(path)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killProcessesIn(path)
		n.Close()
		if err := removeNetns(path); err != nil {
			t.Error(err)
		}
	})
	return path, n
}

func netnsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestCreateAndRemoveNetns(t *testing.T) {
	path, _ := testNetns(t)
	if netnsInode(t, path) == netnsInode(t, "/proc/self/ns/net") {
		t.Fatal("the new namespace is this process's own")
	}
	if err := createNetns(path); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("creating %s twice: want an 'already exists' error, got %v", path, err)
	}
	if err := removeNetns(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s still there after removeNetns: %v", path, err)
	}
	if err := removeNetns(path); err != nil {
		t.Errorf("removing a removed namespace: %v", err)
	}
}

// TestStart runs a command the way a run does: in the namespace, with the
// sandbox's resolv.conf over /etc/resolv.conf, nothing of which leaks into
// this process's mount namespace.
func TestStart(t *testing.T) {
	path, _ := testNetns(t)
	resolv, err := writeResolvConf(t.TempDir(), addrs("203.0.113.53"), []string{"demo.test"})
	if err != nil {
		t.Fatal(err)
	}
	hostBefore, _ := os.ReadFile(hostconf.ResolvConf)
	mountsBefore, _ := os.ReadFile("/proc/self/mountinfo")

	s := &Sandbox{rec: record{NetNS: path}, resolvConf: resolv}
	var out bytes.Buffer
	cmd := exec.Command("sh", "-c", "cat /etc/resolv.conf; readlink /proc/self/ns/net; echo x >> /etc/resolv.conf && echo writable")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(exec.Command("true")); err == nil {
		t.Error("a second Start: want an error")
	}
	<-s.Exited()
	s.Wait()
	got := out.String()
	if !strings.Contains(got, "nameserver 203.0.113.53\nsearch demo.test\n") {
		t.Errorf("the command's /etc/resolv.conf: want the sandbox's, got:\n%s", got)
	}
	if want := fmt.Sprintf("net:[%d]", netnsInode(t, path)); !strings.Contains(got, want) {
		t.Errorf("the command's network namespace: want %s, got:\n%s", want, got)
	}
	if strings.Contains(got, "writable") {
		t.Errorf("the command could write its resolv.conf:\n%s", got)
	}
	if s.init.SysProcAttr.Pdeathsig != unix.SIGKILL {
		t.Errorf("Pdeathsig %v, want SIGKILL", s.init.SysProcAttr.Pdeathsig)
	}
	hostAfter, _ := os.ReadFile(hostconf.ResolvConf)
	mountsAfter, _ := os.ReadFile("/proc/self/mountinfo")
	if !bytes.Equal(hostBefore, hostAfter) {
		t.Errorf("this process's %s changed:\n%s", hostconf.ResolvConf, hostAfter)
	}
	// (Other tests may mount namespaces meanwhile: only the mount
	// points a run mounts on are compared.)
	for _, at := range []string{hostconf.ResolvConf, "/dev", "/dev/pts", "/dev/shm", "/dev/null", "/proc"} {
		if bytes.Count(mountsAfter, []byte(" "+at+" ")) != bytes.Count(mountsBefore, []byte(" "+at+" ")) {
			t.Errorf("a mount on %s leaked into this mount namespace", at)
		}
	}
}

// startIn starts cmd in the network namespace at path, as nothing but
// that: what a command may leave behind there.
func startIn(t *testing.T, path string, cmd *exec.Cmd) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open(path)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		if err == nil {
			err = cmd.Start()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestKillProcessesIn(t *testing.T) {
	path, _ := testNetns(t)
	// A daemon the command started: it runs in the namespace.
	inside := exec.Command("sleep", "60")
	startIn(t, path, inside)
	defer inside.Wait()
	other := exec.Command("sleep", "60") // in this process's namespace: must survive
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()

	if err := killProcessesIn(path); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", inside.Process.Pid)); err == nil && !strings.Contains(string(data), ") Z ") {
		t.Errorf("process %d in the namespace survived: %s", inside.Process.Pid, data)
	}
	if unix.Kill(other.Process.Pid, 0) != nil {
		t.Error("a process outside the namespace was killed")
	}
}
