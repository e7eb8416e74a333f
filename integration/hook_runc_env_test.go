package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/sandbox"
)

// runcEnv is one test's plain-runc world: the CNI tests' fake internet and
// doorman directories (cniEnv), a runc state root of its own, one read-only
// rootfs shared by its containers, and a cgroup parent of its own.
//
// runc runs in testnet's host namespace (so the hook it starts, and the
// proxy the hook starts, live there and dial the fake internet from there),
// through `ip netns exec`, which gives each command a private mount
// namespace with a fresh /sys: every runc command therefore first mounts the
// machine's cgroup hierarchies again (cgroupMountScript), as a host's would
// be. A container joins a network namespace the test made and wired (its
// path in config.json), exactly as runc is used with a prepared netns.
type runcEnv struct {
	*cniEnv
	dir          string
	runcRoot     string // runc --root: container state of this test only
	rootfs       string // busybox, the probe, the test CA, resolv.conf
	baseSpec     []byte // `runc spec` output
	mounts       string // shell commands that mount the cgroup hierarchies
	cgroupParent string // "/dm-runc-<hex>": every container's cgroup is below it
	suffix       string // unique per test, for container ids
	next         atomic.Int32
	// runtime is the OCI runtime's command line before --root (default
	// runc; runsc with its flags for the gVisor tests).
	runtime []string
}

// runcContainer is one container of a runcEnv.
type runcContainer struct {
	id     string
	bundle string
	netns  string // the netns path in its spec, "" if none
}

// runcResult is what one runc command (or a process run by runc exec) did.
type runcResult struct {
	args           []string
	exit           int
	stdout, stderr string
}

func (r runcResult) String() string {
	return fmt.Sprintf("runc %s: exit %d, stdout %q, stderr %q", strings.Join(r.args, " "), r.exit, r.stdout, r.stderr)
}

// newRuncEnv makes the test's world; t.Cleanup deletes every container the
// test made (runc delete --force), then checks nothing of doorman's is
// left, then removes the test's cgroups.
func newRuncEnv(t *testing.T) *runcEnv {
	t.Helper()
	skipUnlessRoot(t)
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skipf("runc is not installed (apt-get install runc busybox-static): %v", err)
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skipf("busybox is not installed (apt-get install busybox-static): %v", err)
	}
	e := newCNIEnv(t)
	dir := t.TempDir()
	r := &runcEnv{
		cniEnv:   e,
		dir:      dir,
		runcRoot: filepath.Join(dir, "runc"),
		rootfs:   filepath.Join(dir, "rootfs"),
		suffix:   strings.TrimPrefix(e.net.HostNS().Name(), "dm-host-"),
	}
	r.cgroupParent = "/dm-runc-" + r.suffix
	mounts, err := cgroupMountScript()
	if err != nil {
		t.Fatal(err)
	}
	r.mounts = mounts
	t.Cleanup(r.removeCgroups) // runs after the containers' deletion below
	r.makeRootfs()
	spec := exec.Command("runc", "spec", "--bundle", dir)
	if out, err := spec.CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	if r.baseSpec, err = os.ReadFile(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	return r
}

// runcProbe is the static probe binary (integration/probe), built once.
var runcProbe struct {
	once sync.Once
	path string
	err  error
}

func buildRuncProbe() (string, error) {
	runcProbe.once.Do(func() {
		runcProbe.path = filepath.Join(binDir, "runc-probe")
		build := exec.Command("go", "build", "-o", runcProbe.path, "github.com/doorman-net/doorman/integration/probe")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			runcProbe.err = fmt.Errorf("build the probe: %v\n%s", err, out)
		}
	})
	return runcProbe.path, runcProbe.err
}

