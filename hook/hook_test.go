package hook

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/sandbox"
)

func TestPolicyFor(t *testing.T) {
	dir := t.TempDir()
	defaultFile := filepath.Join(dir, "default.policy")
	if err := os.WriteFile(defaultFile, []byte("mode: allowlist\ndefault.example.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.policy")
	cases := []struct {
		name        string
		annotations map[string]string
		defaultFile string
		wantMode    conf.Mode
		wantHosts   []string
		wantSource  string
	}{
		{name: "mode and hosts",
			annotations: map[string]string{AnnotationMode: "allowlist", AnnotationAllowedHosts: "api.example.test,*.github.com"},
			defaultFile: missing, wantMode: conf.ModeAllowlist, wantHosts: []string{"api.example.test", "*.github.com"}, wantSource: "annotations"},
		{name: "hosts only means allowlist",
			annotations: map[string]string{AnnotationAllowedHosts: "api.example.test"},
			defaultFile: missing, wantMode: conf.ModeAllowlist, wantHosts: []string{"api.example.test"}, wantSource: "annotations"},
		{name: "mode only",
			annotations: map[string]string{AnnotationMode: "none"},
			defaultFile: missing, wantMode: conf.ModeNone, wantHosts: []string{}, wantSource: "annotations"},
		{name: "mode open, any case",
			annotations: map[string]string{AnnotationMode: " Open "},
			defaultFile: missing, wantMode: conf.ModeOpen, wantHosts: []string{}, wantSource: "annotations"},
		{name: "empty allowlist denies everything",
			annotations: map[string]string{AnnotationMode: "allowlist", AnnotationAllowedHosts: ""},
			defaultFile: missing, wantMode: conf.ModeAllowlist, wantHosts: []string{}, wantSource: "annotations"},
		{name: "spaces and empty items",
			annotations: map[string]string{AnnotationAllowedHosts: " API.Example.test. , ,203.0.113.7:443,"},
			defaultFile: missing, wantMode: conf.ModeAllowlist, wantHosts: []string{"api.example.test", "203.0.113.7:443"}, wantSource: "annotations"},
		{name: "annotations win over the default file",
			annotations: map[string]string{AnnotationMode: "none"},
			defaultFile: defaultFile, wantMode: conf.ModeNone, wantHosts: []string{}, wantSource: "annotations"},
		{name: "default file",
			annotations: map[string]string{"io.kubernetes.cri.container-name": "web"},
			defaultFile: defaultFile, wantMode: conf.ModeAllowlist, wantHosts: []string{"default.example.test"}, wantSource: defaultFile},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, source, err := policyFor(tc.annotations, tc.defaultFile)
			if err != nil {
				t.Fatalf("policyFor: %v", err)
			}
			if p.Mode != tc.wantMode || !slices.Equal(p.Hosts(), tc.wantHosts) || source != tc.wantSource {
				t.Errorf("got mode %s hosts %q source %q, want %s %q %q", p.Mode, p.Hosts(), source, tc.wantMode, tc.wantHosts, tc.wantSource)
			}
		})
	}
}

