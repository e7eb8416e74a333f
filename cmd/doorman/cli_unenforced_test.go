package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/sandbox"
)

// A pod the plugin passed through (an excluded namespace) is listed after
// its id, <namespace>/<pod name>, with its label and nothing enforced;
// show says so, the selector finds it, and the commands that need a
// policy or a log refuse it. The enforced sandbox's row is unchanged.
func TestCLIUnenforcedRecord(t *testing.T) {
	stateDir, _, _ := newState(t)
	if _, err := sandbox.RecordUnenforced(stateDir, sandbox.Attachment{Key: "3f2a-eth0", ID: "kube-system/coredns-0",
		Name: "coredns-0", PodUID: "0b1c", Runtime: "cni", Network: "k8s", IfName: "eth0"}, "excluded namespace"); err != nil {
		t.Fatal(err)
	}
	r := doorman(stateDir, "ls")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 4 {
		t.Fatalf("ls: %+v", r)
	}
	if f := strings.Join(strings.Fields(lines[1]), " "); f != "aaa111 web cni unknown allowlist 2 down - 1 2 4 full" {
		t.Errorf("ls row %q", lines[1])
	}
	if f := strings.Join(strings.Fields(lines[3]), " "); f != "kube-system/coredns-0 coredns-0 cni - - - n/a - 0 0 - n/a (excluded namespace)" {
		t.Errorf("ls row of the excluded pod %q", lines[3])
	}
	r = doorman(stateDir, "show", "kube-system/coredns-0")
	for _, want := range []string{"sandbox   3f2a-eth0", "id        kube-system/coredns-0", "pod uid   0b1c",
		"label     n/a (excluded namespace)", "enforced  no (excluded namespace)"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("show: no %q in %+v", want, r)
		}
	}
	if r := doorman(stateDir, "allow", "kube-system/coredns-0", "api.example.test"); r.code != exitFailed || !strings.Contains(r.stderr, "does not enforce it (excluded namespace)") {
		t.Errorf("allow: %+v", r)
	}
	if r := doorman(stateDir, "logs", "kube-system/coredns-0"); r.code != exitFailed || !strings.Contains(r.stderr, "has no decision log") {
		t.Errorf("logs: %+v", r)
	}
	if r := doorman(stateDir, "show", "kube-system/web"); r.code != exitNoMatch {
		t.Errorf("show of another pod: %+v", r)
	}
}

// ls --all adds, after the sandboxes, a network namespace no sandbox is
// recorded on: a process in a namespace of its own, named by its pid and
// name; not this process's namespace, nor a recorded sandbox's.
func TestCLIListAll(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	stateDir, _, _ := newState(t)
	cmd := exec.Command("unshare", "--net", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := strconv.Itoa(cmd.Process.Pid)
	var mine, its unix.Stat_t
	unix.Stat("/proc/self/ns/net", &mine)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		if unix.Stat("/proc/"+pid+"/ns/net", &its) == nil && its.Ino != mine.Ino && string(comm) == "sleep\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare did not exec sleep in a namespace of its own")
		}
	}
	if r := doorman(stateDir, "ls"); strings.Contains(r.stdout, "unenforced") {
		t.Errorf("ls without --all lists unenforced namespaces:\n%s", r.stdout)
	}
	r := doorman(stateDir, "ls", "--all")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) < 4 || strings.Join(strings.Fields(lines[1]), " ") != "aaa111 web cni unknown allowlist 2 down - 1 2 4 full" {
		t.Fatalf("ls --all: %+v", r)
	}
	want := "/proc/" + pid + "/ns/net sleep[" + pid + "] - - - - - - - - - unenforced"
	found := false
	for _, l := range lines[3:] {
		if strings.Join(strings.Fields(l), " ") == want {
			found = true
		}
	}
	if !found {
		t.Errorf("ls --all has no row %q:\n%s", want, r.stdout)
	}
	r = doorman(stateDir, "ls", "--all", "-o", "json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("ls --all -o json: %v\n%s", err, r.stdout)
	}
	found = false
	for _, row := range rows {
		if row["label"] == "unenforced" && row["pid"] == float64(cmd.Process.Pid) && row["process"] == "sleep" &&
			row["netnsInode"] == float64(its.Ino) {
			found = true
		}
		if row["label"] == "unenforced" && row["netnsInode"] == float64(mine.Ino) {
			t.Errorf("this process's own namespace is listed: %v", row)
		}
	}
	if !found || rows[0]["key"] != "aaa111-eth0" {
		t.Errorf("ls --all -o json: no row for pid %s after the sandboxes:\n%s", pid, r.stdout)
	}
}