// makeRootfs writes the containers' rootfs: busybox and its applets, the
// probe, the test CA, and a resolv.conf naming the fake internet's resolvers
// (which the hook reads to allow DNS to them).
func (r *runcEnv) makeRootfs() {
	r.t.Helper()
	probe, err := buildRuncProbe()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, d := range []string{"bin", "etc", "proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(r.rootfs, d), 0o755); err != nil {
			r.t.Fatal(err)
		}
	}
	for src, dst := range map[string]string{"/bin/busybox": "bin/busybox", probe: "probe"} {
		if err := copyFile(src, filepath.Join(r.rootfs, dst), 0o755); err != nil {
			r.t.Fatal(err)
		}
	}
	for _, applet := range []string{"sh", "cat", "wget", "nc", "nslookup", "sleep", "grep"} {
		if err := os.Symlink("busybox", filepath.Join(r.rootfs, "bin", applet)); err != nil {
			r.t.Fatal(err)
		}
	}
	files := map[string][]byte{
		"ca.pem":          r.net.CAPEM,
		"etc/resolv.conf": fmt.Appendf(nil, "nameserver %s\nnameserver %s\noptions timeout:1 attempts:2\n", r.net.DNS, r.net.DNS6),
		"etc/passwd":      []byte("root:x:0:0:root:/:/bin/sh\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(r.rootfs, name), data, 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// specOption changes a container's spec.
type specOption func(*specs.Spec)

// withNetNS makes the container join the network namespace at path.
func withNetNS(path string) specOption {
	return func(s *specs.Spec) { setNetNS(s, path, true) }
}

// withoutNetNS gives the container no network namespace of its own: it
// shares the runtime's.
func withoutNetNS() specOption {
	return func(s *specs.Spec) { setNetNS(s, "", false) }
}

func setNetNS(s *specs.Spec, path string, keep bool) {
	var out []specs.LinuxNamespace
	for _, n := range s.Linux.Namespaces {
		if n.Type != specs.NetworkNamespace {
			out = append(out, n)
		}
	}
	if keep {
		out = append(out, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: path})
	}
	s.Linux.Namespaces = out
}

// withAnnotations sets doorman's annotations (and any others).
func withAnnotations(kv ...string) specOption {
	return func(s *specs.Spec) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// withHookFlags adds flags to doorman's arguments in every hook of the
// spec, before the stage (as an operator opting out of a default would).
func withHookFlags(flags ...string) specOption {
	return func(s *specs.Spec) {
		for _, hooks := range [][]specs.Hook{s.Hooks.CreateRuntime, s.Hooks.Prestart, s.Hooks.Poststop} {
			for i := range hooks {
				a := hooks[i].Args
				hooks[i].Args = slices.Concat(a[:len(a)-1], flags, a[len(a)-1:])
			}
		}
	}
}

// allowAPI is the policy most containers get.
func allowAPI() specOption {
	return withAnnotations(hook.AnnotationMode, "allowlist", hook.AnnotationAllowedHosts, apiName)
}

// withCaps adds capabilities to every set runc's defaults fill.
func withCaps(caps ...string) specOption {
	return func(s *specs.Spec) {
		c := s.Process.Capabilities
		c.Bounding = append(c.Bounding, caps...)
		c.Effective = append(c.Effective, caps...)
		c.Permitted = append(c.Permitted, caps...)
	}
}

// hookArgs are doorman's hook arguments for stage, as an operator would
// write them into config.json. The default policy file is one the test
// may write (see defaultPolicyFile); it does not exist unless it does.
func (r *runcEnv) hookArgs(stage string) []string {
	return []string{"doorman", "hook",
		"--state-dir=" + r.stateDir,
		"--log-dir=" + r.logDir,
		"--default-policy=" + r.defaultPolicyFile(),
		"--upstream-resolver=" + r.net.DNS.String() + ":53",
		stage,
	}
}

func (r *runcEnv) defaultPolicyFile() string { return filepath.Join(r.dir, "default.policy") }

// newContainer writes a bundle for a new container: `runc spec`'s
// defaults (its capabilities, masked paths, read-only rootfs), no
// terminal, the test's rootfs and cgroup parent, doorman's createRuntime
// and poststop hooks, and a long sleep as its command; then opts.
// t.Cleanup deletes it (runc delete --force).
func (r *runcEnv) newContainer(purpose string, opts ...specOption) *runcContainer {
	r.t.Helper()
	c := &runcContainer{id: fmt.Sprintf("dm-%s-%s-%d", purpose, r.suffix, r.next.Add(1))}
	c.bundle = filepath.Join(r.dir, "bundles", c.id)
	var s specs.Spec
	if err := json.Unmarshal(r.baseSpec, &s); err != nil {
		r.t.Fatalf("runc spec's config.json: %v", err)
	}
	s.Process.Terminal = false
	s.Process.Args = []string{"/probe", "sleep", "10m"}
	s.Root = &specs.Root{Path: r.rootfs, Readonly: true}
	s.Hostname = "dm-runc"
	s.Linux.CgroupsPath = filepath.Join(r.cgroupParent, c.id)
	s.Hooks = &specs.Hooks{
		CreateRuntime: []specs.Hook{{Path: doormanBin(), Args: r.hookArgs(hook.StageCreateRuntime)}},
		Poststop:      []specs.Hook{{Path: doormanBin(), Args: r.hookArgs(hook.StagePoststop)}},
	}
	for _, o := range opts {
		o(&s)
	}
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			c.netns = n.Path
		}
	}
	data, err := json.MarshalIndent(&s, "", "  ")
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.MkdirAll(c.bundle, 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.bundle, "config.json"), data, 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { r.forceDelete(c) })
	return c
}

// runc runs runc with args in the host namespace, after mounting the
// cgroup hierarchies. Its output goes to files rather than pipes: a
// detached container inherits runc's stdio, and must not keep this call
// waiting.
func (r *runcEnv) runc(args ...string) runcResult {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := "set -e\n" + r.mounts + "exec \"$@\"\n"
	rt := r.runtime
	if len(rt) == 0 {
		rt = []string{"runc"}
	}
	full := slices.Concat([]string{"runc-session"}, rt, []string{"--root", r.runcRoot}, args)
	cmd := r.net.HostCommand(ctx, "sh", slices.Concat([]string{"-c", script}, full)...)
	stdout, stderr := r.outputFile(), r.outputFile()
	defer stdout.Close()
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	res := runcResult{args: args, stdout: readAll(stdout), stderr: readAll(stderr)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		res.exit = ee.ExitCode()
	default:
		r.t.Fatalf("runc %s: %v (stderr %q)", strings.Join(args, " "), err, res.stderr)
	}
	return res
}

