package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// criEnv is one test's Kubernetes node without Kubernetes: containerd's
// CRI plugin, which is what the kubelet drives, and crictl in the
// kubelet's place. A private containerd (its own root, state, sockets,
// runc root, CNI plugin and configuration directories, all under the
// test's temp dir) runs in a host session (startHostSession) inside
// testnet's host namespace, which plays the node; every crictl and ctr
// command runs in that session too. Its pods join a CNI network the way a
// node's pods join the cluster's: a primary network (the reference bridge,
// host-local and portmap plugins, as a CNI's DaemonSet would write it) with
// doorman chained after it the way its installer does (criInstaller).
// The sandbox (pause) image and the probe image are built by the test and
// imported with `ctr images import`: no registry is reachable.
//
// Nothing is read from or written to the machine's containerd, except what
// Debian's containerd 1.6 keeps at fixed paths during a pod's life: its
// shims' sockets (/run/containerd/s, created and removed by the shims) and
// libcni's result cache (/var/lib/cni/results, removed at each DEL).
type criEnv struct {
	tb         testing.TB
	e          *cniEnv
	dir        string
	suffix     string // unique per test, in pod names and uids
	address    string // containerd's gRPC socket
	cniBinDir  string // the plugin directory containerd runs CNI plugins from
	cgroupRoot string // the pods' cgroup parents go below it, as the kubelet's under /kubepods
	networks   []criNetwork
	confDirs   map[string]string // runtime handler → its CNI configuration directory
	install    criInstaller
	probeImage bool
	debugLog   bool
	env        []string
	sessionPID int
	containerd *exec.Cmd
	exited     chan error // containerd's Wait
	nextPod    atomic.Int32
}

// criNetwork is one CNI network of the node: a conflist in a configuration
// directory of its own, which the pods of one runtime handler join (the
// CRI plugin keeps a CNI configuration per handler: `crictl runp
// --runtime HANDLER`).
type criNetwork struct {
	handler string // the runtime handler; criDefaultHandler is the one pods get by default
	name    string // the conflist's name
	lan     cniLAN // the bridge and the address ranges of its pods
	// doorman makes the installer chain doorman after the primary
	// network's plugins.
	doorman bool
	// runsc makes the handler's runtime gVisor's shim
	// (containerd-shim-runsc-v1, io.containerd.runsc.v1) with runsc on
	// its PATH, the way a RuntimeClass handler "gvisor" or "runsc" is
	// set up on a node; its pods join the network all the same.
	runsc string // the directory holding runsc and the shim
	// logged puts the dm-cnilog plugin (criLogPlugin) into the chain,
	// right before doorman's entry and at the chain's end, both declaring
	// doorman's capabilities: they record what containerd sends the
	// plugins there (see criEnv.cniCalls).
	logged bool
}

// criDefaultHandler is the runtime handler of pods that name none, and
// the CRI plugin's default CNI configuration.
const criDefaultHandler = "runc"

// Where a dm-cnilog entry sits in a chain (see criNetwork.logged).
const (
	criLogBeforeDoorman = "before-doorman"
	criLogEnd           = "end"
)

// criDefaultNetwork is the network of the tests' pods: the reference
// plugins on lanA with doorman chained after them.
var criDefaultNetwork = criNetwork{handler: criDefaultHandler, name: "dm-cri", lan: lanA, doorman: true}

// criInstaller puts doorman into a node's CNI configuration: it finds the
// primary network's conflist in confDir and chains doorman's entry
// (criDoormanEntry) after its plugins, as `doorman install-cni --once
// --cni-conf-dir confDir --cni-bin-dir c.cniBinDir` is to.
type criInstaller func(c *criEnv, confDir string)

// criOption changes what newCRIEnv sets up.
type criOption func(*criEnv)

// withCRINetworks replaces the default network (criDefaultNetwork) with
// nets, one per runtime handler; one of them must be criDefaultHandler's.
func withCRINetworks(nets ...criNetwork) criOption {
	return func(c *criEnv) { c.networks = nets }
}

// withCRIInstaller replaces installByHand as the way doorman gets into
// the networks' configuration.
func withCRIInstaller(i criInstaller) criOption { return func(c *criEnv) { c.install = i } }

// withoutCRIProbeImage skips building and importing the probe image, for
// a benchmark that starts pods but no containers in them.
func withoutCRIProbeImage() criOption { return func(c *criEnv) { c.probeImage = false } }

