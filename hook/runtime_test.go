package hook

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSplitVerb(t *testing.T) {
	cases := []struct {
		args     []string
		verb     string
		rest     []string
		describe string
	}{
		{[]string{"create", "--bundle", "/b", "c1"}, "create", []string{"--bundle", "/b", "c1"}, "no global flags"},
		{[]string{"--root", "/run/docker/runtime-runc/moby", "--log", "/run/x/log.json", "--log-format", "json", "--systemd-cgroup", "create", "c1"},
			"create", []string{"c1"}, "containerd-shim's global flags"},
		{[]string{"--root=/r", "--log=/l", "--debug", "run", "-d", "c1"}, "run", []string{"-d", "c1"}, "global flags with '='"},
		{[]string{"-root", "/r", "-log-format", "json", "create", "c1"}, "create", []string{"c1"}, "single-dash long flags"},
		{[]string{"--criu", "/usr/sbin/criu", "--rootless", "false", "delete", "c1"}, "delete", []string{"c1"}, "criu and rootless take values"},
		{[]string{"--root", "/r", "--", "create", "c1"}, "create", []string{"c1"}, "end of flags"},
		{[]string{"--root", "/r"}, "", nil, "no verb"},
		{[]string{"--version"}, "", nil, "version"},
		{nil, "", nil, "nothing"},
	}
	for _, tc := range cases {
		verb, rest := splitVerb(tc.args)
		if verb != tc.verb || !slices.Equal(rest, tc.rest) {
			t.Errorf("%s: splitVerb(%q) = %q, %q; want %q, %q", tc.describe, tc.args, verb, rest, tc.verb, tc.rest)
		}
	}
}

func TestParseCreate(t *testing.T) {
	cases := []struct {
		args       []string
		bundle, id string
	}{
		{[]string{"--bundle", "/b", "c1"}, "/b", "c1"},
		{[]string{"--bundle=/b", "c1"}, "/b", "c1"},
		{[]string{"-b", "/b", "c1"}, "/b", "c1"},
		{[]string{"-b=/b", "c1"}, "/b", "c1"},
		{[]string{"-bundle", "/b", "c1"}, "/b", "c1"},
		{[]string{"c1", "--bundle", "/b"}, "/b", "c1"},
		{[]string{"c1"}, "", "c1"},
		{[]string{}, "", ""},
		// containerd's go-runc: value flags before the bundle must not be
		// taken for the id or the bundle.
		{[]string{"--bundle", "/run/containerd/io.containerd.runtime.v2.task/moby/c1", "--pid-file", "/run/x/init.pid",
			"--console-socket", "/tmp/pty.sock", "c1"}, "/run/containerd/io.containerd.runtime.v2.task/moby/c1", "c1"},
		{[]string{"--pid-file=/p", "--no-pivot", "--no-new-keyring", "-b", "/b", "--preserve-fds", "2", "c1"}, "/b", "c1"},
		{[]string{"-d", "--keep", "-pid-file", "/p", "c1"}, "", "c1"},
		{[]string{"--bundle", "/b", "--", "c1"}, "/b", "c1"},
		{[]string{"--bundle"}, "", ""},
	}
	for _, tc := range cases {
		bundle, id := parseCreate(tc.args)
		if bundle != tc.bundle || id != tc.id {
			t.Errorf("parseCreate(%q) = %q, %q; want %q, %q", tc.args, bundle, id, tc.bundle, tc.id)
		}
	}
}

