package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The tests of `doorman install-cni` run the real binary, built once.
var (
	buildOnce   sync.Once
	builtBinary string
	buildErr    error
)

func doormanBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cniinstall-doorman-")
		if err != nil {
			buildErr = err
			return
		}
		builtBinary = filepath.Join(dir, "doorman")
		cmd := exec.Command("go", "build", "-o", builtBinary, "github.com/doorman-net/doorman/cmd/doorman")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return builtBinary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBinary != "" {
		os.RemoveAll(filepath.Dir(builtBinary))
	}
	os.Exit(code)
}

// installCNI runs `doorman install-cni args...` for n and returns its exit
// status and log lines.
func (n *node) installCNI(t *testing.T, args ...string) (int, []map[string]any, string) {
	t.Helper()
	cmd := exec.Command(doormanBinary(t), append([]string{"install-cni", "--cni-bin-dir", n.binDir, "--cni-conf-dir", n.confDir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, jsonLines(stderr.String()), stderr.String()
}

// jsonLines decodes the JSON lines of a log, skipping other lines (the
// final error message).
func jsonLines(s string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(s, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func TestCommandOnceAndUninstall(t *testing.T) {
	bin := doormanBinary(t)
	n := newNode(t, map[string][]byte{
		"10-mynet.conf":       testdata(t, "10-mynet.conf"),
		"20-flannel.conflist": testdata(t, "10-flannel.conflist"),
	})
	cfg := filepath.Join(t.TempDir(), "install-cni.json")
	os.WriteFile(cfg, []byte(`{"mode": "none", "excludeNamespaces": ["kube-system", "doorman-system"]}`), 0o644)

	code, logs, stderr := n.installCNI(t, "--once", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if same, _ := sameContent(bin, filepath.Join(n.binDir, "doorman")); !same {
		t.Error("the running binary was not installed")
	}
	got := n.read(t, "10-mynet.conflist")
	e := assertOneEntry(t, got)
	if e["mode"] != "none" {
		t.Errorf("entry %v: want the --config mode", e)
	}
	var files []string
	for _, l := range logs {
		files = append(files, l["file"].(string))
		if l["level"] != "INFO" || l["reason"] == "" {
			t.Errorf("log line %v", l)
		}
	}
	if strings.Join(files, " ") != filepath.Join(n.binDir, "doorman")+" "+n.path("10-mynet.conflist") {
		t.Errorf("log lines name %v, want the binary and the conflist", files)
	}

	snap := n.snapshot(t)
	if code, logs, stderr := n.installCNI(t, "--once", "--config", cfg); code != 0 || len(logs) != 0 {
		t.Errorf("second run: exit %d, logs %v: %s", code, logs, stderr)
	}
	n.assertUnchanged(t, snap)
	if code, _, stderr := n.installCNI(t, "--check", "--config", cfg); code != 0 {
		t.Errorf("--check: exit %d: %s", code, stderr)
	}
	// Another config is not as installed.
	if code, _, stderr := n.installCNI(t, "--check"); code != 1 || !strings.Contains(stderr, "not as installed") {
		t.Errorf("--check with other settings: exit %d: %s", code, stderr)
	}

	if code, _, stderr := n.installCNI(t, "--uninstall", "--once"); code != 0 {
		t.Fatalf("--uninstall: exit %d: %s", code, stderr)
	}
	if back := n.read(t, "10-mynet.conf"); !bytes.Equal(back, testdata(t, "10-mynet.conf")) {
		t.Errorf("not restored:\n%s", back)
	}
	if _, err := os.Stat(n.path("10-mynet.conflist")); !errors.Is(err, os.ErrNotExist) {
		t.Error("the conflist is still there")
	}
	if _, err := os.Stat(filepath.Join(n.binDir, "doorman")); err != nil {
		t.Errorf("the binary was removed: %v", err)
	}
	if code, _, stderr := n.installCNI(t, "--check", "--uninstall"); code != 0 {
		t.Errorf("--check --uninstall: exit %d: %s", code, stderr)
	}
	if code, _, _ := n.installCNI(t, "--check", "--config", cfg); code != 1 {
		t.Errorf("--check after uninstall: exit %d", code)
	}
}

func TestCommandBadConfig(t *testing.T) {
	n := newNode(t, map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")})
	cfg := filepath.Join(t.TempDir(), "install-cni.json")
	os.WriteFile(cfg, []byte(`{"mode": "allowlist", "excludeNamespace": ["kube-system"]}`), 0o644)
	snap := n.snapshot(t)
	code, _, stderr := n.installCNI(t, "--once", "--config", cfg)
	if code != 2 || !strings.Contains(stderr, `unknown key "excludeNamespace"`) || !strings.Contains(stderr, cfg) {
		t.Errorf("exit %d: %s", code, stderr)
	}
	n.assertUnchanged(t, snap)
	if code, _, _ := n.installCNI(t, "--once", "extra"); code != 2 {
		t.Errorf("extra argument: exit %d", code)
	}
}

func TestCommandNoPrimary(t *testing.T) {
	n := newNode(t, nil)
	if code, _, stderr := n.installCNI(t, "--once"); code != 1 || !strings.Contains(stderr, "no valid network configuration") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	n.confDir = filepath.Join(n.confDir, "missing")
	if code, _, stderr := n.installCNI(t, "--once"); code != 1 || !strings.Contains(stderr, "no such file or directory") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// startInstallCNI starts `doorman install-cni args...` for n, killing it
// at the end of the test if it is still running.
func (n *node) startInstallCNI(t *testing.T, args ...string) (*exec.Cmd, *logBuffer) {
	t.Helper()
	cmd := exec.Command(doormanBinary(t), append([]string{"install-cni", "--cni-bin-dir", n.binDir, "--cni-conf-dir", n.confDir}, args...)...)
	log := &logBuffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, log
}

// TestCommandSIGTERMLeavesEntry: the DaemonSet's container stopped (a
// rollout, a node drain) leaves doorman's entry where it is.
func TestCommandSIGTERMLeavesEntry(t *testing.T) {
	orig := testdata(t, "10-calico.conflist")
	n := newNode(t, map[string][]byte{"10-calico.conflist": orig})
	cmd, log := n.startInstallCNI(t)
	p := n.path("10-calico.conflist")
	eventually(t, "the entry", func() bool { return entryCount(p) == 1 })
	// The watch is live: a rewrite by the primary CNI is repaired.
	replaceAtomically(t, p, orig)
	eventually(t, "the entry back", func() bool { return entryCount(p) == 1 && log.find(t, "wrote", p, "rewritten") != nil })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, log.buf.String())
	}
	if entryCount(p) != 1 {
		t.Error("the entry is gone after SIGTERM")
	}
	found := false
	for _, l := range log.lines(t) {
		if l["msg"] == "stopping" && strings.Contains(l["reason"].(string), "stays in place") {
			found = true
		}
	}
	if !found {
		t.Errorf("no stopping line: %s", log.buf.String())
	}
}

// TestCommandUninstallStaysUp: --uninstall without --once, as a
// DaemonSet's container, uninstalls and stays up until SIGTERM.
func TestCommandUninstallStaysUp(t *testing.T) {
	orig := testdata(t, "10-flannel.conflist")
	n := newNode(t, map[string][]byte{"10-flannel.conflist": orig})
	if code, _, stderr := n.installCNI(t, "--once"); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	cmd, log := n.startInstallCNI(t, "--uninstall")
	eventually(t, "the uninstalled line", func() bool {
		for _, l := range log.lines(t) {
			if l["msg"] == "uninstalled" {
				return true
			}
		}
		return false
	})
	if got := n.read(t, "10-flannel.conflist"); !bytes.Equal(got, orig) {
		t.Errorf("not restored:\n%s", got)
	}
	if cmd.ProcessState != nil {
		t.Fatal("exited")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v", err)
	}
}
