package hook

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/hostconf"
)

func TestLogRuntimeError(t *testing.T) {
	dir := t.TempDir()
	jsonLog, textLog := filepath.Join(dir, "log.json"), filepath.Join(dir, "log.txt")
	err := errors.New(`doorman: container c1: annotation doorman.io/mode: invalid mode "bogus"`)

	logRuntimeError([]string{"--root", "/r", "--log", jsonLog, "--log-format", "json", "create", "--bundle", "/b", "c1"}, err)
	data, rerr := os.ReadFile(jsonLog)
	if rerr != nil {
		t.Fatal(rerr)
	}
	// containerd's shim decodes the log line by line and reports the last
	// "error" message.
	var line struct{ Level, Msg, Time string }
	if jerr := json.Unmarshal(data, &line); jerr != nil || line.Level != "error" || line.Msg != err.Error() || line.Time == "" {
		t.Errorf("json log: %q (%v)", data, jerr)
	}

	logRuntimeError([]string{"-log=" + textLog, "create", "c1"}, err)
	if data, _ := os.ReadFile(textLog); !strings.Contains(string(data), "level=error") || !strings.Contains(string(data), `\"bogus\"`) {
		t.Errorf("text log: %q", data)
	}

	// A --log after the command is runc create's own business, not the
	// runtime log.
	other := filepath.Join(dir, "not-a-log")
	logRuntimeError([]string{"create", "--log", other, "c1"}, err)
	if _, serr := os.Stat(other); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("wrote a log named after the command: %v", serr)
	}
}

func TestGlobalFlag(t *testing.T) {
	args := []string{"--root", "/run/docker/runtime-runc/moby", "--log=/l.json", "-log-format", "json", "--systemd-cgroup", "exec", "--root", "/no"}
	for name, want := range map[string]string{"root": "/run/docker/runtime-runc/moby", "log": "/l.json", "log-format": "json", "criu": ""} {
		if got := globalFlag(args, name); got != want {
			t.Errorf("globalFlag(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestParseExec(t *testing.T) {
	cases := []struct {
		args        []string
		process, id string
	}{
		// containerd's go-runc for docker exec.
		{[]string{"--process", "/tmp/runc-process123", "--detach", "--pid-file", "/b/e1.pid", "c1"}, "/tmp/runc-process123", "c1"},
		{[]string{"-p=/p.json", "-d", "c1"}, "/p.json", "c1"},
		{[]string{"--env", "A=1", "-u", "0", "c1", "sh", "-c", "env"}, "", "c1"},
		{[]string{"--cwd", "/", "--", "c1", "env"}, "", "c1"},
		{nil, "", ""},
	}
	for _, tc := range cases {
		if p, id := parseExec(tc.args); p != tc.process || id != tc.id {
			t.Errorf("parseExec(%q) = %q, %q; want %q, %q", tc.args, p, id, tc.process, tc.id)
		}
	}
}

func TestPrepareExec(t *testing.T) {
	dir := t.TempDir()
	root, bundle := filepath.Join(dir, "runc"), filepath.Join(dir, "bundle")
	for _, d := range []string{filepath.Join(root, "c1"), bundle} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "c1", "state.json"), `{"id":"c1","config":{"labels":["bundle=`+bundle+`"]}}`)
	write(filepath.Join(bundle, "config.json"), `{"process":{"args":["sleep"],"env":["PATH=/bin","DOORMAN_NETWORK_MODE=allowlist","DOORMAN_ENFORCEMENT=full"]}}`)
	process := filepath.Join(dir, "process.json")
	write(process, `{"args":["env"],"env":["PATH=/bin","DOORMAN_ENFORCEMENT=forged"],"cwd":"/","terminal":false}`)

	prepareExec([]string{"--root", root, "exec"}, []string{"--process", process, "--detach", "c1"})
	var got struct {
		Args []string
		Env  []string
		Cwd  string
	}
	data, _ := os.ReadFile(process)
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "DOORMAN_ENFORCEMENT=full", "DOORMAN_NETWORK_MODE=allowlist"}; !slices.Equal(got.Env, want) || got.Cwd != "/" || !slices.Equal(got.Args, []string{"env"}) {
		t.Errorf("exec process after prepareExec: %s; want env %q and the rest unchanged", data, want)
	}

	// An unknown container: the process file stays as it was.
	before := `{"args":["env"],"env":["PATH=/bin"]}`
	write(process, before)
	prepareExec([]string{"--root", root, "exec"}, []string{"--process", process, "c2"})
	if data, _ := os.ReadFile(process); string(data) != before {
		t.Errorf("exec of an unknown container changed the process: %s", data)
	}
}