// dockerConfig is a config.json as Docker 20.10 writes it, cut down: a
// libnetwork-setkey prestart hook, fields this module's spec types may not
// know, and no annotations.
const dockerConfig = `{
  "ociVersion": "1.0.2-dev",
  "process": {
    "user": {"uid": 0, "gid": 0},
    "args": ["sh"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=4f2a9c0e1b3d"],
    "cwd": "/",
    "capabilities": {
      "bounding": ["CAP_CHOWN", "CAP_NET_RAW", "CAP_KILL"],
      "effective": ["CAP_CHOWN", "CAP_NET_RAW", "CAP_KILL"],
      "permitted": ["CAP_CHOWN", "CAP_NET_RAW", "CAP_KILL"]
    },
    "x-engine-process-extra": {"keep": true}
  },
  "root": {"path": "/var/lib/docker/overlay2/abc/merged"},
  "hostname": "4f2a9c0e1b3d",
  "hooks": {
    "prestart": [
      {"path": "/proc/4242/exe", "args": ["libnetwork-setkey", "-exec-root=/var/run/docker", "CID", "0123456789ab"]}
    ]
  },
  "linux": {
    "namespaces": [{"type": "mount"}, {"type": "network"}, {"type": "pid"}],
    "x-engine-linux-extra": [1, 2, 3]
  },
  "x-engine-top-level": {"nested": {"value": "kept"}}
}`

// bundleWith writes config (with CID replaced by id) to a new bundle.
func bundleWith(t *testing.T, config, id string) string {
	t.Helper()
	return writeRawBundle(t, strings.ReplaceAll(config, "CID", id))
}

func readConfig(t *testing.T, bundle string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("config.json after PrepareBundle: %v\n%s", err, data)
	}
	return m
}