// withCRIDebugLog makes containerd log at debug level, which in
// containerd 1.6 times each pod's CNI setup (see cniSetupTime).
func withCRIDebugLog() criOption { return func(c *criEnv) { c.debugLog = true } }

// withCRIContainerd runs the containerd (and its runc shim) found in
// binDir instead of the one on PATH: TestCRIPodCgroup needs a containerd
// that passes the cgroupPath capability, which Debian's 1.6 never does
// (.ci/run builds containerd 2 into criContainerd2Dir).
func withCRIContainerd(binDir string) criOption {
	return func(c *criEnv) {
		for i, kv := range c.env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				c.env[i] = "PATH=" + binDir + ":" + v
				return
			}
		}
		c.env = append(c.env, "PATH="+binDir+":/usr/sbin:/usr/bin:/sbin:/bin")
	}
}

// criContainerd2Dir is where .ci/run puts containerd 2 and its shim.
const criContainerd2Dir = "/opt/containerd2/bin"

// skipUnlessCRI skips the test unless containerd (with ctr), crictl and
// runc are installed.
func skipUnlessCRI(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
	for _, tool := range []string{"containerd", "ctr", "crictl", "runc", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("%s is not installed (.ci/run builds crictl from its module; apt-get install containerd runc util-linux): %v", tool, err)
		}
	}
}

// skipUnlessContainerd2 skips the test unless .ci/run's containerd 2 is
// in criContainerd2Dir.
func skipUnlessContainerd2(tb testing.TB) {
	tb.Helper()
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(criContainerd2Dir, bin)); err != nil {
			tb.Skipf("containerd 2 is not built (.ci/run builds it into %s): %v", criContainerd2Dir, err)
		}
	}
}

// newCRIEnv writes the node's configuration, starts the host session and
// containerd, and imports the pause and probe images. t.Cleanup removes
// every pod (stopp, rmp), stops containerd (and any shim it left), checks
// that no mount of it is left in the session, ends the session and removes
// the pods' cgroups; the temp dir goes with the test.
func newCRIEnv(tb testing.TB, e *cniEnv, opts ...criOption) *criEnv {
	tb.Helper()
	dir := tb.TempDir()
	suffix := strings.TrimPrefix(filepath.Base(e.net.HostNS().Name()), "dm-host-")
	c := &criEnv{
		tb:         tb,
		e:          e,
		dir:        dir,
		suffix:     suffix,
		address:    filepath.Join(dir, "containerd.sock"),
		cniBinDir:  filepath.Join(dir, "cni-bin"),
		cgroupRoot: "/dm-cri-" + suffix,
		networks:   []criNetwork{criDefaultNetwork},
		confDirs:   map[string]string{},
		install:    installByHand,
		probeImage: true,
		env:        envWithoutProxy(),
	}
	for _, o := range opts {
		o(c)
	}
	c.writeConfig()

	tb.Cleanup(func() { removeCgroupParent(tb, c.cgroupRoot) }) // after the session and every pod are gone
	tb.Cleanup(removeCreatedDirs("/run/containerd", "/run/containerd/s"))
	c.sessionPID = startHostSession(tb, e)
	c.startContainerd()
	tb.Cleanup(c.removeAllPods)

	c.importImage(buildPauseImage(tb, dir))
	if c.probeImage {
		c.importImage(buildCRIProbeImage(tb, dir, e.net.CAPEM))
	}
	return c
}

