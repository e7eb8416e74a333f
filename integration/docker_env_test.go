package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/hostlayer"
	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/integration/hostsession"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// dockerProbeImage is the image of every Docker test container: the static
// probe (integration/probe), the test CA, and busybox for `env` and `sh`.
const dockerProbeImage = "dm-probe:test"

// dockerEnv is one test's Docker: the fake internet, the root namespace's
// link to it, and a dockerd of the test's own (its own data root, exec
// root, socket, pidfile, bridge and cgroup parent, everything under one
// temporary directory) whose default runtime is doorman's runc wrapper.
// Nothing is read from or written to the machine's Docker.
//
// Its runtime.json sends doorman's state and decision logs to the test's
// directories, names the daemon-wide default policy (defaultPolicy), and
// makes the proxies resolve through the fake internet's DNS server.
type dockerEnv struct {
	t                *testing.T
	net              *testnet.Net
	api, evil, other *testnet.Host
	id               string // unique per test: names links, bridges, cgroups
	dir              string
	stateDir, logDir string
	defaultPolicy    string             // the daemon-wide default policy file
	runtime          hook.RuntimeConfig // what runtime.json says (see optOut)
	dataRoot         string
	execRoot         string
	socket           string
	bridge           string // dockerd's default bridge
	cgroupParent     string
	dockerBin        string
	cliEnv           []string
	dockerd          *exec.Cmd
	dockerdExited    chan error
}

// dockerResult is what one docker command did.
type dockerResult struct {
	args           []string
	exit           int
	stdout, stderr string
}

func (r dockerResult) String() string {
	return fmt.Sprintf("docker %s: exit %d, stdout %q, stderr %q", strings.Join(r.args, " "), r.exit, r.stdout, r.stderr)
}

// dockerTools returns the docker CLI to use (Debian's, matching its
// dockerd) or skips the test when Docker or runc is not installed.
func dockerTools(t *testing.T) string {
	t.Helper()
	skipUnlessRoot(t)
	for _, tool := range []string{"dockerd", "runc", "containerd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install docker.io runc): %v", tool, err)
		}
	}
	// Debian's client first: another docker on PATH (a newer static
	// client in /usr/local/bin) may not speak this daemon's API version.
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		return "/usr/bin/docker"
	}
	p, err := exec.LookPath("docker")
	if err != nil {
		t.Skipf("the docker client is not installed (apt-get install docker.io): %v", err)
	}
	return p
}

// newDockerEnv builds the fake internet, links the root namespace to it,
// writes doorman's and dockerd's configuration, starts dockerd and imports
// the probe image. t.Cleanup removes every container and network, stops
// dockerd, checks that doorman left no state and no proxy, and removes the
// links, routes, cgroups and directories.
func newDockerEnv(t *testing.T) *dockerEnv {
	t.Helper()
	dockerBin := dockerTools(t)
	lockDockerTests(t)
	sweepStaleDockerLinks(t)
	n := testnet.New(t)
	id := strings.TrimPrefix(n.HostNS().Name(), "dm-host-")
	dir, err := os.MkdirTemp("", "dm-docker-")
	if err != nil {
		t.Fatal(err)
	}
	d := &dockerEnv{
		t:             t,
		net:           n,
		api:           n.AddHost(apiName, apiAddr4, apiAddr6),
		evil:          n.AddHost(evilName, evilAddr4, evilAddr6),
		other:         n.AddHost(otherName, otherAddr),
		id:            id,
		dir:           dir,
		stateDir:      filepath.Join(dir, "state"),
		logDir:        filepath.Join(dir, "log"),
		defaultPolicy: filepath.Join(dir, "default.policy"),
		dataRoot:      filepath.Join(dir, "data"),
		execRoot:      filepath.Join(dir, "exec"),
		socket:        filepath.Join(dir, "docker.sock"),
		bridge:        "dmdk" + id,
		cgroupParent:  "/dm-docker-" + id,
		dockerBin:     dockerBin,
	}
	t.Cleanup(d.removeDir) // last: after dockerd has stopped
	d.cliEnv = append(envWithoutProxy(), "DOCKER_HOST=unix://"+d.socket, "DOCKER_CONFIG="+filepath.Join(dir, "cli"))

	linkRootToNet(t, n, id, dockerBridge4.Masked(), dockerUserNet4)
	addRootBridge(t, d.bridge, dockerBridge4)
	t.Cleanup(func() { removeCgroupParent(t, d.cgroupParent) })
	t.Cleanup(removeCreatedDirs(dockerGlobalDirs...))
	d.writeConfig()
	d.startDockerd()
	t.Cleanup(d.removeAll)
	d.importProbeImage()
	return d
}

