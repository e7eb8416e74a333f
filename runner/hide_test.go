package runner

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// resolveCovers resolves links, drops what is missing or already hidden
// by a directory above it, attaches kept files to their directory, and
// refuses to cover the root.
func TestResolveCovers(t *testing.T) {
	dir := t.TempDir()
	mk := func(p string) string {
		p = filepath.Join(dir, p)
		os.MkdirAll(p, 0o755)
		return p
	}
	file := func(p string) string {
		p = filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x"), 0o600)
		return p
	}
	ca, state := mk("lib/ca"), mk("run/state")
	bundle := file("lib/ca/net/bundles/sb.pem")
	inside, outside := file("run/state/sb/secret"), file("home/secret")
	link := filepath.Join(dir, "statelink")
	os.Symlink(state, link)

	got, err := resolveCovers(
		[]string{ca, link, state, filepath.Join(dir, "missing"), filepath.Join(ca, "net")},
		[]string{inside, outside, outside, filepath.Join(dir, "no-such-secret")},
		[]string{bundle})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range got {
		lines = append(lines, fmt.Sprintf("%s dir=%v keep=%v", strings.TrimPrefix(c.path, dir), c.dir, c.keep))
	}
	want := []string{
		"/lib/ca dir=true keep=[" + bundle + "]",
		"/run/state dir=true keep=[]",
		"/home/secret dir=false keep=[]",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("covers:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range [][]string{{"/"}, {"relative/dir"}} {
		if _, err := resolveCovers(bad, nil, nil); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("covering %q: want an error naming it, got %v", bad[0], err)
		}
	}
}

// TestStartView: the command's view of the host, as root and as another
// user. doorman's directories and the secret files are empty or gone,
// the trust bundle stays, no host process is visible, the capability
// bounding set is keptCaps, /dev holds no disk, and a root command cannot
// unmount what hides the files.
func TestStartView(t *testing.T) {
	path, _ := testNetns(t)
	// World-readable directories, so that only the covers keep "nobody" out.
	base, err := os.MkdirTemp("", "dm-view-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	write := func(p, content string) string {
		p = filepath.Join(base, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey := write("ca/net/ca.key", "CA-KEY-MARKER\n")
	bundle := write("ca/net/bundles/sb.pem", "BUNDLE-MARKER\n")
	statePolicy := write("state/sb-eth0/policy", "STATE-MARKER\n")
	logFile := write("log/sb-eth0.log", "LOG-MARKER\n")
	runRecord := write("run/sb/run.json", "RUN-MARKER\n")
	secret := write("secrets/key", "SECRET-MARKER\n")
	resolv, _ := writeResolvConf(t.TempDir(), addrs("203.0.113.53"), nil)

	probe := strings.Join([]string{
		"for f in " + strings.Join([]string{caKey, statePolicy, logFile, runRecord, secret}, " ") + "; do cat $f 2>/dev/null; done",
		"cat " + bundle,
		"umount " + filepath.Join(base, "ca") + " 2>/dev/null && echo UNMOUNTED; cat " + caKey + " 2>/dev/null",
		"set -- /proc/[0-9]*; echo procs=$#",
		"grep CapBnd /proc/self/status",
		"find /dev -type b | sed 's/^/block=/'",
		"cat /proc/1/cmdline | tr '\\0' ' ' | sed 's/^/init=/'; echo",
	}, "\n")
	for _, user := range []string{"root", "nobody"} {
		t.Run(user, func(t *testing.T) {
			s := &Sandbox{rec: record{NetNS: path}, resolvConf: resolv,
				caRoot: filepath.Join(base, "ca"), stateDir: filepath.Join(base, "state"),
				logDir: filepath.Join(base, "log"), runDir: filepath.Join(base, "run"),
				secrets: []string{secret}, trustBundle: bundle}
			var out bytes.Buffer
			cmd := exec.Command("sh", "-c", probe)
			cmd.Stdout, cmd.Stderr = &out, &out
			if user == "nobody" {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			if err := s.Start(cmd); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			got := out.String()
			for _, m := range []string{"CA-KEY", "STATE", "LOG", "RUN", "SECRET", "UNMOUNTED", "block="} {
				if strings.Contains(got, m) {
					t.Errorf("the command saw %s:\n%s", m, got)
				}
			}
			for _, want := range []string{"BUNDLE-MARKER", "procs=2\n", "init=" + InitArg0,
				fmt.Sprintf("CapBnd:\t%016x\n", capMask(keptCaps))} {
				if !strings.Contains(got, want) {
					t.Errorf("the command's output lacks %q:\n%s", want, got)
				}
			}
		})
	}
}

func capMask(caps []int) uint64 {
	var m uint64
	for _, c := range caps {
		m |= 1 << c
	}
	return m
}
