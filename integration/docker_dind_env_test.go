package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/sandbox"
)

// Paths inside the Docker-in-Docker ("outer") container.
const (
	dindImage         = "dm-dind:test"
	dindDoormanDir    = "/doorman" // the doorman binary (bind-mounted) and its doorman-runtime link
	dindStateDir      = "/run/doorman"
	dindLogDir        = "/var/log/doorman"
	dindDefaultPolicy = "/etc/doorman/default.policy"
	dindDocker        = "/usr/bin/docker" // the host's, through the /usr bind mount
)

// The inner daemon's networks, inside the outer container's namespace
// (its own addresses are translated to the outer container's on the way
// out, so none of these needs a route anywhere else).
const (
	dindBridgeIP    = "198.51.100.225/28"
	dindUserSubnet  = "198.51.100.240/28"
	dindUserGateway = "198.51.100.241"
)

// dindEnv is a Docker-in-Docker setup on top of a dockerEnv: an outer
// container, started by the test's dockerd through doorman (so it is itself
// a sandbox with its own policy), runs an inner dockerd whose default
// runtime is doorman's wrapper too. The outer image is nearly empty: the
// host's /usr (and, on a merged-/usr host, /bin, /sbin, /lib and /lib64
// through links into it) and /etc/alternatives are bind-mounted read-only,
// so the inner dockerd, containerd and runc are the host's. The doorman
// binary and the inner runtime.json are bind-mounted too.
type dindEnv struct {
	*dockerEnv
	outer        string // the outer container's id
	outerPID     int    // its init (the inner dockerd), a host pid
	cgroupParent string // the inner daemon's cgroup parent
	// innerRuntime is what the inner runtime.json says, and
	// innerRuntimeJSON its host path (bind-mounted; see optOutInner).
	innerRuntime     hook.RuntimeConfig
	innerRuntimeJSON string
}