func TestPolicyForErrors(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad.policy")
	if err := os.WriteFile(badFile, []byte("api.example.test\nnot a host!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.policy")
	cases := []struct {
		name        string
		annotations map[string]string
		defaultFile string
		want        []string // all in the error
	}{
		{name: "unknown mode", annotations: map[string]string{AnnotationMode: "permissive"},
			defaultFile: missing, want: []string{AnnotationMode, `"permissive"`}},
		{name: "empty mode", annotations: map[string]string{AnnotationMode: "", AnnotationAllowedHosts: "api.example.test"},
			defaultFile: missing, want: []string{AnnotationMode}},
		{name: "bad entry", annotations: map[string]string{AnnotationAllowedHosts: "api.example.test,a*b.com"},
			defaultFile: missing, want: []string{AnnotationAllowedHosts, `"a*b.com"`, "wildcard"}},
		{name: "bare star", annotations: map[string]string{AnnotationMode: "allowlist", AnnotationAllowedHosts: "*"},
			defaultFile: missing, want: []string{AnnotationAllowedHosts, "mode"}},
		{name: "bad default file", annotations: nil,
			defaultFile: badFile, want: []string{"default policy", badFile + ":2", "not a host!"}},
		{name: "default file is a directory", annotations: nil,
			defaultFile: dir, want: []string{"default policy", dir}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := policyFor(tc.annotations, tc.defaultFile)
			if err == nil {
				t.Fatalf("policyFor gave %v, want an error", p)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestPolicyForNoPolicy(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "default.policy")
	for _, a := range []map[string]string{nil, {"org.opencontainers.image.title": "busybox"}} {
		_, _, err := policyFor(a, missing)
		if !errors.Is(err, errNoPolicy) {
			t.Fatalf("policyFor(%v) = %v, want errNoPolicy", a, err)
		}
		for _, w := range []string{AnnotationMode, AnnotationAllowedHosts, missing} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
	}
}

// withCaps returns a spec whose process holds caps in its bounding set and
// others in no set.
func withCaps(bounding ...string) *specs.Spec {
	return &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
		Bounding: bounding, Effective: bounding, Permitted: bounding,
	}}}
}

func TestLabel(t *testing.T) {
	// What `runc spec` gives a container.
	runcDefault := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	// Docker's defaults, CAP_NET_RAW among them.
	docker := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
		"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
	cases := []struct {
		name string
		spec *specs.Spec
		mode conf.Mode
		want string
	}{
		{"runc spec defaults", withCaps(runcDefault...), conf.ModeAllowlist, "full"},
		{"no capabilities at all", withCaps(), conf.ModeAllowlist, "full"},
		{"no process", &specs.Spec{}, conf.ModeAllowlist, "full"},
		{"nil spec", nil, conf.ModeAllowlist, "full"},
		{"docker defaults", withCaps(docker...), conf.ModeAllowlist, "partial (container holds CAP_NET_RAW)"},
		{"net admin", withCaps("CAP_NET_ADMIN"), conf.ModeAllowlist, "partial (container holds CAP_NET_ADMIN)"},
		{"net admin wins over net raw", withCaps("CAP_NET_RAW", "CAP_NET_ADMIN"), conf.ModeNone, "partial (container holds CAP_NET_ADMIN)"},
		{"case-insensitive", withCaps("cap_net_raw"), conf.ModeAllowlist, "partial (container holds CAP_NET_RAW)"},
		{"mode none is enforcement too", withCaps(runcDefault...), conf.ModeNone, "full"},
		{"open is not enforcement", withCaps("CAP_NET_ADMIN"), conf.ModeOpen, "n/a"},
		{"ambient only, no bounding set", &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
			Ambient: []string{"CAP_NET_RAW"}, Inheritable: []string{"CAP_NET_RAW"}}}}, conf.ModeAllowlist, "partial (container holds CAP_NET_RAW)"},
		{"bounding set limits the others", &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
			Bounding: runcDefault, Effective: []string{"CAP_NET_RAW"}}}}, conf.ModeAllowlist, "full"},
	}
	for _, tc := range cases {
		if got := Label(tc.spec, tc.mode); got != tc.want {
			t.Errorf("%s: Label = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "default.policy")
	opts := Options{StateDir: t.TempDir(), LogDir: t.TempDir(), DefaultPolicy: missing}

	if err := Run("poststart", strings.NewReader("{}"), opts); err == nil ||
		!strings.Contains(err.Error(), `"poststart"`) || !strings.Contains(err.Error(), StageCreateRuntime) {
		t.Errorf("unknown stage: %v", err)
	}

	bundle := writeBundle(t, nil)
	cases := []struct {
		name, stdin string
		want        string
	}{
		{"not JSON", "this is not JSON", "not the runtime's state JSON"},
		{"empty", "", "not the runtime's state JSON"},
		{"no id", `{"ociVersion":"1.0.2","bundle":"` + bundle + `"}`, "no id or bundle"},
		{"no bundle", `{"ociVersion":"1.0.2","id":"c1"}`, "no id or bundle"},
		{"no config.json", stateJSON("c1", t.TempDir(), 0, nil), "read the bundle's config"},
		{"config.json not JSON", stateJSON("c1", writeRawBundle(t, "{"), 0, nil), "parse"},
		{"no policy", stateJSON("c1", bundle, 0, nil), AnnotationAllowedHosts},
		{"bad annotation in the state", stateJSON("c1", bundle, 0, map[string]string{AnnotationAllowedHosts: "a*b.com"}), `"a*b.com"`},
	}
	for _, stage := range []string{StageCreateRuntime, StagePrestart} {
		for _, tc := range cases {
			err := Run(stage, strings.NewReader(tc.stdin), opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s, %s: error %v, want one mentioning %q", stage, tc.name, err, tc.want)
			}
		}
	}
	if ents, _ := os.ReadDir(opts.StateDir); len(ents) != 0 {
		t.Errorf("state left behind by refused containers: %v", ents)
	}

	// Poststop never fails: a container's removal must not be blocked.
	for _, tc := range cases {
		if err := Run(StagePoststop, strings.NewReader(tc.stdin), opts); err != nil {
			t.Errorf("poststop, %s: %v", tc.name, err)
		}
	}
}

func TestRunNetworkNamespace(t *testing.T) {
	opts := Options{StateDir: t.TempDir(), LogDir: t.TempDir(), DefaultPolicy: filepath.Join(t.TempDir(), "none")}
	allow := map[string]string{AnnotationMode: "allowlist", AnnotationAllowedHosts: "api.example.test"}
	run := func(spec *specs.Spec, pid int, annotations map[string]string) error {
		spec.Annotations = annotations
		return Run(StageCreateRuntime, strings.NewReader(stateJSON("c1", writeBundle(t, spec), pid, nil)), opts)
	}

	// No network namespace of its own: refused unless the policy is open.
	// (This test does not run inside a doorman sandbox.)
	err := run(&specs.Spec{Linux: &specs.Linux{}}, 0, allow)
	if err == nil || !strings.Contains(err.Error(), "shares the host's network namespace") || !strings.Contains(err.Error(), AnnotationMode+"=open") {
		t.Errorf("no netns, allowlist: %v", err)
	}
	if err := run(&specs.Spec{Linux: &specs.Linux{}}, 0, map[string]string{AnnotationMode: "open"}); err != nil {
		t.Errorf("no netns, open: %v", err)
	}
	// The runtime's own namespace, by path: the same.
	err = run(specWithNetNS("/proc/self/ns/net"), 0, allow)
	if err == nil || !strings.Contains(err.Error(), "shares the host's network namespace") {
		t.Errorf("the runtime's netns: %v", err)
	}
	// A path that is not there.
	err = run(specWithNetNS("/run/netns/dm-no-such-netns"), 0, allow)
	if err == nil || !strings.Contains(err.Error(), "/run/netns/dm-no-such-netns") {
		t.Errorf("missing netns path: %v", err)
	}
	// Neither a pid nor a path.
	err = run(specWithNetNS(""), 0, allow)
	if err == nil || !strings.Contains(err.Error(), "cannot find the container's network namespace") {
		t.Errorf("no pid, no path: %v", err)
	}
	// A container process that is gone.
	gone := gonePID(t)
	err = run(specWithNetNS(""), gone, allow)
	if err == nil || !strings.Contains(err.Error(), "/proc/"+strconv.Itoa(gone)+"/ns/net") {
		t.Errorf("pid gone: %v", err)
	}
	if ents, _ := os.ReadDir(opts.StateDir); len(ents) != 0 {
		t.Errorf("state left behind by refused containers: %v", ents)
	}
}

func TestContainerNetNS(t *testing.T) {
	self := os.Getpid()
	if got, err := containerNetNS(&specs.Spec{}, self); got != "" || err != nil {
		t.Errorf("no linux section: %q, %v", got, err)
	}
	if got, err := containerNetNS(specWithNetNS(""), self); got != "" || err != nil {
		t.Errorf("the process shares this namespace: %q, %v", got, err)
	}
	if got, err := containerNetNS(specWithNetNS("/proc/self/ns/net"), self); got != "" || err != nil {
		t.Errorf("path of this namespace: %q, %v", got, err)
	}
	if _, err := containerNetNS(specWithNetNS("/run/netns/dm-no-such-netns"), self); err == nil {
		t.Error("a missing path named with a live pid passed")
	}

	if os.Geteuid() != 0 {
		t.Skip("the rest needs root (a network namespace of its own)")
	}
	other := newNetNS(t)
	if got, err := containerNetNS(specWithNetNS(other.Path()), 0); got != other.Path() || err != nil {
		t.Errorf("path, no pid: %q, %v; want %s", got, err, other.Path())
	}
	// The path and the process's namespace disagree: refused.
	if _, err := containerNetNS(specWithNetNS(other.Path()), self); err == nil || !strings.Contains(err.Error(), "is not the one") {
		t.Errorf("path and pid disagree: %v", err)
	}
	// A process inside the namespace: the lasting path is what is
	// returned (poststop must find the namespace after the process died).
	sleeper := startIn(t, other)
	if got, err := containerNetNS(specWithNetNS(other.Path()), sleeper); got != other.Path() || err != nil {
		t.Errorf("path and a pid inside it: %q, %v; want %s", got, err, other.Path())
	}
	procPath := "/proc/" + strconv.Itoa(sleeper) + "/ns/net"
	if got, err := containerNetNS(specWithNetNS(""), sleeper); got != procPath || err != nil {
		t.Errorf("pid only: %q, %v; want %s", got, err, procPath)
	}
}

// newNetNS makes a network namespace "dm-hook-<hex>", deleted by t's cleanup.
func newNetNS(t *testing.T) netNS {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "dm-hook-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return netNS(name)
}

// netNS is a named network namespace.
type netNS string

func (n netNS) Path() string { return "/var/run/netns/" + string(n) }

// startIn starts a sleeping process inside n and returns its pid; it is
// killed by t's cleanup.
func startIn(t *testing.T, n netNS) int {
	t.Helper()
	// ip netns exec enters the namespace and execs sleep: same pid.
	cmd := exec.Command("ip", "netns", "exec", string(n), "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Wait until it is inside.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if same, err := sameNetNS(n.Path(), "/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/net"); err == nil && same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not enter %s", cmd.Process.Pid, n)
		}
	}
	return cmd.Process.Pid
}

