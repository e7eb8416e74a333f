package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/doorman-net/doorman/sandbox"
)

// previousRunView is the last commit whose `doorman run` ran its command
// in the host's view of the filesystem and pid namespace, with every
// capability.
const previousRunView = "8feb24a0848883375a1dac75813d736f8282143f"

// TestRunHidesHost: what doorman keeps from a sandbox is out of reach of a
// `doorman run` command, as root and as --user nobody: the network's CA
// key, a secret file of credential injection, the live policy file in
// the state directory, /etc/doorman's files, and the proxy's /proc
// entries (its environment, its cmdline, the host's files through its
// root), the host's disks through /dev, a daemon's control socket under
// /run (a way into the host's network namespace), and, for root, after
// unmounting what covers the CA directory. The same probes against the doorman of
// previousRunView read them: the probes can fail.
func TestRunHidesHost(t *testing.T) {
	skipUnlessRoot(t)
	previous := filepath.Join(buildPreviousDoorman(t, previousRunView), "doorman")
	for _, tc := range []struct {
		name, bin string
		fixed     bool
	}{
		{"fixed", doormanBin(), true},
		{"previous", previous, false},
	} {
		for _, user := range []string{"root", "nobody"} {
			t.Run(tc.name+"/"+user, func(t *testing.T) {
				read := runViewProbes(t, tc.bin, user)
				if tc.fixed {
					if len(read) > 0 {
						t.Errorf("the command read %v", read)
					}
					return
				}
				// What the previous view let the command read: for
				// root everything; for nobody what is world-readable.
				want := []string{"secret", "etc-secret", "etc-policy", "proxy-cmdline", "host-socket"}
				if user == "root" {
					want = append(want, "ca-key", "state-policy", "proxy-environ", "proxy-root", "block-device", "ca-key-after-umount")
				}
				for _, w := range want {
					if !slices.Contains(read, w) {
						t.Errorf("the previous view kept %s from %s: the probe reads nothing (read %v)", w, user, read)
					}
				}
			})
		}
	}
}

// runViewProbes runs, with doorman binary bin, a command as user that
// tries to read each of the things a sandbox must not have, and returns
// the labels of those it read.
func runViewProbes(t *testing.T, bin, user string) []string {
	e := newRunEnv(t)
	e.bin = bin
	// World-readable directories, so that only the view keeps nobody out.
	base, err := os.MkdirTemp("", "dm-run-view-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	e.stateDir, e.logDir, e.runDir = filepath.Join(base, "state"), filepath.Join(base, "log"), filepath.Join(base, "run")
	caDir := filepath.Join(base, "ca")
	write := func(p, content string) string {
		p = filepath.Join(base, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// 0644, as an operator may leave it.
	secret := write("secrets/anthropic", "sk-ant-view-secret\n")
	policy := write("policy", apiName+"\ninspect "+apiName+" inject x-api-key dm-placeholder-view "+secret+"\n")
	gate := filepath.Join(base, "gate")
	ca := e.net.WriteCA(base)

	// /etc/doorman exists only in this run's mount namespace: /etc is an
	// overlay there, over the host's.
	etc := filepath.Join(base, "etc")
	for _, d := range []string{"upper/doorman/secrets", "work"} {
		os.MkdirAll(filepath.Join(etc, d), 0o755)
	}
	os.WriteFile(filepath.Join(etc, "upper/doorman/secrets/other"), []byte("etc-secret-marker\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "upper/doorman/default.policy"), []byte("# etc-policy-marker\n"), 0o644)
	e.wrap = func(cmd *exec.Cmd) *exec.Cmd {
		w := exec.CommandContext(context.Background(), "sh", append([]string{"-c",
			`mount -t overlay overlay -o "lowerdir=/etc,upperdir=$0/upper,workdir=$0/work" /etc && exec "$@"`, etc}, cmd.Args...)...)
		w.Env = cmd.Env
		w.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		return w
	}

	// A daemon's control socket in the host's /run, open to everyone (as
	// docker.sock is to its group): it counts the connections it gets.
	sock := filepath.Join("/run", fmt.Sprintf("dm-run-view-%d-%s.sock", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-")))
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); os.Remove(sock) })
	os.Chmod(sock, 0o666)
	var socketConns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			socketConns.Add(1)
			c.Close()
		}
	}()

	// A probe prints its label when it read what it aimed at: the marker
	// of a file, or anything at all of a /proc entry or a device.
	probes := []struct{ label, script string }{
		{"ca-key", `grep -q "PRIVATE KEY" "$CA/doorman-run0/ca.key"`},
		{"secret", `grep -q sk-ant-view-secret "$SECRET"`},
		{"state-policy", `cat "$STATE"/*/policy | grep -q ` + apiName},
		{"etc-secret", `grep -q etc-secret-marker /etc/doorman/secrets/other`},
		{"etc-policy", `grep -q etc-policy-marker /etc/doorman/default.policy`},
		{"proxy-environ", `[ -n "$(tr -d '\0' < /proc/$PROXY/environ)" ]`},
		{"proxy-cmdline", `[ -n "$(tr -d '\0' < /proc/$PROXY/cmdline)" ]`},
		{"proxy-root", `grep -q sk-ant-view-secret "/proc/$PROXY/root$SECRET"`},
		{"block-device", `for b in $(find /dev -type b); do head -c 4096 $b | od | grep -q . && exit 0; done; exit 1`},
		{"host-socket", `python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$SOCK"`},
		{"ca-key-after-umount", `umount "$CA"; grep -q "PRIVATE KEY" "$CA/doorman-run0/ca.key"`},
	}
	script := `echo ready; while [ ! -s "$GATE" ]; do sleep 0.05; done; PROXY=$(cat "$GATE")` + "\n"
	for _, p := range probes {
		script += fmt.Sprintf("if ( %s ) >/dev/null 2>&1; then echo READ %s; fi\n", p.script, p.label)
	}
	script += "echo done\n"
	flags := []string{"--policy", policy, "--ca-dir", caDir, "--upstream-ca-file", ca}
	if user != "root" {
		flags = append(flags, "--user", user)
	}
	name := runName()
	s := e.start(name, flags, "env", "CA="+caDir, "SECRET="+secret, "STATE="+e.stateDir, "GATE="+gate, "SOCK="+sock, "sh", "-c", script)
	states, err := sandbox.List(e.stateDir)
	if err != nil || len(states) != 1 || states[0].PID == 0 {
		t.Fatalf("the run's sandbox: %v, %v", states, err)
	}
	if err := os.WriteFile(gate, fmt.Appendf(nil, "%d\n", states[0].PID), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := s.wait(t)
	if code != 0 || !strings.HasSuffix(out, "done\n") {
		t.Fatalf("the probes: exit %d, stdout %q, stderr %q", code, out, s.stderr)
	}
	var read []string
	for _, line := range strings.Split(out, "\n") {
		if l, ok := strings.CutPrefix(line, "READ "); ok {
			read = append(read, l)
		}
	}
	// Measured at the socket, not taken from the probe.
	if n := socketConns.Load(); n > 0 != slices.Contains(read, "host-socket") {
		t.Errorf("the host's socket got %d connections, the probe says %v", n, read)
	}
	e.assertNothingLeft(name)
	return read
}