// writeConfig writes the CNI plugin directory, each network's
// configuration directory (the primary conflist, then the installer's
// work), containerd.toml and crictl.yaml.
func (c *criEnv) writeConfig() {
	tb := c.tb
	tb.Helper()
	if err := os.MkdirAll(c.cniBinDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	// The plugins a node's /opt/cni/bin holds: the reference bridge,
	// host-local and loopback (which the CRI plugin runs for the pod's
	// lo) that TestMain built, Debian's portmap, doorman, and the
	// logging plugin (this test binary, see criLogPlugin).
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	links := map[string]string{
		"bridge":     filepath.Join(binDir, "bridge"),
		"host-local": filepath.Join(binDir, "host-local"),
		"loopback":   filepath.Join(binDir, "loopback"),
		"portmap":    filepath.Join(debianCNIDir, "portmap"),
		"doorman":    doormanBin(),
		criLogPlugin: self,
	}
	for name, target := range links {
		if _, err := os.Stat(target); err != nil {
			tb.Fatalf("CNI plugin %s: %v (Debian's portmap: apt-get install containernetworking-plugins)", name, err)
		}
		if err := os.Symlink(target, filepath.Join(c.cniBinDir, name)); err != nil {
			tb.Fatal(err)
		}
	}

	var runtimes strings.Builder
	for _, n := range c.networks {
		confDir := filepath.Join(c.dir, "net.d-"+n.handler)
		if err := os.MkdirAll(confDir, 0o755); err != nil {
			tb.Fatal(err)
		}
		c.confDirs[n.handler] = confDir
		primary := criPrimaryConflist(tb, c.e, n.name, n.lan)
		if n.logged && n.doorman {
			primary = appendCNIPlugin(tb, primary, c.cniLogEntry(n.name, criLogBeforeDoorman))
		}
		writeFile(tb, filepath.Join(confDir, "10-"+n.name+".conflist"), primary)
		if n.doorman {
			c.install(c, confDir)
		}
		if n.logged {
			path := firstCNIConfig(tb, confDir)
			data, err := os.ReadFile(path)
			if err != nil {
				tb.Fatal(err)
			}
			writeFile(tb, path, appendCNIPlugin(tb, data, c.cniLogEntry(n.name, criLogEnd)))
		}
		// The default handler's directory is the CRI plugin's cni
		// conf_dir; each handler is a runtime of its own name.
		if n.runsc != "" {
			// runsc's own flags come from the shim's config file; the
			// shim and runsc are found on containerd's PATH.
			runscToml := filepath.Join(c.dir, "runsc.toml")
			writeFile(tb, runscToml, fmt.Appendf(nil, "[runsc_config]\n  network = \"sandbox\"\n  platform = \"systrap\"\n  root = %q\n", filepath.Join(c.dir, "runsc")))
			withCRIContainerd(n.runsc)(c)
			fmt.Fprintf(&runtimes, `
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s]
        runtime_type = "io.containerd.runsc.v1"
        cni_conf_dir = %q
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = %q
`, n.handler, confDir, n.handler, runscToml)
			continue
		}
		fmt.Fprintf(&runtimes, `
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s]
        runtime_type = "io.containerd.runc.v2"
        cni_conf_dir = %q
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s.options]
          SystemdCgroup = false
          Root = %q
`, n.handler, confDir, n.handler, filepath.Join(c.dir, "runc"))
	}
	if _, ok := c.confDirs[criDefaultHandler]; !ok {
		tb.Fatalf("no network for the default runtime handler %q", criDefaultHandler)
	}

	// restrict_oom_score_adj: this VM lacks CAP_SYS_RESOURCE, so runc
	// cannot give the pause container the CRI's default oom_score_adj
	// (-998). netns_mounts_under_state_dir keeps the pods' netns bind
	// mounts in the state dir rather than /var/run/netns. The native
	// snapshotter, because overlayfs may not stack on this machine's
	// /tmp; cgroupfs, as there is no systemd. No AppArmor profile is
	// loaded into the machine's kernel.
	containerd := fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    enable_selinux = false
    systemd_cgroup = false
    stream_server_address = "127.0.0.1"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %q
      conf_dir = %q
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
      default_runtime_name = %q
%s`, filepath.Join(c.dir, "root"), filepath.Join(c.dir, "state"), c.address, c.address+".ttrpc",
		filepath.Join(c.dir, "opt"), criPauseImage, c.cniBinDir, c.confDirs[criDefaultHandler],
		criDefaultHandler, runtimes.String())
	if c.debugLog {
		containerd += "\n[debug]\n  level = \"debug\"\n"
	}
	writeFile(tb, filepath.Join(c.dir, "containerd.toml"), []byte(containerd))
	// crictl reads /etc/crictl.yaml unless told otherwise: the machine's
	// stays out. The timeout covers each request, runp included.
	crictl := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\npull-image-on-create: false\n", c.address, c.address)
	writeFile(tb, filepath.Join(c.dir, "crictl.yaml"), []byte(crictl))
}

func writeFile(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// criPrimaryConflist is the node's primary network as a CNI's DaemonSet
// writes it (kindnet's shape: an interface plugin with host-local IPAM,
// then portmap): a bridge in the host namespace with host-local on lan.
// No "dns" key: as on a cluster, the pod's resolvers come from its
// dns_config, which containerd passes in the dns capability. cniVersion
// 1.0.0 is the newest containerd 1.6's libcni and Debian's portmap speak.
func criPrimaryConflist(tb testing.TB, e *cniEnv, name string, lan cniLAN) []byte {
	tb.Helper()
	list := map[string]any{
		"cniVersion": "1.0.0",
		"name":       name,
		"plugins": []any{
			lanBridge(e, lan),
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
		},
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// criCapabilities are the runtime capabilities doorman's entry declares
// (issue 16): containerd passes each in runtimeConfig only to the plugins
// that declare it.
var criCapabilities = map[string]bool{
	"io.kubernetes.cri.pod-annotations": true,
	"dns":                               true,
	"cgroupPath":                        true,
}

// criDoormanEntry is doorman's entry in a node's conflist, as the
// installer writes it: the capabilities, the test's state and log
// directories, and the network-wide policy (allow apiName).
func criDoormanEntry(e *cniEnv) map[string]any {
	return map[string]any{
		"type":         "doorman",
		"capabilities": criCapabilities,
		"mode":         "allowlist",
		"allowedHosts": []string{apiName},
		"stateDir":     e.stateDir,
		"logDir":       e.logDir,
	}
}

// installByHand is the criInstaller most tests use: it appends
// criDoormanEntry to the conflist the runtime loads from confDir.
// realInstaller runs `doorman install-cni` instead.
func installByHand(c *criEnv, confDir string) {
	tb := c.tb
	tb.Helper()
	path := firstCNIConfig(tb, confDir)
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, path, appendCNIPlugin(tb, data, criDoormanEntry(c.e)))
}

// firstCNIConfig is the configuration file containerd loads from dir: the
// lexicographically first .conf, .conflist or .json file (the tests write
// only valid ones).
func firstCNIConfig(tb testing.TB, dir string) string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, d := range ents { // sorted by name
		switch filepath.Ext(d.Name()) {
		case ".conf", ".conflist", ".json":
			return filepath.Join(dir, d.Name())
		}
	}
	tb.Fatalf("no CNI configuration in %s", dir)
	return ""
}

// appendCNIPlugin appends entry to the plugins of the conflist data.
func appendCNIPlugin(tb testing.TB, data []byte, entry map[string]any) []byte {
	tb.Helper()
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		tb.Fatalf("conflist: %v", err)
	}
	plugins, _ := list["plugins"].([]any)
	list["plugins"] = append(plugins, entry)
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// criPodSpec is what a pod's sandbox config says; the zero value is a pod
// in namespace "default" with the test's resolvers and no annotations.
type criPodSpec struct {
	name        string // default: dm-pod-<n>-<suffix>
	namespace   string // default: "default"
	annotations map[string]string
	dns         *criDNS // default: the fake internet's resolvers
	ports       []criPortMapping
	handler     string // the runtime handler; default criDefaultHandler
}

// criPortMapping is one of a pod's port_mappings (hostPort), TCP.
type criPortMapping struct {
	ContainerPort int32 `json:"container_port"`
	HostPort      int32 `json:"host_port"`
}

// criDNS is a pod's dns_config.
type criDNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// criPod is a pod sandbox crictl started.
type criPod struct {
	id                   string // the pod sandbox id containerd chose
	name, namespace, uid string
	cgroupParent         string
	config               string // its sandbox config file, for crictl create
	key                  string // doorman's sandbox key: <id>-eth0
}

// sandboxID is the pod's doorman sandbox id: <namespace>/<name>, in the
// decision log, the CLI and its proxy's --sandbox.
func (p *criPod) sandboxID() string { return p.namespace + "/" + p.name }

// podConfig writes the sandbox config of spec as crictl reads it (the CRI's
// PodSandboxConfig in JSON) and returns the pod it describes.
func (c *criEnv) podConfig(spec criPodSpec) *criPod {
	tb := c.tb
	tb.Helper()
	n := c.nextPod.Add(1)
	// A uid shaped like the kubelet's (a UUID), unique to the test.
	uid := fmt.Sprintf("%.8s-0000-4000-8000-%012d", c.suffix+"00000000", n)
	p := &criPod{name: spec.name, namespace: spec.namespace, uid: uid}
	if p.name == "" {
		p.name = fmt.Sprintf("dm-pod-%d-%s", n, c.suffix)
	}
	if p.namespace == "" {
		p.namespace = "default"
	}
	// As the kubelet's cgroupfs driver: a cgroup per pod below the
	// node's pods' root.
	p.cgroupParent = c.cgroupRoot + "/pod" + p.uid
	dns := spec.dns
	if dns == nil {
		dns = &criDNS{Servers: []string{c.e.net.DNS.String(), c.e.net.DNS6.String()}}
	}
	logDir := filepath.Join(c.dir, "pods", p.uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	config := map[string]any{
		"metadata":      map[string]any{"name": p.name, "namespace": p.namespace, "uid": p.uid, "attempt": 0},
		"hostname":      p.name,
		"log_directory": logDir,
		"dns_config":    dns,
		"labels":        map[string]string{"dm-test": c.suffix},
		"linux":         map[string]any{"cgroup_parent": p.cgroupParent},
	}
	if spec.annotations != nil {
		config["annotations"] = spec.annotations
	}
	if spec.ports != nil {
		config["port_mappings"] = spec.ports
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	p.config = filepath.Join(logDir, "pod.json")
	writeFile(tb, p.config, data)
	return p
}

// runPod starts a pod sandbox (`crictl runp`) and returns it and what
// crictl did; the pod is nil if runp failed.
func (c *criEnv) runPod(spec criPodSpec) (*criPod, sessionResult) {
	c.tb.Helper()
	p := c.podConfig(spec)
	args := []string{"runp"}
	if spec.handler != "" && spec.handler != criDefaultHandler {
		args = append(args, "--runtime", spec.handler)
	}
	r := c.crictl(append(args, p.config)...)
	if r.exit != 0 {
		return nil, r
	}
	p.id = strings.TrimSpace(r.stdout)
	p.key = p.id + "-eth0"
	return p, r
}

// mustRunPod is runPod that fails the test unless the pod starts.
func (c *criEnv) mustRunPod(spec criPodSpec) *criPod {
	c.tb.Helper()
	p, r := c.runPod(spec)
	if p == nil {
		c.tb.Fatalf("%v\ncontainerd's log:\n%s", r, c.containerdLogTail())
	}
	return p
}

// startProbe creates and starts, in pod p, a container running the probe
// image's `probe sleep`, and returns its id: crictl exec runs the probe in
// it (see probe).
func (c *criEnv) startProbe(p *criPod) string {
	tb := c.tb
	tb.Helper()
	config, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": "probe"},
		"image":    map[string]any{"image": criProbeImage},
		"command":  []string{"/probe", "sleep", "1h"},
		"log_path": "probe.log",
		"linux":    map[string]any{},
	})
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(p.config), "probe.json")
	writeFile(tb, path, config)
	id := c.mustCrictl("create", p.id, path, p.config)
	c.mustCrictl("start", id)
	return id
}

// criProbeScript runs the probe with the script's arguments and prints,
// after the probe's stdout, a marker line with its exit status and then
// its stderr. `crictl exec -s` prints the command's stdout and then its
// stderr, both to its own stdout, and exits 0 whatever the command's
// status: the marker separates the three.
const criProbeScript = `exec 3>&1
err=$(/probe "$@" 2>&1 1>&3 3>&-)
s=$?
printf '\n@@probe-exit %d@@\n%s' "$s" "$err"`

// probe runs the probe with args in container ctr (`crictl exec -s`) and
// returns its stdout, stderr and exit status as a sessionResult; exit is
// -1 (and stderr crictl's) if the probe did not run.
func (c *criEnv) probe(ctr string, args ...string) sessionResult {
	c.tb.Helper()
	r := c.crictl(slices.Concat([]string{"exec", "-s", ctr, "sh", "-c", criProbeScript, "probe"}, args)...)
	out := sessionResult{tool: "probe", args: args, exit: -1, stderr: fmt.Sprintf("crictl exec: exit %d: %s%s", r.exit, r.stdout, r.stderr)}
	const marker = "\n@@probe-exit "
	i := strings.LastIndex(r.stdout, marker)
	if r.exit != 0 || i < 0 {
		return out
	}
	rest := r.stdout[i+len(marker):]
	status, stderr, ok := strings.Cut(rest, "@@\n")
	code, err := strconv.Atoi(status)
	if !ok || err != nil {
		return out
	}
	out.exit, out.stdout, out.stderr = code, r.stdout[:i], strings.TrimRight(stderr, "\n")
	return out
}

// stopPod and removePod run `crictl stopp` and `crictl rmp`.
func (c *criEnv) stopPod(p *criPod) sessionResult   { c.tb.Helper(); return c.crictl("stopp", p.id) }
func (c *criEnv) removePod(p *criPod) sessionResult { c.tb.Helper(); return c.crictl("rmp", p.id) }

// criPodStatus is the part of `crictl inspectp -o json` the tests read.
type criPodStatus struct {
	Status struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Network struct {
			IP string `json:"ip"`
		} `json:"network"`
	} `json:"status"`
	Info struct {
		PID int `json:"pid"`
	} `json:"info"`
}

// inspectPod is `crictl inspectp` of p.
func (c *criEnv) inspectPod(p *criPod) criPodStatus {
	c.tb.Helper()
	out := c.mustCrictl("inspectp", "-o", "json", p.id)
	var s criPodStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		c.tb.Fatalf("crictl inspectp: %v\n%s", err, out)
	}
	return s
}

// netnsPath is a path of p's network namespace that any mount namespace
// can open: that of its pause process.
func (c *criEnv) netnsPath(p *criPod) string {
	c.tb.Helper()
	pid := c.inspectPod(p).Info.PID
	if pid <= 0 {
		c.tb.Fatalf("pod %s has no pause process", p.id)
	}
	return fmt.Sprintf("/proc/%d/ns/net", pid)
}

// crictl runs crictl with args inside the host session, against the
// test's containerd.
func (c *criEnv) crictl(args ...string) sessionResult {
	c.tb.Helper()
	globals := []string{
		"--config", filepath.Join(c.dir, "crictl.yaml"),
		"--runtime-endpoint", "unix://" + c.address,
		"--image-endpoint", "unix://" + c.address,
		"--timeout", "60s",
	}
	return runInSession(c.tb, c.sessionPID, c.env, "crictl", globals, args)
}

// mustCrictl is crictl that fails the test unless the command succeeds,
// and returns its trimmed stdout.
func (c *criEnv) mustCrictl(args ...string) string {
	c.tb.Helper()
	r := c.crictl(args...)
	if r.exit != 0 {
		c.tb.Fatalf("%v\ncontainerd's log:\n%s", r, c.containerdLogTail())
	}
	return strings.TrimSpace(r.stdout)
}

// importImage imports the image archive into the CRI's containerd
// namespace, unpacked for its snapshotter.
func (c *criEnv) importImage(archive string) {
	tb := c.tb
	tb.Helper()
	r := runInSession(tb, c.sessionPID, c.env, "ctr", []string{"--address", c.address, "--namespace", "k8s.io"},
		[]string{"images", "import", "--snapshotter", "native", archive})
	if r.exit != 0 {
		tb.Fatalf("%v\ncontainerd's log:\n%s", r, c.containerdLogTail())
	}
}

// startContainerd starts the test's containerd in the host session and
// waits until its CRI plugin reports the runtime and the network ready
// (the CNI configuration loaded).
func (c *criEnv) startContainerd() {
	tb := c.tb
	tb.Helper()
	logFile, err := os.Create(filepath.Join(c.dir, "containerd.log"))
	if err != nil {
		tb.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command("nsenter", "--target", strconv.Itoa(c.sessionPID), "--mount", "--net", "--",
		"containerd", "--config", filepath.Join(c.dir, "containerd.toml"))
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start containerd: %v", err)
	}
	c.containerd = cmd
	c.exited = make(chan error, 1)
	go func() { c.exited <- cmd.Wait() }()
	tb.Cleanup(c.stopContainerd)

	deadline := time.Now().Add(30 * time.Second)
	for {
		r := c.crictl("info")
		if r.exit == 0 && criReady(r.stdout) {
			return
		}
		select {
		case err := <-c.exited:
			c.exited <- err
			tb.Fatalf("containerd exited (%v); its log:\n%s", err, c.containerdLog())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("containerd's CRI not ready after 30s (%v); its log:\n%s", r, c.containerdLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// criVersion is the version of the CRI runtime, containerd's.
type criVersion struct {
	raw          string
	major, minor int
}

func (v criVersion) String() string { return v.raw }

// atLeast reports whether v is major.minor or later.
func (v criVersion) atLeast(major, minor int) bool {
	return v.major > major || v.major == major && v.minor >= minor
}

// containerdVersion is the RuntimeVersion `crictl version` reports
// ("1.6.20~ds1" for Debian 12's).
func (c *criEnv) containerdVersion() criVersion {
	c.tb.Helper()
	out := c.mustCrictl("version")
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "RuntimeVersion" {
			v = strings.TrimSpace(v)
			var major, minor int
			if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &major, &minor); err != nil {
				c.tb.Fatalf("crictl version: RuntimeVersion %q: %v", v, err)
			}
			return criVersion{raw: v, major: major, minor: minor}
		}
	}
	c.tb.Fatalf("crictl version reports no RuntimeVersion:\n%s", out)
	return criVersion{}
}

// criReady reports whether `crictl info` output says the runtime and the
// network are ready.
func criReady(info string) bool {
	var v struct {
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status bool   `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if json.Unmarshal([]byte(info), &v) != nil {
		return false
	}
	ready := map[string]bool{}
	for _, cond := range v.Status.Conditions {
		ready[cond.Type] = cond.Status
	}
	return ready["RuntimeReady"] && ready["NetworkReady"]
}

func (c *criEnv) containerdLog() string {
	data, _ := os.ReadFile(filepath.Join(c.dir, "containerd.log"))
	return string(data)
}

// containerdLogTail is the end of containerd's log, for a failure message.
func (c *criEnv) containerdLogTail() string {
	log := c.containerdLog()
	const max = 6000
	if len(log) > max {
		log = "…" + log[len(log)-max:]
	}
	return log
}

// cniSetupTime is how long the CNI setup of pod sandbox id took inside
// containerd, from its debug log (withCRIDebugLog): from its "begin cni
// setup" line to its "cni result" line, the two containerd 1.6 logs
// around the chain's ADD. False if the log has not both.
func (c *criEnv) cniSetupTime(id string) (time.Duration, bool) {
	var begin, end time.Time
	for _, line := range strings.Split(c.containerdLog(), "\n") {
		if !strings.Contains(line, "podsandboxid="+id) {
			continue
		}
		var at *time.Time
		switch {
		case strings.Contains(line, `msg="begin cni setup"`):
			at = &begin
		case strings.Contains(line, `msg="cni result: `):
			at = &end
		default:
			continue
		}
		stamp, ok := strings.CutPrefix(line, `time="`)
		if i := strings.IndexByte(stamp, '"'); ok && i > 0 {
			*at, _ = time.Parse(time.RFC3339Nano, stamp[:i])
		}
	}
	if begin.IsZero() || end.IsZero() {
		return 0, false
	}
	return end.Sub(begin), true
}

// stopContainerd stops containerd, kills any shim of it that outlives its
// pods (a shim normally exits with its last container, and containerd
// never kills one on its way out), and checks that none of its mounts is
// left in the host session.
func (c *criEnv) stopContainerd() {
	tb := c.tb
	unix.Kill(-c.containerd.Process.Pid, unix.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		tb.Errorf("cleanup: containerd did not stop within 15s; killing it")
		unix.Kill(-c.containerd.Process.Pid, unix.SIGKILL)
		<-c.exited
	}
	for _, pid := range processesWithArg(c.address) {
		tb.Errorf("cleanup: a containerd shim (pid %d) was left; killing it", pid)
		unix.Kill(pid, unix.SIGKILL)
	}
	for _, n := range c.networks {
		if n.runsc != "" {
			// runsc bind-mounts an empty network namespace of its own
			// under its root and leaves it when the pods go.
			runInSession(tb, c.sessionPID, c.env, "umount", nil, []string{"-l", filepath.Join(c.dir, "runsc", "null-netns")})
		}
	}
	if left := c.sessionMounts(); len(left) > 0 {
		tb.Errorf("cleanup: containerd left mounts in the host session: %v", left)
	}
}

// sessionMounts lists the mount points under the test's dir in the host
// session's mount namespace (pods' netns bind mounts, containers'
// rootfs).
func (c *criEnv) sessionMounts() []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", c.sessionPID))
	if err != nil {
		c.tb.Errorf("the host session's mounts: %v", err)
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == c.dir || strings.HasPrefix(f[4], c.dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// removeAllPods stops and removes every pod, so that the CNI DELs run
// while containerd is still there.
func (c *criEnv) removeAllPods() {
	tb := c.tb
	for _, id := range strings.Fields(c.crictl("pods", "--quiet").stdout) {
		if r := c.crictl("stopp", id); r.exit != 0 {
			tb.Errorf("cleanup: %v", r)
		}
		if r := c.crictl("rmp", "--force", id); r.exit != 0 {
			tb.Errorf("cleanup: %v", r)
		}
	}
	if left := c.crictl("pods", "--quiet"); left.exit != 0 || strings.TrimSpace(left.stdout) != "" {
		tb.Errorf("cleanup: pods left: %v", left)
	}
}

// criLogPlugin is the CNI plugin (this test binary, under that name in the
// plugin directory) that records each call it gets, one JSON line
// (criCNICall) per call in the file its entry's "logFile" names, and
// passes prevResult on.
const criLogPlugin = "dm-cnilog"

// cniLogEntry is a dm-cnilog entry of network at position where: it
// declares doorman's capabilities, so it gets the runtimeConfig doorman
// gets.
func (c *criEnv) cniLogEntry(network, where string) map[string]any {
	return map[string]any{
		"type":         criLogPlugin,
		"capabilities": criCapabilities,
		"logFile":      c.cniLogPath(network, where),
	}
}

func (c *criEnv) cniLogPath(network, where string) string {
	return filepath.Join(c.dir, "cnilog-"+network+"-"+where+".jsonl")
}

// criCNICall is one call of the dm-cnilog plugin: its CNI_* environment
// and its stdin (the entry's configuration as the runtime sent it).
type criCNICall struct {
	Command     string          `json:"command"`
	ContainerID string          `json:"containerID"`
	Netns       string          `json:"netns"`
	IfName      string          `json:"ifName"`
	Args        string          `json:"args"`
	Path        string          `json:"path"`
	Stdin       json.RawMessage `json:"stdin"`
}

// cniCalls reads the calls the dm-cnilog entry of network at where got.
func (c *criEnv) cniCalls(network, where string) []criCNICall {
	c.tb.Helper()
	data, err := os.ReadFile(c.cniLogPath(network, where))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		c.tb.Fatal(err)
	}
	var calls []criCNICall
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var call criCNICall
		if err := json.Unmarshal(sc.Bytes(), &call); err != nil {
			c.tb.Fatalf("%s: %v", c.cniLogPath(network, where), err)
		}
		calls = append(calls, call)
	}
	return calls
}

func init() {
	if filepath.Base(os.Args[0]) == criLogPlugin {
		os.Exit(runCNILog(os.Stdin, os.Stdout))
	}
}

// runCNILog is the dm-cnilog plugin's main: it appends the call to the
// entry's logFile and answers as a pass-through plugin would. Any error
// fails the call with a CNI error, so a test sees it.
func runCNILog(stdin io.Reader, stdout io.Writer) int {
	fail := func(err error) int {
		json.NewEncoder(stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": 999, "msg": "dm-cnilog: " + err.Error()})
		return 1
	}
	command := os.Getenv("CNI_COMMAND")
	if command == "VERSION" {
		fmt.Fprintln(stdout, `{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`)
		return 0
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		return fail(err)
	}
	var conf struct {
		CNIVersion string          `json:"cniVersion"`
		LogFile    string          `json:"logFile"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		return fail(fmt.Errorf("parse the configuration: %w", err))
	}
	if conf.LogFile == "" {
		return fail(errors.New(`the configuration names no "logFile"`))
	}
	line, err := json.Marshal(criCNICall{
		Command: command, ContainerID: os.Getenv("CNI_CONTAINERID"), Netns: os.Getenv("CNI_NETNS"),
		IfName: os.Getenv("CNI_IFNAME"), Args: os.Getenv("CNI_ARGS"), Path: os.Getenv("CNI_PATH"), Stdin: data,
	})
	if err != nil {
		return fail(err)
	}
	f, err := os.OpenFile(conf.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fail(err)
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	if command == "ADD" {
		if len(conf.PrevResult) == 0 {
			return fail(errors.New("ADD without prevResult: dm-cnilog only passes a result on"))
		}
		stdout.Write(conf.PrevResult)
	}
	return 0
}