func TestResolvers(t *testing.T) {
	bundle := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bundle, "rootfs/etc/resolv.conf"),
		"# comment\nsearch example.test\nnameserver 203.0.113.53\nnameserver 2001:db8:100::53\nnameserver fe80::1%eth0\nnameserver not-an-ip\noptions ndots:1\n")
	mounted := filepath.Join(t.TempDir(), "resolv.conf")
	write(mounted, "nameserver 198.51.100.53\n")

	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	cases := []struct {
		name string
		spec *specs.Spec
		want []netip.Addr
	}{
		{"rootfs, relative to the bundle", &specs.Spec{Root: &specs.Root{Path: "rootfs"}}, addrs("203.0.113.53", "2001:db8:100::53")},
		{"rootfs, absolute", &specs.Spec{Root: &specs.Root{Path: filepath.Join(bundle, "rootfs")}}, addrs("203.0.113.53", "2001:db8:100::53")},
		{"a bind mount over it wins", &specs.Spec{Root: &specs.Root{Path: "rootfs"}, Mounts: []specs.Mount{
			{Destination: "/etc/resolv.conf", Source: mounted, Type: "bind"}}}, addrs("198.51.100.53")},
		{"no resolv.conf", &specs.Spec{Root: &specs.Root{Path: "nowhere"}}, nil},
		{"no root", &specs.Spec{}, nil},
	}
	for _, tc := range cases {
		got, err := resolvers(tc.spec, bundle)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}

	// Docker's embedded DNS forwards to the runtime's resolvers.
	write(mounted, "nameserver 127.0.0.11\n")
	got, err := resolvers(&specs.Spec{Mounts: []specs.Mount{{Destination: "/etc/resolv.conf", Source: mounted}}}, bundle)
	host, _ := os.ReadFile(hostconf.ResolvConf)
	if want := append(addrs("127.0.0.11"), hostconf.ParseResolvConf(host)...); err != nil || !slices.Equal(got, want) {
		t.Errorf("embedded DNS: %v, %v; want %v", got, err, want)
	}

	// An unreadable resolv.conf is an error, not "no resolvers".
	_, err = resolvers(&specs.Spec{Mounts: []specs.Mount{{Destination: "/etc/resolv.conf", Source: bundle}}}, bundle)
	if err == nil || !strings.Contains(err.Error(), bundle) {
		t.Errorf("resolv.conf is a directory: %v", err)
	}
}