// newDinD starts the outer container with outerArgs (its doorman labels)
// and waits for the inner dockerd; t.Cleanup removes every inner container
// before the outer one goes, and the inner daemon's cgroups after.
func newDinD(t *testing.T, d *dockerEnv, outerArgs ...string) *dindEnv {
	t.Helper()
	e := &dindEnv{dockerEnv: d, cgroupParent: "/dm-dind-" + d.id}
	t.Cleanup(func() { removeCgroupParent(t, e.cgroupParent) })
	runtimeJSON := e.importOuterImage()

	run := []string{"run", "--detach", "--name", "dm-outer-" + d.id}
	run = append(run, d.runArgs()...)
	run = append(run, outerArgs...)
	run = append(run,
		// TESTBED.md: --privileged fails here (no CAP_SYS_RESOURCE in the
		// bounding set); this is the set that works.
		"--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--security-opt", "systempaths=unconfined",
		"-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"--tmpfs", "/var/lib/docker:exec",
		"-v", "/usr:/usr:ro", "-v", "/etc/alternatives:/etc/alternatives:ro",
		"-v", doormanBin()+":"+dindDoormanDir+"/doorman:ro",
		"-v", runtimeJSON+":"+hook.RuntimeConfigFile+":ro",
		"-e", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	)
	for _, dir := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
			run = append(run, "-v", dir+":"+dir+":ro") // not a merged-/usr host
		}
	}
	run = append(run, dindImage, "dockerd", "--storage-driver=vfs")
	e.outer = d.mustDocker(run...)
	t.Cleanup(e.removeInner)
	e.outerPID = d.pid(e.outer)

	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.inner("version", "--format", "{{.Server.Version}}")
		if r.exit == 0 {
			break
		}
		if time.Now().After(deadline) {
			logs := d.docker("logs", "--tail", "30", e.outer)
			t.Fatalf("the inner dockerd is not ready after 30s (%v); its log:\n%s%s", r, logs.stdout, logs.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.importInnerProbeImage()
	return e
}

// importOuterImage imports the outer image: directories, the merged-/usr
// links, the doorman-runtime link, the inner daemon.json and the inner
// default policy. It returns the host path of the inner runtime.json,
// which is bind-mounted.
func (e *dindEnv) importOuterImage() string {
	t := e.t
	t.Helper()
	rootfs := filepath.Join(e.dir, "dind-rootfs")
	for _, sub := range []string{"usr", "etc/alternatives", "etc/docker", "etc/doorman", "var/lib/docker", "var/log",
		"run", "tmp", "proc", "sys", "dev", strings.TrimPrefix(dindDoormanDir, "/")} {
		if err := os.MkdirAll(filepath.Join(rootfs, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"var/run":                 "/run",
		"doorman/doorman-runtime": "doorman", // dockerd's runtime path; doorman acts by this name
	}
	for _, dir := range []string{"bin", "sbin", "lib", "lib64"} {
		if target, err := os.Readlink("/" + dir); err == nil {
			links[dir] = target // merged /usr: bin -> usr/bin
		} else if err := os.MkdirAll(filepath.Join(rootfs, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(rootfs, name)); err != nil {
			t.Fatal(err)
		}
	}
	daemon, _ := json.Marshal(map[string]any{
		"runtimes":        map[string]any{"doorman": map[string]any{"path": dindDoormanDir + "/doorman-runtime"}},
		"default-runtime": "doorman",
		"cgroup-parent":   e.cgroupParent,
		"bip":             dindBridgeIP,
	})
	allowICMP := false
	e.innerRuntime = hook.RuntimeConfig{
		Runc:             "/usr/sbin/runc",
		DockerRoot:       "/var/lib/docker",
		StateDir:         dindStateDir,
		LogDir:           dindLogDir,
		DefaultPolicy:    dindDefaultPolicy,
		UpstreamResolver: e.net.DNS.String() + ":53",
		AllowICMP:        &allowICMP,
	}
	runtime, _ := json.Marshal(e.innerRuntime)
	runtimeJSON := filepath.Join(e.dir, "dind-runtime.json")
	e.innerRuntimeJSON = runtimeJSON
	files := map[string][]byte{
		filepath.Join(rootfs, "etc/docker/daemon.json"): daemon,
		// The inner daemon-wide default: api.example.test only.
		filepath.Join(rootfs, dindDefaultPolicy): []byte("mode: allowlist\n" + apiName + "\n"),
		runtimeJSON:                              runtime,
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	archive := filepath.Join(e.dir, "dind-rootfs.tar")
	if err := writeTar(archive, rootfs); err != nil {
		t.Fatalf("archive the outer rootfs: %v", err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r := e.dockerStdin(f, "import", "-", dindImage); r.exit != 0 {
		t.Fatal(r)
	}
	return runtimeJSON
}

// optOutInner turns the DNS filter and the host-side layer off in the
// inner runtime.json for the inner containers created until t ends. The
// file is rewritten in place: the outer container sees it through its bind
// mount, which a new file (a rename) would leave behind.
func (e *dindEnv) optOutInner(t *testing.T) {
	t.Helper()
	off := false
	cfg := e.innerRuntime
	cfg.DNSFilter, cfg.HostLayer = &off, &off
	e.writeInnerRuntimeConfig(t, cfg)
	t.Cleanup(func() { e.writeInnerRuntimeConfig(t, e.innerRuntime) })
}

// writeInnerRuntimeConfig rewrites the inner runtime.json as cfg.
func (e *dindEnv) writeInnerRuntimeConfig(t *testing.T, cfg hook.RuntimeConfig) {
	t.Helper()
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(e.innerRuntimeJSON, data, 0o644); err != nil {
		t.Fatalf("rewrite the inner runtime.json: %v", err)
	}
}

// outerNetNS is the path of the outer container's network namespace: the
// inner daemon's, where its containers' proxies and host-side layer live.
func (e *dindEnv) outerNetNS() string { return procNetNS(e.outerPID) }

// importInnerProbeImage feeds the probe image to the inner dockerd.
func (e *dindEnv) importInnerProbeImage() {
	e.t.Helper()
	f, err := os.Open(filepath.Join(e.dir, "probe-rootfs.tar"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if r := e.dockerStdin(f, "exec", "--interactive", e.outer, dindDocker, "import", "-", dockerProbeImage); r.exit != 0 {
		e.t.Fatal(r)
	}
}

// inner runs the docker CLI against the inner dockerd.
func (e *dindEnv) inner(args ...string) dockerResult {
	return e.docker(slices.Concat([]string{"exec", e.outer, dindDocker}, args)...)
}

// mustInner is inner that fails the test unless the command succeeds.
func (e *dindEnv) mustInner(args ...string) string {
	e.t.Helper()
	r := e.inner(args...)
	if r.exit != 0 {
		e.t.Fatal(r)
	}
	return strings.TrimSpace(r.stdout)
}

// startInnerProbe starts a detached, sleeping probe container on the inner
// daemon with args as extra `docker run` options, and returns its id.
func (e *dindEnv) startInnerProbe(name string, args ...string) string {
	e.t.Helper()
	return e.mustInner(slices.Concat([]string{"run", "--detach", "--name", name}, e.runArgs(), args,
		[]string{dockerProbeImage, "/probe", "sleep", "10m"})...)
}

// innerProbe runs the probe inside inner container id.
func (e *dindEnv) innerProbe(id string, args ...string) dockerResult {
	return e.inner(slices.Concat([]string{"exec", id, "/probe"}, args)...)
}

// innerEnv is the environment `docker exec` gives inner container id.
func (e *dindEnv) innerEnv(id string) map[string]string {
	e.t.Helper()
	return parseEnv(e.mustInner("exec", id, "env"))
}

// hostPath is the host's path of path inside the outer container.
func (e *dindEnv) hostPath(path string) string {
	return fmt.Sprintf("/proc/%d/root%s", e.outerPID, path)
}

// innerState loads the inner doorman's state of inner container id (from
// the outer container's filesystem), or returns the error.
func (e *dindEnv) innerState(id string) (*sandbox.State, error) {
	return sandbox.Load(e.hostPath(dindStateDir), hook.Key(id))
}

// innerLog is the host path of inner container id's decision log.
func (e *dindEnv) innerLog(id string) string {
	return e.hostPath(filepath.Join(dindLogDir, hook.Key(id)+".log"))
}

// removeInner removes every inner container while the inner daemon still
// runs, so their poststop hooks stop their proxies, and checks that the
// inner doorman kept no state.
func (e *dindEnv) removeInner() {
	if ids := e.inner("ps", "--all", "--quiet"); ids.exit == 0 {
		if list := strings.Fields(ids.stdout); len(list) > 0 {
			if r := e.inner(append([]string{"rm", "--force"}, list...)...); r.exit != 0 {
				e.t.Errorf("cleanup: %v", r)
			}
		}
	}
	states, _ := sandbox.List(e.hostPath(dindStateDir))
	for _, s := range states {
		e.t.Errorf("inner doorman state left behind: %s (proxy pid %d in the outer container)", s.Key, s.PID)
	}
}

// nsPID returns the pid that host process pid has in its own (innermost)
// pid namespace, from the NSpid line of its status.
func nsPID(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			var n int
			if len(f) > 0 {
				fmt.Sscan(f[len(f)-1], &n)
			}
			return n
		}
	}
	return 0
}
