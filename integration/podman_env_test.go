package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/hostsession"
	"github.com/doorman-net/doorman/integration/ociimage"
)

// debianCNIDir is where Debian's containernetworking-plugins package puts
// the reference plugins; Podman's conflist uses its bridge and host-local.
const debianCNIDir = "/usr/lib/cni"

// probeImage is the image every Podman test container runs: a rootfs holding
// only the static probe binary (integration/probe) and the test CA.
const probeImage = "localhost/dm-probe:test"

// podmanEnv is one test's Podman: a private configuration (CNI backend, the
// test's conflist, vfs storage and all state in the test's temp dir) and a
// "host session", a shell inside testnet's host namespace with its own mount
// namespace, in which every podman command runs. Nothing is read from or
// written to the machine's Podman configuration or storage.
//
// Why a session: `ip netns exec` gives each command a new mount namespace,
// and Podman keeps mounts there (the container's netns bind mount under
// /run/netns, its shm). Commands of one container's life (run -d, exec, rm)
// must see the same mounts, as they would on a real host, so they all enter
// the one mount namespace the session holds (nsenter --mount --net).
type podmanEnv struct {
	t            *testing.T
	e            *cniEnv
	network      string   // the CNI network's name
	cgroupParent string   // a cgroup of this test's own, under each hierarchy's root
	env          []string // podman's environment: CONTAINERS_CONF, CONTAINERS_STORAGE_CONF
	sessionPID   int      // the shell holding the host session
	netDir       string   // Podman's network_config_dir: the conflists
	opts         podmanOptions
}

// podmanOptions change the configuration newPodmanEnv writes; the zero
// value is TestPodman's: doorman chained in the conflist, no OCI hooks.
type podmanOptions struct {
	// noDoormanCNI leaves doorman out of the conflist: a plain bridge
	// network on which CNI enforces nothing.
	noDoormanCNI bool
	// hooksDir, if set, is containers.conf's hooks_dir: the only
	// directory Podman reads OCI hooks (hooks.d JSON files) from.
	hooksDir string
}

// podmanOption sets one of podmanOptions.
type podmanOption func(*podmanOptions)

// withoutDoormanCNI makes the test's network a plain bridge with
// host-local IPAM, without doorman in its conflist.
func withoutDoormanCNI() podmanOption { return func(o *podmanOptions) { o.noDoormanCNI = true } }

// withHooksDir makes dir Podman's only OCI hooks directory.
func withHooksDir(dir string) podmanOption { return func(o *podmanOptions) { o.hooksDir = dir } }

// sessionResult is what one command run in a host session did.
type sessionResult struct {
	tool           string
	args           []string
	exit           int
	stdout, stderr string
}

func (r sessionResult) String() string {
	return fmt.Sprintf("%s %s: exit %d, stdout %q, stderr %q", r.tool, strings.Join(r.args, " "), r.exit, r.stdout, r.stderr)
}

// podmanResult is what one podman command did.
type podmanResult = sessionResult

// newPodmanEnv writes the configuration (changed by opts), starts the host
// session and imports the probe image. t.Cleanup removes every container
// and image, ends the session, and removes the test's cgroups.
func newPodmanEnv(t *testing.T, e *cniEnv, opts ...podmanOption) *podmanEnv {
	t.Helper()
	dir := t.TempDir()
	id := filepath.Base(e.net.HostNS().Name()) // dm-host-<hex>: unique per test
	p := &podmanEnv{
		t:            t,
		e:            e,
		network:      "dm-podman",
		cgroupParent: "/" + strings.Replace(id, "dm-host-", "dm-podman-", 1),
	}
	for _, o := range opts {
		o(&p.opts)
	}
	confFile, storageFile := p.writeConfig(dir)
	p.env = append(envWithoutProxy(),
		"CONTAINERS_CONF="+confFile,
		"CONTAINERS_STORAGE_CONF="+storageFile,
	)

	t.Cleanup(p.removeCgroups) // after the session and every container are gone
	p.startSession()
	t.Cleanup(p.removeAll)

	p.importProbeImage(dir)
	return p
}

