package netnslist

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A namespace made with `ip netns add` and a process started in it are
// listed as one namespace: its identity, the process, its bind mount.
func TestList(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var b [4]byte
	rand.Read(b[:])
	name := "dm-nslist-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	cmd := exec.Command("ip", "netns", "exec", name, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	mount := filepath.Join("/run/netns", name)
	var st unix.Stat_t
	if err := unix.Stat(mount, &st); err != nil {
		t.Fatal(err)
	}
	// ip execs sleep in the namespace: wait until it has.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var pst unix.Stat_t
		if unix.Stat("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/net", &pst) == nil && pst.Ino == st.Ino {
			if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm"); string(comm) == "sleep\n" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("ip netns exec did not exec sleep in the namespace")
		}
	}
	all, err := List("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found *Namespace
	for i, n := range all {
		if n.Ino == st.Ino && n.Dev == st.Dev {
			found = &all[i]
		}
	}
	if found == nil {
		t.Fatalf("namespace %s (inode %d) not listed among %d", name, st.Ino, len(all))
	}
	if found.PID != cmd.Process.Pid || found.Comm != "sleep" || found.Processes != 1 || !slices.Contains(found.Mounts, mount) ||
		found.Path() != found.Mounts[0] || found.Cgroup == "" {
		t.Errorf("listed %+v; want pid %d, sleep, 1 process, mounted at %s", found, cmd.Process.Pid, mount)
	}
	self := 0
	var me unix.Stat_t
	unix.Stat("/proc/self/ns/net", &me)
	for _, n := range all {
		if n.Ino == me.Ino {
			self++
		}
	}
	if self != 1 {
		t.Errorf("this process's namespace listed %d times", self)
	}
}

func TestPodUID(t *testing.T) {
	for _, tc := range []struct{ cgroup, want string }{
		{"/kubepods/besteffort/pod0b1c2d3e-0000-4000-8000-000000000001/3f2a", "0b1c2d3e-0000-4000-8000-000000000001"},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_0000_4000_8000_000000000001.slice/cri-containerd-3f2a.scope",
			"0b1c2d3e-0000-4000-8000-000000000001"},
		{"/dm-cri-ab12/podab12cd34-0000-4000-8000-000000000007/5e6f", "ab12cd34-0000-4000-8000-000000000007"},
		{"/system.slice/containerd.service", ""},
		{"/user.slice/pod-not-a-uid", ""},
		{"", ""},
	} {
		if got := PodUID(tc.cgroup); got != tc.want {
			t.Errorf("PodUID(%q) = %q, want %q", tc.cgroup, got, tc.want)
		}
	}
}

func TestCgroupPath(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{"0::/kubepods/pod1/abc\n", "/kubepods/pod1/abc"},
		{"12:pids:/kubepods/pod1/abc\n11:memory:/kubepods/pod1/abc\n0::/\n", "/kubepods/pod1/abc"},
		{"12:pids:/\n11:memory:/a\n0::/b\n", "/b"},
		{"9:name=systemd:/\n4:memory:/kubepods/pod0b1c2d3e-0000-4000-8000-000000000001/3f\n0::/x\n", "/kubepods/pod0b1c2d3e-0000-4000-8000-000000000001/3f"},
		{"9:name=systemd:/\n0::/\n", "/"},
		{"", ""},
	} {
		if got := cgroupPath(tc.data); got != tc.want {
			t.Errorf("cgroupPath(%q) = %q, want %q", tc.data, got, tc.want)
		}
	}
}

func TestNSFSMounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountinfo")
	os.WriteFile(path, []byte(`25 1 0:23 / /proc rw,nosuid shared:13 - proc proc rw
600 29 0:4 net:[4026532510] /run/netns/cni-1234 rw shared:300 - nsfs nsfs rw
601 29 0:4 net:[4026532510] /var/lib/my\040state/netns rw - nsfs nsfs rw
602 29 0:4 mnt:[4026532511] /run/mnt rw - nsfs nsfs rw
`), 0o644)
	m := nsfsMounts(path)
	if got := m[4026532510]; !slices.Equal(got, []string{"/run/netns/cni-1234", "/var/lib/my state/netns"}) || len(m) != 1 {
		t.Errorf("nsfs mounts %v", m)
	}
}