func (r *runcEnv) outputFile() *os.File {
	r.t.Helper()
	f, err := os.CreateTemp(r.dir, "out-")
	if err != nil {
		r.t.Fatal(err)
	}
	os.Remove(f.Name()) // the open file is all that is needed
	return f
}

func readAll(f *os.File) string {
	var b bytes.Buffer
	f.Seek(0, io.SeekStart)
	b.ReadFrom(f)
	return b.String()
}

// mustRunc is runc that fails the test unless the command succeeds.
func (r *runcEnv) mustRunc(args ...string) runcResult {
	r.t.Helper()
	res := r.runc(args...)
	if res.exit != 0 {
		r.t.Fatal(res)
	}
	return res
}

// create is `runc create`: the createRuntime hook runs; the container's
// process waits for `runc start`.
func (r *runcEnv) create(c *runcContainer) runcResult {
	r.t.Helper()
	return r.runc("create", "--bundle", c.bundle, c.id)
}

// runDetached is `runc run --detach`: create and start.
func (r *runcEnv) runDetached(c *runcContainer) {
	r.t.Helper()
	r.mustRunc("run", "--detach", "--bundle", c.bundle, c.id)
}

// exec runs the probe (or any program of the rootfs) in the container.
func (r *runcEnv) exec(c *runcContainer, args ...string) runcResult {
	r.t.Helper()
	return r.runc(slices.Concat([]string{"exec", c.id}, args)...)
}

// delete is `runc delete --force`: the poststop hook runs.
func (r *runcEnv) delete(c *runcContainer) {
	r.t.Helper()
	r.mustRunc("delete", "--force", c.id)
}

// forceDelete removes c if it is still there; a container that is not
// (deleted by the test, or never made) is fine.
func (r *runcEnv) forceDelete(c *runcContainer) {
	res := r.runc("delete", "--force", c.id)
	if res.exit != 0 && !strings.Contains(res.stderr, "does not exist") {
		r.t.Errorf("cleanup: %v", res)
	}
}

// exists reports whether runc knows container c.
func (r *runcEnv) exists(c *runcContainer) bool {
	r.t.Helper()
	res := r.runc("state", c.id)
	if res.exit != 0 && !strings.Contains(res.stderr, "does not exist") {
		r.t.Fatalf("runc state: %v", res)
	}
	return res.exit == 0
}

// state is the recorded state of c's sandbox (the hook keys it by the
// container id).
func (r *runcEnv) state(c *runcContainer) *sandbox.State {
	r.t.Helper()
	return r.cniEnv.state(c.ctr())
}

// ctr names c's sandbox for cniEnv's log and state helpers.
func (c *runcContainer) ctr() *container { return &container{key: hook.Key(c.id)} }

// assertNoSandbox checks that c has left nothing of doorman's: no state,
// no proxy process (waiting a little for one to exit), no table in its
// network namespace.
func (r *runcEnv) assertNoSandbox(c *runcContainer) {
	r.t.Helper()
	if _, err := os.Stat(filepath.Join(r.stateDir, hook.Key(c.id))); !os.IsNotExist(err) {
		r.t.Errorf("state of %s is there: %v", c.id, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		pids := append(proxiesFor(c.id), supervisorsFor(c.id)...)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.t.Errorf("proxy processes of %s: %v", c.id, pids)
			break
		}
	}
	if c.netns != "" {
		if _, err := os.Stat(c.netns); err == nil {
			if ok, err := enforce.Present(c.netns); ok || err != nil {
				r.t.Errorf("doorman's table in %s (%v)", c.netns, err)
			}
		}
	}
}

// removeCgroups removes the test's cgroup parent from every hierarchy
// (runc delete removes each container's own cgroup below it).
func (r *runcEnv) removeCgroups() {
	mounts, err := cgroupMounts()
	if err != nil {
		r.t.Errorf("cleanup: %v", err)
		return
	}
	for _, m := range mounts {
		if m.fstype != "cgroup" && m.fstype != "cgroup2" {
			continue
		}
		if err := removeCgroupTree(filepath.Join(m.mountpoint, r.cgroupParent)); err != nil {
			r.t.Errorf("cleanup: %v", err)
		}
	}
}

// cgroupLeft reports whether c's cgroup is still there in some hierarchy.
func (r *runcEnv) cgroupLeft(c *runcContainer) string {
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		if m.fstype != "cgroup" && m.fstype != "cgroup2" {
			continue
		}
		p := filepath.Join(m.mountpoint, r.cgroupParent, c.id)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// probeRan reports whether the probe itself ran in the container and
// exited with one of codes (rather than runc failing to run it).
func probeRan(r runcResult, codes ...int) bool {
	return strings.Contains(r.stderr, "probe: ") && slices.Contains(codes, r.exit)
}
