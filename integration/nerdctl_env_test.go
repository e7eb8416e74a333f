package integration

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/hook"
)

// nerdctlProbeImage is the image every nerdctl test container runs: the
// probe program and the test CA, as for Podman (probeImage).
const nerdctlProbeImage = "localhost/dm-probe:test"

// nerdctlEnv is one test's containerd and nerdctl: a private containerd
// (its own root, state and socket under the test's temp dir) started in a
// host session (startHostSession), and nerdctl pointed at it, at its own
// data root, at the test's CNI configuration directory and at a plugin
// directory holding Debian's reference plugins and doorman. Every
// nerdctl command runs in the host session too, as it would on a host:
// nerdctl's OCI hook, which runs the CNI plugins, is started by runc from
// the shim that containerd started there. Nothing is read from or written
// to the machine's containerd or nerdctl state (libcni, inside nerdctl,
// keeps its result cache in /var/lib/cni/results until each DEL, as for
// Podman).
type nerdctlEnv struct {
	t            *testing.T
	e            *cniEnv
	dir          string
	network      string   // the conflist chaining doorman after the bridge
	plainNetwork string   // a plain bridge network, without doorman
	runtime      string   // doorman-runtime, a link to the binary under test
	cgroupParent string   // a cgroup of this test's own
	globals      []string // nerdctl's global flags
	env          []string
	sessionPID   int
	address      string // containerd's socket
	containerd   *exec.Cmd
	exited       chan error // containerd's Wait
}

// nerdctlResult is what one nerdctl command did.
type nerdctlResult = sessionResult

// newNerdctlEnv writes the configuration, starts the host session and
// containerd, and loads the probe image. t.Cleanup removes every
// container, stops containerd (and any shim it left), ends the session
// and removes the test's cgroups.
func newNerdctlEnv(t *testing.T, e *cniEnv) *nerdctlEnv {
	t.Helper()
	dir := t.TempDir()
	id := strings.TrimPrefix(filepath.Base(e.net.HostNS().Name()), "dm-host-")
	n := &nerdctlEnv{
		t:            t,
		e:            e,
		dir:          dir,
		network:      "dm-nerdctl",
		plainNetwork: "dm-plain",
		runtime:      filepath.Join(dir, "doorman-runtime"),
		cgroupParent: "/dm-nerdctl-" + id,
		address:      filepath.Join(dir, "containerd.sock"),
	}
	cniDir, netDir := n.writeConfig()
	n.globals = []string{
		"--address", n.address,
		"--namespace", "default",
		"--data-root", filepath.Join(dir, "nerdctl"),
		"--cni-path", cniDir,
		"--cni-netconfpath", netDir,
		"--snapshotter", "native", // overlayfs may not stack on this machine's /tmp
		"--cgroup-manager", "cgroupfs",
	}
	n.env = append(envWithoutProxy(), "DOORMAN_RUNTIME_CONFIG="+filepath.Join(dir, "runtime.json"))

	t.Cleanup(func() { removeCgroupParent(t, n.cgroupParent) }) // after the session and every container are gone
	n.sessionPID = startHostSession(t, e)
	n.startContainerd()
	t.Cleanup(n.removeAll)
	n.loadProbeImage()
	return n
}