func TestDockerDNSAndEmbeddedUpstreams(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "containers", "c1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "containers", "c1", "hostconfig.json"), []byte(`{"Dns":["203.0.113.53","2001:db8:100::53"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dns, ok := dockerDNS(root, "c1")
	if !ok || dns != "203.0.113.53,2001:db8:100::53" {
		t.Errorf("dockerDNS = %q, %v", dns, ok)
	}
	for _, id := range []string{"c2", "../containers/c1"} {
		if dns, ok := dockerDNS(root, id); ok || dns != "" {
			t.Errorf("dockerDNS(%q) = %q, %v; want nothing", id, dns, ok)
		}
	}
	got := embeddedDNSUpstreams(map[string]string{annotationDockerDNS: dns + ",not-an-address"})
	want := []netip.Addr{netip.MustParseAddr("203.0.113.53"), netip.MustParseAddr("2001:db8:100::53")}
	if !slices.Equal(got, want) {
		t.Errorf("embeddedDNSUpstreams = %v, want %v", got, want)
	}
	// Without the container's own servers: the runtime's resolv.conf.
	host, _ := os.ReadFile(hostconf.ResolvConf)
	if got := embeddedDNSUpstreams(nil); !slices.Equal(got, hostconf.ParseResolvConf(host)) {
		t.Errorf("embeddedDNSUpstreams without servers = %v, want %s's %v", got, hostconf.ResolvConf, hostconf.ParseResolvConf(host))
	}
}

// TestDockerProxyResolvers: a Docker container's proxy resolves with
// dockerd's record of the container (its --dns, else the runtime's
// resolv.conf), never with the container's writable resolv.conf; a
// container the wrapper found no record of gets nil (its resolv.conf).
func TestDockerProxyResolvers(t *testing.T) {
	got := dockerProxyResolvers(map[string]string{annotationDockerDNS: "203.0.113.53,2001:db8:100::53,203.0.113.53"})
	want := []netip.AddrPort{netip.MustParseAddrPort("203.0.113.53:53"), netip.MustParseAddrPort("[2001:db8:100::53]:53")}
	if !slices.Equal(got, want) {
		t.Errorf("with --dns: %v, want %v", got, want)
	}
	host, _ := os.ReadFile(hostconf.ResolvConf)
	var fromHost []netip.AddrPort
	for _, a := range hostconf.ParseResolvConf(host) {
		if ap := netip.AddrPortFrom(a, 53); !slices.Contains(fromHost, ap) {
			fromHost = append(fromHost, ap)
		}
	}
	if got := dockerProxyResolvers(map[string]string{annotationDockerDNS: ""}); !slices.Equal(got, fromHost) {
		t.Errorf("without --dns: %v, want %s's %v", got, hostconf.ResolvConf, fromHost)
	}
	if got := dockerProxyResolvers(map[string]string{"other": "x"}); got != nil {
		t.Errorf("without dockerd's record: %v, want nil", got)
	}
}

func TestSharesRuntimeNetNS(t *testing.T) {
	netns := func(path string) *specs.Spec {
		return &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace, Path: path}}}}
	}
	cases := []struct {
		spec *specs.Spec
		want bool
		name string
	}{
		{&specs.Spec{}, true, "no linux section"},
		{&specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}}}}, true, "no network namespace"},
		{netns(""), false, "a new network namespace"},
		// Docker's --network host names its bind mount of the daemon's
		// namespace; this process's namespace stands in for it.
		{netns("/proc/self/ns/net"), true, "the runtime's namespace by path"},
		{netns("/nonexistent/netns"), false, "a path that names nothing"},
	}
	for _, tc := range cases {
		if got := sharesRuntimeNetNS(tc.spec); got != tc.want {
			t.Errorf("%s: sharesRuntimeNetNS = %v, want %v", tc.name, got, tc.want)
		}
	}
}