// writeDockerContainer writes dockerd's config.v2.json for container id.
func writeDockerContainer(t *testing.T, root, id, name string, labels map[string]string) {
	t.Helper()
	dir := filepath.Join(root, "containers", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]any{
		"ID": id, "Name": "/" + name,
		"Config": map[string]any{"Image": "busybox", "Labels": labels},
		"State":  map[string]any{"Running": false},
	})
	if err := os.WriteFile(filepath.Join(dir, "config.v2.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPrepareBundleDocker(t *testing.T) {
	const id = "4f2a9c0e1b3d5a7c9e0f2a4c6e8a0b2d4f6a8c0e2a4c6e8a0b2d4f6a8c0e2a4c"
	const self = "/usr/local/bin/doorman"
	dockerRoot := t.TempDir()
	writeDockerContainer(t, dockerRoot, id, "web", map[string]string{
		AnnotationMode:         "allowlist",
		AnnotationAllowedHosts: "api.example.test,*.github.com",
		"com.example.other":    "not copied",
	})
	allowICMP := false
	cfg := RuntimeConfig{DockerRoot: dockerRoot, StateDir: "/run/dm", LogDir: "/var/log/dm",
		DefaultPolicy: filepath.Join(t.TempDir(), "none"), AllowICMP: &allowICMP}
	bundle := bundleWith(t, dockerConfig, id)
	if err := os.Chmod(filepath.Join(bundle, "config.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := readConfig(t, bundle)

	if err := PrepareBundle(bundle, id, cfg, self); err != nil {
		t.Fatalf("PrepareBundle: %v", err)
	}
	got := readConfig(t, bundle)

	// The labels became annotations; other labels did not.
	wantAnn := map[string]any{AnnotationMode: "allowlist", AnnotationAllowedHosts: "api.example.test,*.github.com", annotationDockerName: "web"}
	if !reflect.DeepEqual(got["annotations"], wantAnn) {
		t.Errorf("annotations = %v, want %v", got["annotations"], wantAnn)
	}

	// Docker's prestart hook is first and untouched; doorman's hooks are
	// createRuntime and poststop, with the configured flags.
	hooks := got["hooks"].(map[string]any)
	if !reflect.DeepEqual(hooks["prestart"], before["hooks"].(map[string]any)["prestart"]) {
		t.Errorf("prestart hooks changed: %v", hooks["prestart"])
	}
	if a := hooks["prestart"].([]any)[0].(map[string]any)["args"].([]any); a[2] != id {
		t.Errorf("libnetwork-setkey args = %v", a)
	}
	for _, stage := range []string{StageCreateRuntime, StagePoststop} {
		want := []any{map[string]any{"path": self, "args": []any{"doorman", "hook",
			"--state-dir=/run/dm", "--log-dir=/var/log/dm", "--default-policy=" + cfg.DefaultPolicy, "--allow-icmp=false", stage}}}
		if !reflect.DeepEqual(hooks[stage], want) {
			t.Errorf("%s hooks = %v, want %v", stage, hooks[stage], want)
		}
	}

	// The environment says what the container gets: Docker's default caps
	// hold CAP_NET_RAW.
	env := got["process"].(map[string]any)["env"].([]any)
	wantEnv := []any{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=4f2a9c0e1b3d",
		EnvNetworkMode + "=allowlist", EnvEnforcement + "=partial (container holds CAP_NET_RAW)"}
	if !reflect.DeepEqual(env, wantEnv) {
		t.Errorf("env = %q, want %q", env, wantEnv)
	}

	// Everything else is as the engine wrote it, unknown fields included.
	for _, k := range []string{"ociVersion", "root", "hostname", "linux", "x-engine-top-level"} {
		if !reflect.DeepEqual(got[k], before[k]) {
			t.Errorf("%s changed: %v → %v", k, before[k], got[k])
		}
	}
	if got["process"].(map[string]any)["x-engine-process-extra"] == nil {
		t.Error("an unknown field of process was dropped")
	}
	if fi, err := os.Stat(filepath.Join(bundle, "config.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode: %v, %v; want 0600", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(bundle, "*doorman-tmp*")); len(left) > 0 {
		t.Errorf("temporary file left: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(bundle, ".*doorman-tmp*")); len(left) > 0 {
		t.Errorf("temporary file left: %v", left)
	}

	// A second run (a retried create) changes nothing.
	first, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err := PrepareBundle(bundle, id, cfg, self); err != nil {
		t.Fatalf("second PrepareBundle: %v", err)
	}
	second, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
	if !bytes.Equal(first, second) {
		t.Errorf("second PrepareBundle changed config.json:\n%s\n→\n%s", first, second)
	}
}

func TestPrepareBundleAnnotations(t *testing.T) {
	const self = "/usr/local/bin/doorman"
	dockerRoot := t.TempDir()
	// Labels that must not be read: the spec's annotations come first.
	writeDockerContainer(t, dockerRoot, "c1", "web", map[string]string{AnnotationMode: "open"})
	cfg := RuntimeConfig{DockerRoot: dockerRoot, DefaultPolicy: filepath.Join(t.TempDir(), "none")}
	config := `{
  "ociVersion": "1.0.2",
  "process": {"args": ["sh"], "env": ["DOORMAN_ENFORCEMENT=full, trust me", "A=1"],
    "capabilities": {"bounding": ["CAP_KILL"]}},
  "annotations": {"doorman.io/mode": "none", "org.example/keep": "yes"},
  "hooks": {"createRuntime": [{"path": "/usr/bin/other-hook", "args": ["other-hook", "x"]}]},
  "linux": {"namespaces": [{"type": "network", "path": "/run/netns/x"}]}
}`
	bundle := bundleWith(t, config, "c1")
	if err := PrepareBundle(bundle, "c1", cfg, self); err != nil {
		t.Fatalf("PrepareBundle: %v", err)
	}
	got := readConfig(t, bundle)
	if want := map[string]any{AnnotationMode: "none", "org.example/keep": "yes"}; !reflect.DeepEqual(got["annotations"], want) {
		t.Errorf("annotations = %v, want %v", got["annotations"], want)
	}
	// The container cannot bring its own label: it is replaced.
	env := got["process"].(map[string]any)["env"].([]any)
	if want := []any{EnvEnforcement + "=full", "A=1", EnvNetworkMode + "=none"}; !reflect.DeepEqual(env, want) {
		t.Errorf("env = %q, want %q", env, want)
	}
	// An existing createRuntime hook stays first.
	cr := got["hooks"].(map[string]any)[StageCreateRuntime].([]any)
	if len(cr) != 2 || cr[0].(map[string]any)["path"] != "/usr/bin/other-hook" || cr[1].(map[string]any)["path"] != self {
		t.Errorf("createRuntime hooks = %v", cr)
	}
	if a := cr[1].(map[string]any)["args"].([]any); !reflect.DeepEqual(a, []any{"doorman", "hook", "--default-policy=" + cfg.DefaultPolicy, StageCreateRuntime}) {
		t.Errorf("doorman's createRuntime args = %v", a)
	}
}

func TestPrepareBundleDefaultPolicy(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "default.policy")
	if err := os.WriteFile(policy, []byte("mode: none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := RuntimeConfig{DockerRoot: t.TempDir(), DefaultPolicy: policy}
	bundle := bundleWith(t, `{"process": {"args": ["sh"]}, "linux": {"namespaces": [{"type": "network"}]}}`, "c1")
	if err := PrepareBundle(bundle, "c1", cfg, "/d"); err != nil {
		t.Fatalf("PrepareBundle: %v", err)
	}
	got := readConfig(t, bundle)
	if env := got["process"].(map[string]any)["env"].([]any); !reflect.DeepEqual(env, []any{EnvNetworkMode + "=none", EnvEnforcement + "=full"}) {
		t.Errorf("env = %q", env)
	}
	if _, ok := got["annotations"]; ok {
		t.Errorf("annotations added without labels: %v", got["annotations"])
	}
}

func TestPrepareBundleRefuses(t *testing.T) {
	dockerRoot := t.TempDir()
	cfg := RuntimeConfig{DockerRoot: dockerRoot, DefaultPolicy: filepath.Join(t.TempDir(), "default.policy")}
	writeDockerContainer(t, dockerRoot, "badlabel", "web", map[string]string{AnnotationAllowedHosts: "a*b.com"})
	writeDockerContainer(t, dockerRoot, "nolabel", "web", map[string]string{"com.example": "x"})
	base := `{"process": {"args": ["sh"]}, "linux": {"namespaces": [{"type": "network"}]}ANN}`
	cases := []struct {
		name, id, annotations string
		want                  []string
	}{
		{"no policy anywhere", "c1", "", []string{"no doorman policy", AnnotationMode, AnnotationAllowedHosts, cfg.DefaultPolicy}},
		{"labels without a policy", "nolabel", "", []string{"no doorman policy", AnnotationMode}},
		{"bad label", "badlabel", "", []string{AnnotationAllowedHosts, `"a*b.com"`}},
		{"unknown mode", "c1", `, "annotations": {"doorman.io/mode": "permissive"}`, []string{AnnotationMode, `"permissive"`}},
		{"an id that is a path", "../../etc", "", []string{"no doorman policy"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bundle := bundleWith(t, strings.Replace(base, "ANN", tc.annotations, 1), tc.id)
			before, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
			err := PrepareBundle(bundle, tc.id, cfg, "/d")
			if err == nil {
				t.Fatal("PrepareBundle accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if after, _ := os.ReadFile(filepath.Join(bundle, "config.json")); !bytes.Equal(before, after) {
				t.Errorf("a refused bundle was rewritten:\n%s", after)
			}
		})
	}
	// Not a bundle at all.
	if err := PrepareBundle(t.TempDir(), "c1", cfg, "/d"); err == nil {
		t.Error("a bundle without config.json passed")
	}
	if err := PrepareBundle(writeRawBundle(t, "{not json"), "c1", cfg, "/d"); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("config.json that is not JSON: %v", err)
	}
}

func TestWrap(t *testing.T) {
	dir := t.TempDir()
	fakeRunc := filepath.Join(dir, "runc")
	if err := os.WriteFile(fakeRunc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := RuntimeConfig{Runc: fakeRunc, DockerRoot: t.TempDir(), DefaultPolicy: filepath.Join(dir, "none")}
	config := `{"process": {"args": ["sh"]}, "annotations": {"doorman.io/mode": "none"}, "linux": {"namespaces": [{"type": "network"}]}}`
	hasHooks := func(bundle string) bool {
		_, ok := readConfig(t, bundle)["hooks"]
		return ok
	}

	for _, args := range [][]string{
		{"--root", "/r", "--log-format", "json", "create", "--bundle", "BUNDLE", "c1"},
		{"--systemd-cgroup", "run", "-d", "-b=BUNDLE", "c1"},
		{"-root", "/r", "create", "-bundle", "BUNDLE", "--pid-file", "/p", "c1"},
	} {
		bundle := writeRawBundle(t, config)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "BUNDLE", bundle)
		}
		runc, _, err := Wrap(args, cfg, "/usr/local/bin/doorman")
		if err != nil || runc != fakeRunc {
			t.Errorf("Wrap(%q) = %q, %v", args, runc, err)
		}
		if !hasHooks(bundle) {
			t.Errorf("Wrap(%q) did not prepare the bundle", args)
		}
	}

	// Other verbs, and a create without an id, pass through untouched.
	for _, args := range [][]string{{"start", "c1"}, {"--root", "/r", "delete", "--force", "c1"}, {"state", "c1"}, {"create", "--bundle", "BUNDLE"}, {"--version"}} {
		bundle := writeRawBundle(t, config)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "BUNDLE", bundle)
		}
		if runc, _, err := Wrap(args, cfg, "/d"); err != nil || runc != fakeRunc {
			t.Errorf("Wrap(%q) = %q, %v", args, runc, err)
		}
		if hasHooks(bundle) {
			t.Errorf("Wrap(%q) touched a bundle", args)
		}
	}

	// A container without a policy does not reach runc.
	bundle := writeRawBundle(t, `{"process": {"args": ["sh"]}}`)
	if _, _, err := Wrap([]string{"create", "--bundle", bundle, "c9"}, cfg, "/d"); err == nil ||
		!strings.Contains(err.Error(), "c9") || !strings.Contains(err.Error(), AnnotationMode) {
		t.Errorf("Wrap of a container without a policy: %v", err)
	}
	// Nor does anything when runc is not there.
	if _, _, err := Wrap([]string{"state", "c1"}, RuntimeConfig{Runc: filepath.Join(dir, "no-runc")}, "/d"); err == nil {
		t.Error("Wrap with a missing runc passed")
	}
}

// --doorman-runtime=NAME among the first arguments picks one of the
// configured runtimes, whose flags go first; the flag itself never
// reaches the runtime, and a name the config lacks runs nothing.
func TestWrapPicksRuntime(t *testing.T) {
	dir := t.TempDir()
	runsc := filepath.Join(dir, "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := RuntimeConfig{Runc: filepath.Join(dir, "no-runc"), Runtimes: map[string]RuntimeEntry{
		"runsc": {Path: runsc, Args: []string{"--network=sandbox", "--platform=systrap"}}}}
	for _, args := range [][]string{
		{"--doorman-runtime=runsc", "--root", "/run/x", "state", "c1"},
		{"--root", "/run/x", "--doorman-runtime", "runsc", "state", "c1"},
	} {
		bin, out, err := Wrap(args, cfg, "/d")
		want := []string{"--network=sandbox", "--platform=systrap", "--root", "/run/x", "state", "c1"}
		if err != nil || bin != runsc || !slices.Equal(out, want) {
			t.Errorf("Wrap(%q) = %q %q, %v; want %q %q", args, bin, out, err, runsc, want)
		}
	}
	if _, _, err := Wrap([]string{"--doorman-runtime=kata", "state", "c1"}, cfg, "/d"); err == nil || !strings.Contains(err.Error(), "kata") || !strings.Contains(err.Error(), "runsc") {
		t.Errorf("an unknown runtime: %v", err)
	}
	// Without the flag the wrapper wraps runc, which is missing here.
	if _, _, err := Wrap([]string{"state", "c1"}, cfg, "/d"); err == nil {
		t.Error("without --doorman-runtime the wrapper did not look for runc")
	}
}

func TestFindRunc(t *testing.T) {
	t.Setenv("DOORMAN_RUNC", "")
	selfDir, otherDir := t.TempDir(), t.TempDir()
	self := filepath.Join(selfDir, "runc") // the wrapper installed as "runc"
	other := filepath.Join(otherDir, "runc")
	for _, p := range []string{self, other} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", selfDir+string(os.PathListSeparator)+otherDir)
	if got, err := findRunc("", self); got != other || err != nil {
		t.Errorf("findRunc skipping itself = %q, %v; want %s", got, err, other)
	}
	if got, err := findRunc(other, self); got != other || err != nil {
		t.Errorf("configured: %q, %v", got, err)
	}
	if _, err := findRunc(filepath.Join(otherDir, "missing"), self); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("configured but missing: %v", err)
	}
	t.Setenv("DOORMAN_RUNC", other)
	if got, err := findRunc("", self); got != other || err != nil {
		t.Errorf("DOORMAN_RUNC: %q, %v", got, err)
	}
}

func TestLoadRuntimeConfig(t *testing.T) {
	dir := t.TempDir()
	if c, err := LoadRuntimeConfig(filepath.Join(dir, "missing.json")); err != nil || !reflect.DeepEqual(c, RuntimeConfig{}) {
		t.Errorf("missing file: %+v, %v", c, err)
	}
	path := filepath.Join(dir, "runtime.json")
	os.WriteFile(path, []byte(`{"runc": "/usr/sbin/runc", "stateDir": "/run/dm", "allowICMP": true, "upstreamResolver": "203.0.113.53:53"}`), 0o644)
	c, err := LoadRuntimeConfig(path)
	if err != nil || c.Runc != "/usr/sbin/runc" || c.StateDir != "/run/dm" || c.AllowICMP == nil || !*c.AllowICMP {
		t.Errorf("valid file: %+v, %v", c, err)
	}
	if a, err := c.hookArgs(); err != nil || !slices.Equal(a, []string{"--state-dir=/run/dm", "--upstream-resolver=203.0.113.53:53", "--allow-icmp=true"}) {
		t.Errorf("hookArgs = %q, %v", a, err)
	}
	// upstreamResolver takes what every front door takes, and passes it
	// on as addr:port; a bad one refuses the container with a message
	// naming the file, the key, the value and why.
	for in, want := range map[string]string{"203.0.113.53": "203.0.113.53:53", "2001:db8::53": "[2001:db8::53]:53", "[2001:db8::53]:5353": "[2001:db8::53]:5353"} {
		os.WriteFile(path, []byte(`{"upstreamResolver": "`+in+`"}`), 0o644)
		c, err := LoadRuntimeConfig(path)
		if a, aerr := c.hookArgs(); err != nil || aerr != nil || !slices.Equal(a, []string{"--upstream-resolver=" + want}) {
			t.Errorf("upstreamResolver %q: hookArgs = %q, %v, %v", in, a, err, aerr)
		}
	}
	os.WriteFile(path, []byte(`{"upstreamResolver": "dns.example"}`), 0o644)
	c, err = LoadRuntimeConfig(path)
	if err != nil {
		t.Fatalf("a bad upstreamResolver fails only the containers' creation, not the loading: %v", err)
	}
	_, err = c.hookArgs()
	if want := "runtime config " + path + `: upstreamResolver "dns.example": not an IP address (name the server by its address); want addr or addr:port, such as 203.0.113.53, 203.0.113.53:5353, 2001:db8::53 or [2001:db8::53]:5353`; err == nil || err.Error() != want {
		t.Errorf("bad upstreamResolver: %v\nwant %s", err, want)
	}
	// nat64Prefixes: each passed on as --nat64-prefix; a bad one refuses
	// the container naming the file, the key, the value and why.
	os.WriteFile(path, []byte(`{"nat64Prefixes": ["2001:db8:64::/96", "64:ff9b:1:a00::/64"]}`), 0o644)
	c, err = LoadRuntimeConfig(path)
	if a, aerr := c.hookArgs(); err != nil || aerr != nil || !slices.Equal(a, []string{"--nat64-prefix=2001:db8:64::/96", "--nat64-prefix=64:ff9b:1:a00::/64"}) {
		t.Errorf("nat64Prefixes: hookArgs = %q, %v, %v", a, err, aerr)
	}
	os.WriteFile(path, []byte(`{"nat64Prefixes": ["2001:db8:64::1/96"]}`), 0o644)
	c, _ = LoadRuntimeConfig(path)
	_, err = c.hookArgs()
	if want := "runtime config " + path + `: nat64Prefixes "2001:db8:64::1/96": host bits set: did you mean 2001:db8:64::/96?`; err == nil || err.Error() != want {
		t.Errorf("bad nat64Prefixes: %v\nwant %s", err, want)
	}
	os.WriteFile(path, []byte(`{"runc": `), 0o644)
	if _, err := LoadRuntimeConfig(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("invalid file: %v", err)
	}
}