// writeConfig writes containerd.toml, runtime.json (doorman's wrapper), the
// test's two conflists and the plugin directory, and returns the plugin and
// configuration directories for nerdctl.
func (n *nerdctlEnv) writeConfig() (cniDir, netDir string) {
	t := n.t
	t.Helper()
	cniDir, netDir = filepath.Join(n.dir, "cni-bin"), filepath.Join(n.dir, "net.d")
	for _, d := range []string{cniDir, netDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// nerdctl checks, before every run, that its default network
	// ("bridge", which it writes into netDir) could be set up, so the
	// plugin directory needs Debian's portmap, firewall and tuning too.
	// The tests leave that network alone: its IPAM state would go to the
	// machine's /var/lib/cni.
	plugins, err := os.ReadDir(debianCNIDir)
	if err != nil {
		t.Fatalf("Debian's CNI plugins (apt-get install containernetworking-plugins): %v", err)
	}
	for _, p := range plugins {
		if err := os.Symlink(filepath.Join(debianCNIDir, p.Name()), filepath.Join(cniDir, p.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range []string{filepath.Join(cniDir, "doorman"), n.runtime} {
		if err := os.Symlink(doormanBin(), link); err != nil {
			t.Fatal(err)
		}
	}

	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := json.Marshal(hook.RuntimeConfig{
		Runc:     runc,
		StateDir: n.e.stateDir,
		LogDir:   n.e.logDir,
		// A file that does not exist: a container without doorman's
		// labels has no policy and must be refused.
		DefaultPolicy:    filepath.Join(n.dir, "no-default.policy"),
		UpstreamResolver: n.e.net.DNS.String() + ":53",
	})
	containerd := fmt.Sprintf(`version = 2
root = %q
state = %q
# The CRI plugin would want a CNI setup of its own; nerdctl does not use it.
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q
`, filepath.Join(n.dir, "root"), filepath.Join(n.dir, "state"), n.address, n.address+".ttrpc")
	files := map[string][]byte{
		filepath.Join(n.dir, "runtime.json"):              rt,
		filepath.Join(n.dir, "containerd.toml"):           []byte(containerd),
		filepath.Join(netDir, n.network+".conflist"):      bridgeConflist(t, n.e, n.network, lanA, true),
		filepath.Join(netDir, n.plainNetwork+".conflist"): bridgeConflist(t, n.e, n.plainNetwork, lanB, false),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cniDir, netDir
}

// startContainerd starts the test's containerd in the host session and
// waits until nerdctl reaches it. Its environment names runtime.json, which
// the shims it starts, and so doorman's wrapper, inherit.
func (n *nerdctlEnv) startContainerd() {
	t := n.t
	t.Helper()
	logFile, err := os.Create(filepath.Join(n.dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command("nsenter", "--target", strconv.Itoa(n.sessionPID), "--mount", "--net", "--",
		"containerd", "--config", filepath.Join(n.dir, "containerd.toml"))
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	n.containerd = cmd
	n.exited = make(chan error, 1)
	go func() { n.exited <- cmd.Wait() }()
	t.Cleanup(n.stopContainerd)

	deadline := time.Now().Add(30 * time.Second)
	for {
		r := n.nerdctl("version", "--format", "{{.Server.Components}}")
		if r.exit == 0 {
			return
		}
		select {
		case err := <-n.exited:
			n.exited <- err
			t.Fatalf("containerd exited (%v); its log:\n%s", err, n.containerdLog())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd not ready after 30s (%v); its log:\n%s", r, n.containerdLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *nerdctlEnv) containerdLog() string {
	data, _ := os.ReadFile(filepath.Join(n.dir, "containerd.log"))
	return string(data)
}

// stopContainerd stops containerd and kills any shim of this containerd
// that outlives its containers (a shim normally exits with its last
// container, and containerd never kills one on its way out).
func (n *nerdctlEnv) stopContainerd() {
	t := n.t
	unix.Kill(-n.containerd.Process.Pid, unix.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(15 * time.Second):
		t.Errorf("cleanup: containerd did not stop within 15s; killing it")
		unix.Kill(-n.containerd.Process.Pid, unix.SIGKILL)
		<-n.exited
	}
	for _, pid := range processesWithArg(n.address) {
		t.Errorf("cleanup: a containerd shim (pid %d) was left; killing it", pid)
		unix.Kill(pid, unix.SIGKILL)
	}
}

// processesWithArg lists the processes one of whose arguments is arg.
func processesWithArg(arg string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(append([]byte{0}, cmdline...), []byte("\x00"+arg+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// nerdctl runs nerdctl with args inside the host session.
func (n *nerdctlEnv) nerdctl(args ...string) nerdctlResult {
	n.t.Helper()
	return runInSession(n.t, n.sessionPID, n.env, "nerdctl", n.globals, args)
}

// execExit returns the exit status of the command `nerdctl exec` ran, as
// r with that status: nerdctl v1 exits 1 and reports the command's own
// status in a log line ("exec failed with exit code N").
func execExit(r nerdctlResult) nerdctlResult {
	const marker = "exec failed with exit code "
	if i := strings.LastIndex(r.stderr, marker); i >= 0 && r.exit == 1 {
		digits := r.stderr[i+len(marker):]
		if end := strings.IndexFunc(digits, func(c rune) bool { return c < '0' || c > '9' }); end >= 0 {
			digits = digits[:end]
		}
		if code, err := strconv.Atoi(digits); err == nil {
			r.exit = code
		}
	}
	return r
}

// mustNerdctl is nerdctl that fails the test unless the command succeeds,
// and returns its trimmed stdout.
func (n *nerdctlEnv) mustNerdctl(args ...string) string {
	n.t.Helper()
	r := n.nerdctl(args...)
	if r.exit != 0 {
		n.t.Fatal(r)
	}
	return strings.TrimSpace(r.stdout)
}

// loadProbeImage loads the probe image (see buildProbeImage) as
// nerdctlProbeImage.
func (n *nerdctlEnv) loadProbeImage() {
	t := n.t
	t.Helper()
	rootfs := buildProbeImage(t, n.dir, n.e.net.CAPEM)
	archive := filepath.Join(n.dir, "probe-image.tar")
	if err := writeImageArchive(archive, rootfs, nerdctlProbeImage); err != nil {
		t.Fatalf("write the probe image: %v", err)
	}
	n.mustNerdctl("load", "--input", archive)
}

// writeImageArchive writes an image whose one layer is the tar file
// rootfs, tagged ref, as `docker save` would (manifest.json, the image
// config and the layer tar), which `nerdctl load` reads.
func writeImageArchive(path, rootfs, ref string) error {
	layer, err := os.ReadFile(rootfs)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(layer)
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Env": []string{"PATH=/"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	manifest, _ := json.Marshal([]map[string]any{{
		"Config":   "config.json",
		"RepoTags": []string{ref},
		"Layers":   []string{"layer.tar"},
	}})

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	out := tar.NewWriter(f)
	for _, file := range []struct {
		name string
		data []byte
	}{{"layer.tar", layer}, {"config.json", config}, {"manifest.json", manifest}} {
		if err = out.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.data))}); err != nil {
			break
		}
		if _, err = out.Write(file.data); err != nil {
			break
		}
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeAll removes every container, so that their poststop hooks (CNI
// DEL, doorman's teardown) run while containerd is still there.
func (n *nerdctlEnv) removeAll() {
	ids := strings.Fields(n.nerdctl("ps", "--all", "--quiet").stdout)
	if len(ids) > 0 {
		if r := n.nerdctl(append([]string{"rm", "--force"}, ids...)...); r.exit != 0 {
			n.t.Errorf("cleanup: %v", r)
		}
	}
	if left := n.nerdctl("ps", "--all", "--quiet"); left.exit != 0 || strings.TrimSpace(left.stdout) != "" {
		n.t.Errorf("cleanup: containers left: %v", left)
	}
}

// runArgs are the `nerdctl run` options every test container gets: the
// test's resolvers and cgroup parent, and no pulls.
func (n *nerdctlEnv) runArgs() []string {
	return []string{
		"--dns", n.e.net.DNS.String(), "--dns", n.e.net.DNS6.String(),
		"--cgroup-parent", n.cgroupParent,
		"--pull", "never",
	}
}