// writeConfig writes containers.conf, storage.conf and the network's
// conflist under dir and returns the paths of the first two.
func (p *podmanEnv) writeConfig(dir string) (confFile, storageFile string) {
	p.t.Helper()
	netDir := filepath.Join(dir, "net.d")
	p.netDir = netDir
	for _, d := range []string{netDir, filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			p.t.Fatal(err)
		}
	}
	// Debian's plugin directory first: its bridge and host-local (v1.1.1)
	// are the ones a Debian host runs; doorman comes from binDir.
	conf := fmt.Sprintf(`[containers]
# Podman's default nofile limit is above what this VM allows.
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[network]
network_backend = "cni"
cni_plugin_dirs = [%q, %q]
network_config_dir = %q

[engine]
# No systemd, no journald: plain cgroupfs and a file for events.
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %q
tmp_dir = %q
# File locks under tmp_dir instead of the machine-wide /dev/shm/libpod_lock.
lock_type = "file"
`, debianCNIDir, binDir, netDir, filepath.Join(dir, "tmp", "events.log"), filepath.Join(dir, "tmp"))
	if p.opts.hooksDir != "" {
		// Replaces Podman's defaults (/usr/share/containers/oci/hooks.d,
		// /etc/containers/oci/hooks.d): the machine's hooks stay out.
		conf += fmt.Sprintf("hooks_dir = [%q]\n", p.opts.hooksDir)
	}
	storage := fmt.Sprintf(`[storage]
driver = "vfs"
graphroot = %q
runroot = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "runroot"))

	confFile, storageFile = filepath.Join(dir, "containers.conf"), filepath.Join(dir, "storage.conf")
	files := map[string][]byte{
		confFile:    []byte(conf),
		storageFile: []byte(storage),
		filepath.Join(netDir, p.network+".conflist"): p.conflist(),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
	return confFile, storageFile
}

// conflist is the test's network (see bridgeConflist), with doorman
// unless withoutDoormanCNI.
func (p *podmanEnv) conflist() []byte {
	p.t.Helper()
	return bridgeConflist(p.t, p.e, p.network, lanA, !p.opts.noDoormanCNI)
}

// cniLAN is a bridge in testnet's host namespace and the address ranges
// of its containers, inside those testnet keeps free for the caller.
type cniLAN struct {
	bridge            string
	subnet4, gateway4 string
	subnet6, gateway6 string
}

// lanBridge is the reference bridge plugin's entry for lan, with
// host-local IPAM in e's directory and default routes for both families.
func lanBridge(e *cniEnv, lan cniLAN) map[string]any {
	return map[string]any{
		"type":      "bridge",
		"bridge":    lan.bridge,
		"isGateway": true,
		"ipMasq":    false,
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": e.ipamDir,
			"ranges": []any{
				[]any{map[string]any{"subnet": lan.subnet4, "gateway": lan.gateway4}},
				[]any{map[string]any{"subnet": lan.subnet6, "gateway": lan.gateway6}},
			},
			"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
		},
	}
}

// The LANs a test's CNI networks use: lanA for one network, lanB for a
// second one beside it.
var (
	lanA = cniLAN{"dmbr0", "198.51.100.128/26", "198.51.100.129", "2001:db8:3::/64", "2001:db8:3::1"}
	lanB = cniLAN{"dmbr1", "198.51.100.192/26", "198.51.100.193", "2001:db8:4::/64", "2001:db8:4::1"}
)

// bridgeConflist is a network named name: a bridge in the host namespace
// with host-local IPAM on lan, and, if withDoorman, doorman chained after
// it with the same policy as the libcni tests. cniVersion is 1.0.0, the
// newest that Podman 4.3's libcni and Debian's plugins speak.
func bridgeConflist(t *testing.T, e *cniEnv, name string, lan cniLAN, withDoorman bool) []byte {
	t.Helper()
	bridge := lanBridge(e, lan)
	bridge["dns"] = map[string]any{"nameservers": []string{e.net.DNS.String(), e.net.DNS6.String()}}
	plugins := []any{bridge}
	if withDoorman {
		plugins = append(plugins, map[string]any{
			"type":             "doorman",
			"mode":             "allowlist",
			"allowedHosts":     []string{apiName},
			"stateDir":         e.stateDir,
			"logDir":           e.logDir,
			"policyDir":        e.policyDir,
			"upstreamResolver": e.net.DNS.String(),
		})
	}
	list := map[string]any{
		"cniVersion": "1.0.0",
		"name":       name,
		"plugins":    plugins,
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// startSession starts the host session (see startHostSession).
func (p *podmanEnv) startSession() {
	p.t.Helper()
	p.sessionPID = startHostSession(p.t, p.e)
}

// startHostSession starts the shell that holds a test's host session, the
// mount namespace in which a container engine's commands run one after the
// other as on a real host (see podmanEnv and hostsession), inside testnet's
// host namespace, and returns its pid.
func startHostSession(t testing.TB, e *cniEnv) int {
	t.Helper()
	return hostsession.Start(t, e.net.HostNS(), "").PID()
}

// podman runs podman with args inside the host session.
func (p *podmanEnv) podman(args ...string) podmanResult {
	p.t.Helper()
	return runInSession(p.t, p.sessionPID, p.env, "podman", nil, args)
}

// runInSession runs tool with its global flags and args inside the host
// session of the shell sessionPID (its mount and network namespaces),
// within 60 s. A tool that could not be run at all fails the test.
func runInSession(t testing.TB, sessionPID int, env []string, tool string, globals, args []string) sessionResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := slices.Concat([]string{"--target", strconv.Itoa(sessionPID), "--mount", "--net", "--", tool}, globals, args)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	cmd.Env = env
	// Should a process the tool leaves behind hold the pipes, do not
	// wait for it beyond the tool's own exit.
	cmd.WaitDelay = 5 * time.Second
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := sessionResult{tool: tool, args: args, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		r.exit = ee.ExitCode()
	default:
		t.Fatalf("%s %s: %v (stderr %q)", tool, strings.Join(args, " "), err, errb.String())
	}
	return r
}

// mustPodman is podman that fails the test unless the command succeeds, and
// returns its trimmed stdout.
func (p *podmanEnv) mustPodman(args ...string) string {
	p.t.Helper()
	r := p.podman(args...)
	if r.exit != 0 {
		p.t.Fatal(r)
	}
	return strings.TrimSpace(r.stdout)
}

// runArgs are the `podman run` options every test container gets: the
// test's network and resolvers, the test's cgroup parent, and no pulls.
func (p *podmanEnv) runArgs() []string {
	return []string{
		"--network", p.network,
		"--dns", p.e.net.DNS.String(), "--dns", p.e.net.DNS6.String(),
		"--cgroup-parent", p.cgroupParent,
		"--pull", "never",
	}
}

// importProbeImage imports the probe image (see buildProbeImage) as
// probeImage.
func (p *podmanEnv) importProbeImage(dir string) {
	p.t.Helper()
	p.mustPodman("import", "--quiet", buildProbeImage(p.t, dir, p.e.net.CAPEM), probeImage)
}

// writeTar writes the tree under dir to the tar file path.
func writeTar(path, dir string) error { return ociimage.TarDir(path, dir) }

// removeAll removes every container and image of the test's storage.
func (p *podmanEnv) removeAll() {
	for _, args := range [][]string{{"rm", "--all", "--force", "--time", "0"}, {"rmi", "--all", "--force"}} {
		if r := p.podman(args...); r.exit != 0 {
			p.t.Errorf("cleanup: %v", r)
		}
	}
	if left := p.podman("ps", "--all", "--quiet"); left.exit != 0 || strings.TrimSpace(left.stdout) != "" {
		p.t.Errorf("cleanup: containers left: %v", left)
	}
}

// removeCgroups removes the test's cgroup parent (conmon's and the
// containers' cgroups below it, all empty by now) from every hierarchy.
func (p *podmanEnv) removeCgroups() { removeCgroupParent(p.t, p.cgroupParent) }

// removeCgroupTree is hostsession.RemoveCgroupTree.
func removeCgroupTree(dir string) error { return hostsession.RemoveCgroupTree(dir) }

// mountInfo is a hostsession.Mount (a mount at or below /sys/fs/cgroup).
type mountInfo struct {
	mountpoint, fstype, superOpts string
}

// cgroupMounts is hostsession.CgroupMounts.
func cgroupMounts() ([]mountInfo, error) {
	ms, err := hostsession.CgroupMounts()
	out := make([]mountInfo, len(ms))
	for i, m := range ms {
		out[i] = mountInfo{m.Mountpoint, m.FSType, m.SuperOpts}
	}
	return out, err
}

// cgroupMountScript is hostsession.CgroupMountScript.
func cgroupMountScript() (string, error) { return hostsession.CgroupMountScript() }

func shellQuote(s string) string { return hostsession.ShellQuote(s) }

// envWithoutProxy is the process environment minus *_proxy variables.
func envWithoutProxy() []string { return hostsession.EnvWithoutProxy() }