// dockerTestLock serializes the Docker tests of every test process on the
// machine: they all need the root namespace's routes to the fake internet,
// which only one can hold at a time.
const dockerTestLock = "/run/lock/doorman-docker-tests.lock"

// lockDockerTests waits (up to 10 minutes) until no other test process
// runs a Docker test, and holds the lock until t's cleanup has run.
func lockDockerTests(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(dockerTestLock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("the Docker tests' lock: %v", err)
	}
	start := time.Now()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Since(start) > 10*time.Minute {
			f.Close()
			t.Fatalf("the Docker tests' lock %s: %v (waited %v)", dockerTestLock, err, time.Since(start).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %v for another test process's Docker test", waited.Round(time.Millisecond))
	}
	t.Cleanup(func() { f.Close() }) // registered first: released last
}

// writeConfig writes runtime.json (doorman's wrapper), the default policy
// and daemon.json.
func (d *dockerEnv) writeConfig() {
	d.t.Helper()
	link := filepath.Join(d.dir, "doorman-runtime")
	if err := os.Symlink(doormanBin(), link); err != nil {
		d.t.Fatal(err)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		d.t.Fatal(err)
	}
	allowICMP := false
	d.runtime = hook.RuntimeConfig{
		Runc:             runc,
		DockerRoot:       d.dataRoot,
		StateDir:         d.stateDir,
		LogDir:           d.logDir,
		DefaultPolicy:    d.defaultPolicy,
		UpstreamResolver: d.net.DNS.String() + ":53",
		AllowICMP:        &allowICMP,
	}
	runtimes := map[string]any{"doorman": map[string]any{"path": link}}
	if dir := runscDirIfBuilt(); dir != "" {
		// gVisor through the same wrapper: dockerd passes runtimeArgs
		// first, and runtime.json says which runsc, with which flags.
		d.runtime.Runtimes = map[string]hook.RuntimeEntry{"runsc": {Path: filepath.Join(dir, "runsc"), Args: runscFlags}}
		runtimes["doorman-runsc"] = map[string]any{"path": link, "runtimeArgs": []string{"--doorman-runtime=runsc"}}
	}
	rt, _ := json.Marshal(d.runtime)
	daemon, _ := json.Marshal(map[string]any{
		"runtimes":        runtimes,
		"default-runtime": "doorman",
		"cgroup-parent":   d.cgroupParent,
		"storage-driver":  "vfs",
		// Docker 20.10 writes its identity key to /etc/docker/key.json
		// unless told otherwise.
		"deprecated-key-path": filepath.Join(d.dir, "key.json"),
	})
	files := map[string][]byte{
		"runtime.json": rt,
		"daemon.json":  daemon,
		// The daemon-wide default: containers without doorman labels
		// may reach other.example.test only.
		"default.policy": []byte("mode: allowlist\n" + otherName + "\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(d.dir, name), data, 0o644); err != nil {
			d.t.Fatal(err)
		}
	}
}

// optOut turns the DNS filter and the host-side layer off in runtime.json
// ("dnsFilter": false, "hostLayer": false) for the containers created until
// t ends, when the default (both on) comes back. The wrapper reads
// runtime.json at every runc call, as an operator's edit would take effect.
func (d *dockerEnv) optOut(t *testing.T) {
	t.Helper()
	off := false
	cfg := d.runtime
	cfg.DNSFilter, cfg.HostLayer = &off, &off
	d.writeRuntimeConfig(t, cfg)
	t.Cleanup(func() { d.writeRuntimeConfig(t, d.runtime) })
}

// writeRuntimeConfig replaces runtime.json with cfg, atomically: a runc
// call of another container never reads half of it.
func (d *dockerEnv) writeRuntimeConfig(t *testing.T, cfg hook.RuntimeConfig) {
	t.Helper()
	data, _ := json.Marshal(cfg)
	path := filepath.Join(d.dir, "runtime.json")
	if err := os.WriteFile(path+".new", data, 0o644); err != nil {
		t.Fatalf("rewrite runtime.json: %v", err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatalf("rewrite runtime.json: %v", err)
	}
}

// startDockerd starts the test's dockerd and waits until it answers. It
// leaves the root namespace's firewall and forwarding alone (the test owns
// forwarding, see enableRootForwarding), and uses the bridge the test made.
func (d *dockerEnv) startDockerd() {
	d.t.Helper()
	logFile, err := os.Create(filepath.Join(d.dir, "dockerd.log"))
	if err != nil {
		d.t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command("dockerd",
		"--config-file", filepath.Join(d.dir, "daemon.json"),
		"--data-root", d.dataRoot,
		"--exec-root", d.execRoot,
		"--pidfile", filepath.Join(d.dir, "docker.pid"),
		"--host", "unix://"+d.socket,
		"--bridge", d.bridge,
		"--iptables=false", "--ip-forward=false", "--ip-masq=false",
		"--userland-proxy=false",
	)
	// The wrapper finds its configuration through dockerd, containerd and
	// the shim, which all pass their environment on.
	cmd.Env = append(envWithoutProxy(), "DOORMAN_RUNTIME_CONFIG="+filepath.Join(d.dir, "runtime.json"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		d.t.Fatalf("start dockerd: %v", err)
	}
	d.dockerd = cmd
	d.dockerdExited = make(chan error, 1)
	go func() { d.dockerdExited <- cmd.Wait() }()
	d.t.Cleanup(d.stopDockerd)

	deadline := time.Now().Add(30 * time.Second)
	for {
		r := d.docker("version", "--format", "{{.Server.Version}}")
		if r.exit == 0 {
			break
		}
		select {
		case err := <-d.dockerdExited:
			d.dockerdExited <- err
			d.t.Fatalf("dockerd exited (%v); its log:\n%s", err, d.dockerdLog())
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("dockerd not ready after 30s (%v); its log:\n%s", r, d.dockerdLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *dockerEnv) dockerdLog() string {
	data, _ := os.ReadFile(filepath.Join(d.dir, "dockerd.log"))
	return string(data)
}

// stopDockerd stops dockerd (which stops the containerd it started) and,
// should either outlive a grace period, kills them by pid.
func (d *dockerEnv) stopDockerd() {
	if d.dockerd == nil {
		return
	}
	containerd := readPidfile(filepath.Join(d.execRoot, "containerd", "containerd.pid"))
	d.dockerd.Process.Signal(unix.SIGTERM)
	select {
	case <-d.dockerdExited:
	case <-time.After(30 * time.Second):
		d.t.Errorf("cleanup: dockerd did not stop within 30s; killing it")
		d.dockerd.Process.Kill()
		<-d.dockerdExited
	}
	if containerd > 0 {
		if !waitPidExit(containerd, 10*time.Second) {
			d.t.Errorf("cleanup: containerd (pid %d) outlived dockerd; killing it", containerd)
			unix.Kill(containerd, unix.SIGKILL)
		}
	}
}

// removeAll removes every container and user-defined network, so that the
// runtime's poststop hooks run while dockerd is still there, then checks
// that doorman left nothing behind.
func (d *dockerEnv) removeAll() {
	if ids := d.docker("ps", "--all", "--quiet", "--no-trunc"); ids.exit == 0 {
		if list := strings.Fields(ids.stdout); len(list) > 0 {
			if r := d.docker(append([]string{"rm", "--force", "--volumes"}, list...)...); r.exit != 0 {
				d.t.Errorf("cleanup: %v", r)
			}
		}
	}
	if r := d.docker("network", "prune", "--force"); r.exit != 0 {
		d.t.Errorf("cleanup: %v", r)
	}
	d.assertNoSandboxes()
}

// assertNoSandboxes checks that no state and no proxy of this test's
// doorman is left (waiting a little for proxies to exit).
func (d *dockerEnv) assertNoSandboxes() {
	states, _ := sandbox.List(d.stateDir)
	for _, s := range states {
		d.t.Errorf("doorman state left behind: %s (proxy pid %d)", s.Key, s.PID)
		sandbox.Teardown(d.stateDir, s.Key)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := proxiesUnder(d.dir)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.t.Errorf("doorman proxies left behind: %v", pids)
			for _, pid := range pids {
				unix.Kill(pid, unix.SIGKILL)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeDir removes the test's directory, unmounting first whatever a
// crashed dockerd may have left mounted below it.
func (d *dockerEnv) removeDir() {
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	var below []string
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], d.dir+"/") {
			below = append(below, f[4])
		}
	}
	slices.Reverse(below)
	for _, m := range below {
		d.t.Errorf("cleanup: %s is still mounted; unmounting it", m)
		unix.Unmount(m, unix.MNT_DETACH)
	}
	if err := os.RemoveAll(d.dir); err != nil {
		d.t.Errorf("cleanup: %v", err)
	}
}

// docker runs the docker CLI against the test's dockerd.
func (d *dockerEnv) docker(args ...string) dockerResult {
	return d.dockerStdin(nil, args...)
}

// dockerStdin is docker with stdin read from in.
func (d *dockerEnv) dockerStdin(in *os.File, args ...string) dockerResult {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.dockerBin, args...)
	cmd.Env = d.cliEnv
	if in != nil {
		cmd.Stdin = in
	}
	cmd.WaitDelay = 5 * time.Second
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := dockerResult{args: args, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		r.exit = ee.ExitCode()
	default:
		r.exit = -1
		r.stderr += err.Error()
	}
	return r
}

// mustDocker is docker that fails the test unless the command succeeds,
// and returns its trimmed stdout.
func (d *dockerEnv) mustDocker(args ...string) string {
	d.t.Helper()
	r := d.docker(args...)
	if r.exit != 0 {
		d.t.Fatal(r)
	}
	return strings.TrimSpace(r.stdout)
}

// runArgs are the options every test container gets: the fake internet's
// resolver and no pulls (there is no registry, and nothing may leave).
func (d *dockerEnv) runArgs() []string {
	return []string{"--pull", "never", "--dns", d.net.DNS.String()}
}

// startProbe starts a detached container of the probe image that sleeps,
// with args as extra `docker run` options, and returns its full id.
func (d *dockerEnv) startProbe(name string, args ...string) string {
	d.t.Helper()
	return d.mustDocker(slices.Concat([]string{"run", "--detach", "--name", name}, d.runArgs(), args,
		[]string{dockerProbeImage, "/probe", "sleep", "10m"})...)
}

// probe runs the probe inside container id.
func (d *dockerEnv) probe(id string, args ...string) dockerResult {
	return d.docker(slices.Concat([]string{"exec", id, "/probe"}, args)...)
}

// pid is the host pid of container id's init process.
func (d *dockerEnv) pid(id string) int {
	d.t.Helper()
	pid, err := strconv.Atoi(d.mustDocker("inspect", "--format", "{{.State.Pid}}", id))
	if err != nil || pid <= 0 {
		d.t.Fatalf("pid of container %s: %d %v", id, pid, err)
	}
	return pid
}

// state is doorman's recorded state of container id.
func (d *dockerEnv) state(id string) *sandbox.State {
	d.t.Helper()
	s, err := sandbox.Load(d.stateDir, hook.Key(id))
	if err != nil {
		d.t.Fatalf("doorman state of container %s: %v", id, err)
	}
	return s
}

// importProbeImage builds the probe statically and imports a rootfs with
// it (/probe), the test CA (/ca.pem) and busybox as dockerProbeImage.
func (d *dockerEnv) importProbeImage() {
	d.t.Helper()
	archive := buildProbeImage(d.t, d.dir, d.net.CAPEM)
	f, err := os.Open(archive)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	if r := d.dockerStdin(f, "import", "-", dockerProbeImage); r.exit != 0 {
		d.t.Fatal(r)
	}
}

// buildProbeImage writes dir/probe-rootfs.tar: the static probe as /probe,
// caPEM as /ca.pem, and busybox (Debian's busybox-static) with the applets
// the tests use under /bin. It returns the archive's path.
func buildProbeImage(t testing.TB, dir string, caPEM []byte) string {
	t.Helper()
	rootfs := filepath.Join(dir, "probe-rootfs")
	for _, sub := range []string{"bin", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(rootfs, "probe"), "github.com/doorman-net/doorman/integration/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox for the probe image (apt-get install busybox-static): %v", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), busybox, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "env", "cat", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	archive := filepath.Join(dir, "probe-rootfs.tar")
	if err := writeTar(archive, rootfs); err != nil {
		t.Fatalf("archive the probe rootfs: %v", err)
	}
	return archive
}

// containerEnv returns the environment `docker exec` gives a process in
// container id, as KEY → value.
func (d *dockerEnv) containerEnv(id string) map[string]string {
	d.t.Helper()
	return parseEnv(d.mustDocker("exec", id, "env"))
}

func parseEnv(out string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// processEnv reads the environment of a host process (a container's init:
// what the runtime started it with).
func processEnv(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("environment of pid %d: %v", pid, err)
	}
	return parseEnv(strings.ReplaceAll(string(data), "\x00", "\n"))
}

// readDecisions returns the decision lines of a doorman decision log.
func readDecisions(path string) []map[string]any {
	data, _ := os.ReadFile(path)
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "connection" {
			out = append(out, m)
		}
	}
	return out
}

// waitLogDecision waits until the decision log at path has a line pred
// accepts, and returns it.
func waitLogDecision(t *testing.T, path string, pred func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range readDecisions(path) {
			if pred(m) {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	data, _ := os.ReadFile(path)
	t.Fatalf("no matching decision line in %s; log:\n%s", path, data)
	return nil
}

// waitDNSDecision waits until the log at path has a "dns" line (the DNS
// filter's) for name with verdict.
func (d *dockerEnv) waitDNSDecision(t *testing.T, path, name, verdict string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if countDNSDecisions(path, name, verdict) > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	data, _ := os.ReadFile(path)
	t.Fatalf("no dns %s line for %s in %s; log:\n%s", verdict, name, path, data)
}

// countDNSDecisions counts the DNS filter's lines in the log at path for
// name with verdict ("" for any name or verdict).
func countDNSDecisions(path, name, verdict string) int {
	data, _ := os.ReadFile(path)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil || m["msg"] != "dns" {
			continue
		}
		if (name == "" || strings.TrimSuffix(fmt.Sprint(m["name"]), ".") == name) && (verdict == "" || m["verdict"] == verdict) {
			n++
		}
	}
	return n
}

// resolveTo are the probe's `get` options that connect to h's first
// address whenever h's name is dialled. A name the policy denies does not
// resolve in a sandbox with the DNS filter, so a check of what the proxy
// does with a denied name connects by address.
func (d *dockerEnv) resolveTo(h *testnet.Host) []string {
	return []string{"--resolve", h.Name() + ":" + h.Addrs()[0].String()}
}

// assertLookupRefused checks that the denied name h does not resolve in
// container id, whose resolver (server) goes through the DNS filter: asked
// directly, the filter answers REFUSED, and a client's lookup fails (Go
// says "server misbehaving").
func assertLookupRefused(t *testing.T, probe func(args ...string) dockerResult, server netip.Addr, name string) {
	t.Helper()
	if r := probe("dns", server.String(), name); r.exit != 0 || !strings.Contains(r.stdout, "rcode: REFUSED") {
		t.Errorf("DNS query for the denied name %s: want the filter's REFUSED, got %v", name, r)
	}
	if r := probe("get", "http://"+name+"/"); r.exit != 1 || !strings.Contains(r.stderr, "lookup "+name) || !strings.Contains(r.stderr, "server misbehaving") {
		t.Errorf("GET of the denied name %s: want its lookup to fail, got %v", name, r)
	}
}

// hostLayerHolds reports whether the host-side layer in the network
// namespace at nsPath (the runtime's: where the sandbox's proxy runs) has
// its chain for sandbox key, in table inet doorman-host.
func hostLayerHolds(t *testing.T, nsPath, key string) bool {
	t.Helper()
	var chains []*nftables.Chain
	err := nftIn(nsPath, func(c *nftables.Conn) (err error) {
		chains, err = c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		return err
	})
	if err != nil {
		t.Fatalf("host-side layer in %s: list chains: %v", nsPath, err)
	}
	for _, ch := range chains {
		// enforce/hostlayer names a sandbox's chain "sbx-" + its key.
		if ch.Table.Name == hostlayer.TableName && ch.Name == "sbx-"+key {
			return true
		}
	}
	return false
}

// countDecisions counts the lines of the log at path that pred accepts.
func countDecisions(path string, pred func(map[string]any) bool) int {
	n := 0
	for _, m := range readDecisions(path) {
		if pred(m) {
			n++
		}
	}
	return n
}

// proxiesUnder lists doorman proxy processes whose command line names a
// path under dir (their policy file, their log): those of one test.
func proxiesUnder(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && args[1] == "proxy" && strings.Contains(string(cmdline), "\x00"+dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// netnsHeld reports whether any process still has the network namespace
// with inode ino (as its namespace, or an open file of it), or a bind
// mount under /proc/self/mountinfo names a file in nsfs with that inode.
// A namespace no one holds is gone, and with it any ruleset inside.
// (Sockets also hold a namespace but are not visible here: check that
// the processes that could own them, the proxies, are gone too.)
func netnsHeld(ino uint64) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil && st.Ino == ino {
			return true
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		for _, fd := range fds {
			link, _ := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name()))
			if link == fmt.Sprintf("net:[%d]", ino) {
				return true
			}
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		// ... ROOT MOUNTPOINT ... - nsfs nsfs rw: ROOT is "net:[INO]".
		if f := strings.Fields(line); len(f) > 4 && f[3] == fmt.Sprintf("net:[%d]", ino) {
			return true
		}
	}
	return false
}

// netnsInode is the inode of the network namespace of process pid.
func netnsInode(t *testing.T, pid int) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err != nil {
		t.Fatalf("network namespace of pid %d: %v", pid, err)
	}
	return st.Ino
}

// dockerGlobalDirs are the directories outside its data and exec roots
// that dockerd (plugin sockets) and containerd's shims (their sockets)
// create at fixed paths, parents first.
var dockerGlobalDirs = []string{"/run/docker", "/run/docker/plugins", "/run/containerd", "/run/containerd/s"}

// removeCreatedDirs notes which of dirs do not exist yet and returns a
// cleanup that removes those of them that are empty by then (deepest
// first). A directory another daemon is using is not empty, and stays.
func removeCreatedDirs(dirs ...string) func() {
	var absent []string
	for _, dir := range dirs {
		if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, dir)
		}
	}
	return func() {
		for _, dir := range slices.Backward(absent) {
			os.Remove(dir) // only if empty
		}
	}
}

// readPidfile returns the pid in path, or 0.
func readPidfile(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// waitPidExit waits until pid is gone (or a zombie).
func waitPidExit(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(data, ')'); i > 0 && i+2 < len(data) && data[i+2] == 'Z' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroupParent removes a cgroup parent of the test (and the empty
// cgroups below it) from every hierarchy of this machine.
func removeCgroupParent(t testing.TB, parent string) {
	if err := hostsession.RemoveCgroupParent(parent); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}
