package runner

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	if cmd.SysProcAttr.Pdeathsig != unix.SIGKILL {
		t.Errorf("Pdeathsig %v, want SIGKILL", cmd.SysProcAttr.Pdeathsig)
	}
	hostAfter, _ := os.ReadFile(hostconf.ResolvConf)
	mountsAfter, _ := os.ReadFile("/proc/self/mountinfo")
	if !bytes.Equal(hostBefore, hostAfter) {
		t.Errorf("this process's %s changed:\n%s", hostconf.ResolvConf, hostAfter)
	}
	if bytes.Count(mountsAfter, []byte(" "+hostconf.ResolvConf+" ")) != bytes.Count(mountsBefore, []byte(" "+hostconf.ResolvConf+" ")) {
		t.Errorf("a mount on %s leaked into this mount namespace", hostconf.ResolvConf)
	}
}

func TestKillProcessesIn(t *testing.T) {
	path, _ := testNetns(t)
	resolv, _ := writeResolvConf(t.TempDir(), addrs("203.0.113.53"), nil)
	s := &Sandbox{rec: record{NetNS: path}, resolvConf: resolv}
	// A daemon that outlives its parent: what a command may leave behind.
	cmd := exec.Command("sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	s.Wait()
	var pid int
	fmt.Sscan(out.String(), &pid)
	if pid == 0 || unix.Kill(pid, 0) != nil {
		t.Fatalf("the background sleep (%q) is not running", out.String())
	}
	other := exec.Command("sleep", "60") // in this process's namespace: must survive
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()

	if err := killProcessesIn(path); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(data), ") Z ") {
		t.Errorf("process %d in the namespace survived: %s", pid, data)
	}
	if unix.Kill(other.Process.Pid, 0) != nil {
		t.Error("a process outside the namespace was killed")
	}
}