func TestKey(t *testing.T) {
	if k := Key("4f2a9c0e-ctr_1.web"); k != "4f2a9c0e-ctr_1.web" {
		t.Errorf("Key of a valid id = %q", k)
	}
	for _, id := range []string{"../etc", "a/b", "", strings.Repeat("x", 300)} {
		k := Key(id)
		if err := sandbox.ValidKey(k); err != nil || !strings.HasPrefix(k, "h") || len(k) != 33 {
			t.Errorf("Key(%q) = %q (%v)", id, k, err)
		}
		if Key(id) != k {
			t.Errorf("Key(%q) is not stable", id)
		}
	}
	if Key("a/b") == Key("a/c") {
		t.Error("two ids share a key")
	}
}

func TestContainerNameAndMerge(t *testing.T) {
	a := mergeAnnotations(map[string]string{"x": "spec", "nerdctl/name": "web"}, map[string]string{"x": "state"})
	if a["x"] != "state" || a["nerdctl/name"] != "web" {
		t.Errorf("mergeAnnotations = %v", a)
	}
	if n := containerName(a); n != "web" {
		t.Errorf("containerName = %q", n)
	}
	if n := containerName(map[string]string{annotationDockerName: "db"}); n != "db" {
		t.Errorf("containerName (docker) = %q", n)
	}
	if n := containerName(nil); n != "" {
		t.Errorf("containerName(nil) = %q", n)
	}
}

// specWithNetNS is a spec with a network namespace at path ("" for a new one).
func specWithNetNS(path string) *specs.Spec {
	return &specs.Spec{
		Root:  &specs.Root{Path: "rootfs"},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace, Path: path}}},
	}
}

// writeBundle writes spec (an empty one if nil) as a bundle's config.json.
func writeBundle(t *testing.T, spec *specs.Spec) string {
	t.Helper()
	if spec == nil {
		spec = &specs.Spec{}
	}
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return writeRawBundle(t, string(data))
}

func writeRawBundle(t *testing.T, config string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stateJSON is the state a runtime passes a hook.
func stateJSON(id, bundle string, pid int, annotations map[string]string) string {
	data, _ := json.Marshal(specs.State{Version: specs.Version, ID: id, Status: specs.StateCreating, Pid: pid, Bundle: bundle, Annotations: annotations})
	return string(data)
}

// gonePID returns the pid of a process that has exited and been reaped.
func gonePID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// writeState records a sandbox under stateDir as the enforcement core
// would, with policy as its live policy file.
func writeState(t *testing.T, stateDir string, s sandbox.State, policy string) {
	t.Helper()
	dir := filepath.Join(stateDir, s.Key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(dir, "state.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, sandbox.PolicyFile), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestHeldBy(t *testing.T) {
	// Records on this process's namespace, none of them live (no proxy
	// runs, no doorman table here).
	const netns = "/proc/self/ns/net"
	stateDir := t.TempDir()
	if s, err := heldBy(stateDir, "c1", netns); s != nil || err != nil {
		t.Fatalf("no sandboxes: %v, %v", s, err)
	}
	writeState(t, stateDir, sandbox.State{Key: "c1", ID: "c1", Runtime: "hook", NetNS: netns, Mode: "allowlist"}, "")
	if s, err := heldBy(stateDir, "c1", netns); s != nil || err != nil {
		t.Errorf("its own record: %v, %v", s, err)
	}
	writeState(t, stateDir, sandbox.State{Key: "cni1-eth0", ID: "cni1", Runtime: "cni", NetNS: netns, Mode: "allowlist"}, "")
	writeState(t, stateDir, sandbox.State{Key: "other", ID: "other", Runtime: "hook", NetNS: "/proc/self/ns/uts", Mode: "allowlist"}, "")
	writeState(t, stateDir, sandbox.State{Key: "gone", ID: "gone", Runtime: "hook", NetNS: "/run/netns/dm-no-such-netns", Mode: "allowlist"}, "")
	if s, err := heldBy(stateDir, "c1", netns); s != nil || err != nil {
		t.Errorf("a dead CNI sandbox, other namespaces: %v, %v", s, err)
	}
	// A hook sandbox on the same namespace that is not running: refused,
	// since its teardown would remove the namespace's rules.
	_, err := heldBy(stateDir, "c2", netns)
	if err == nil || !strings.Contains(err.Error(), "c1") || !strings.Contains(err.Error(), "not running") {
		t.Errorf("a dead sibling: %v", err)
	}
}

func TestSamePolicy(t *testing.T) {
	stateDir := t.TempDir()
	writeState(t, stateDir, sandbox.State{Key: "c1", ID: "c1", Runtime: "hook", NetNS: "/run/netns/pod", Mode: "allowlist"},
		"mode: allowlist\napi.example.test\n*.github.com\n")
	s, err := sandbox.Load(stateDir, "c1")
	if err != nil {
		t.Fatal(err)
	}
	same, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"API.example.test", "*.github.com"})
	if err := samePolicy(s, same); err != nil {
		t.Errorf("the same policy: %v", err)
	}
	for _, p := range []*conf.Policy{
		mustPolicy(t, conf.ModeAllowlist, "api.example.test"),
		mustPolicy(t, conf.ModeOpen, "api.example.test", "*.github.com"),
		mustPolicy(t, conf.ModeAllowlist, "api.example.test", "*.github.com", "evil.example.test"),
	} {
		if err := samePolicy(s, p); err == nil || !strings.Contains(err.Error(), "different policy") || !strings.Contains(err.Error(), "c1") {
			t.Errorf("policy %v: %v", p, err)
		}
	}
	os.Remove(s.PolicyPath())
	if err := samePolicy(s, same); err == nil || !strings.Contains(err.Error(), s.PolicyPath()) {
		t.Errorf("unreadable policy: %v", err)
	}
}

func mustPolicy(t *testing.T, m conf.Mode, entries ...string) *conf.Policy {
	t.Helper()
	p, err := conf.NewPolicy(m, entries)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLabelRank(t *testing.T) {
	full := Label(withCaps(), conf.ModeAllowlist)
	raw := Label(withCaps("CAP_NET_RAW"), conf.ModeAllowlist)
	admin := Label(withCaps("CAP_NET_ADMIN"), conf.ModeAllowlist)
	open := Label(withCaps("CAP_NET_ADMIN"), conf.ModeOpen)
	if !(labelRank(full) < labelRank(raw) && labelRank(raw) < labelRank(admin)) || labelRank(open) != labelRank(full) {
		t.Errorf("ranks: full %d, raw %d, admin %d, n/a %d", labelRank(full), labelRank(raw), labelRank(admin), labelRank(open))
	}
}
