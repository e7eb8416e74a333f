package k8scluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/doorman-net/doorman/integration/hostsession"
	"github.com/doorman-net/doorman/integration/ociimage"
)

// debianPortmap is Debian's portmap plugin (containernetworking-plugins),
// which the CRI tests chain too.
const debianPortmap = "/usr/lib/cni/portmap"

// referencePlugins are the reference CNI plugins the node's /opt/cni/bin
// gets, built from the containernetworking/plugins version in go.mod.
var referencePlugins = []string{
	"github.com/containernetworking/plugins/plugins/main/bridge",
	"github.com/containernetworking/plugins/plugins/ipam/host-local",
	"github.com/containernetworking/plugins/plugins/main/loopback",
}

// nodeOverlays are the directories of the machine the node's components
// write into at fixed paths (the kubelet's /var/lib/kubelet,
// /var/log/pods, /var/log/containers and /usr/libexec/kubernetes;
// libcni's /var/lib/cni; containerd's shims under /run; the DaemonSets'
// hostPath volumes such as /opt/cni/bin, /run/doorman and
// /var/log/doorman): in the node's mount namespace each is an overlay
// whose upper layer is in the cluster's directory, so the node sees the
// machine's files and its writes stay its own.
var nodeOverlays = []string{"/var/lib", "/var/log", "/usr/libexec", "/opt", "/run"}

// kernelTunables are the sysctls the kubelet sets unless they hold its
// values (pkg/kubelet/cm.setupKernelTunables). Those that differ here get
// a file with the kubelet's value bound over them in the node's mount
// namespace, so the machine's stay as they are.
var kernelTunables = map[string]int{
	"vm/overcommit_memory":      1,
	"vm/panic_on_oom":           0,
	"kernel/panic":              10,
	"kernel/panic_on_oops":      1,
	"kernel/keys/root_maxkeys":  1000000,
	"kernel/keys/root_maxbytes": 25000000,
}

// writePKI makes the CA, the serving and client certificates of every
// component, and the service-account keys.
func (c *Cluster) writePKI() error {
	p, err := newPKI(filepath.Join(c.dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	loopback := netip.MustParseAddr("127.0.0.1")
	specs := []certSpec{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain, "localhost"},
			ips: []netip.Addr{loopback, c.nodeIP, netip.MustParseAddr(APIServiceIP)}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{name: "admin", cn: "kubernetes-admin", orgs: []string{"system:masters"}},
		{name: "controller-manager", cn: "system:kube-controller-manager"},
		{name: "scheduler", cn: "system:kube-scheduler"},
		{name: "kube-proxy", cn: "system:kube-proxy"},
		{name: "kubelet", cn: "system:node:" + c.nodeName, orgs: []string{"system:nodes"}},
	}
	for _, s := range specs {
		if err := p.issue(s); err != nil {
			return err
		}
	}
	return p.serviceAccountKeys()
}

// kubeconfig writes <name>.kubeconfig: the user <name>'s certificate
// against server.
func (c *Cluster) kubeconfig(name, server string) error {
	cfg := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{"name": "doorman-test", "cluster": map[string]any{
			"server": server, "certificate-authority": c.pki.path("ca.crt"),
		}}},
		"users": []any{map[string]any{"name": name, "user": map[string]any{
			"client-certificate": c.pki.cert(name), "client-key": c.pki.key(name),
		}}},
		"contexts":        []any{map[string]any{"name": name, "context": map[string]any{"cluster": "doorman-test", "user": name}}},
		"current-context": name,
	}
	return writeJSON(filepath.Join(c.dir, name+".kubeconfig"), cfg)
}

func (c *Cluster) localServer() string {
	return "https://127.0.0.1:" + strconv.Itoa(APIServerPort)
}

func (c *Cluster) nodeServer() string {
	return "https://" + netip.AddrPortFrom(c.nodeIP, APIServerPort).String()
}

func (c *Cluster) containerdAddress() string { return filepath.Join(c.dir, "containerd.sock") }

// writeConfig writes the kubeconfigs, the kubelet's, kube-proxy's,
// containerd's and crictl's configuration, the node's resolv.conf and its
// primary CNI configuration (in net.d, bound over /etc/cni/net.d), and
// builds the CNI plugins.
func (c *Cluster) writeConfig() error {
	for name, server := range map[string]string{
		"admin": c.localServer(), "controller-manager": c.localServer(), "scheduler": c.localServer(),
		"kubelet": c.nodeServer(), "kube-proxy": c.nodeServer(),
	} {
		if err := c.kubeconfig(name, server); err != nil {
			return err
		}
	}
	// The node's resolver, and the pods' with dnsPolicy Default: the
	// fake internet's. Pods with ClusterFirst get it as clusterDNS (there
	// is no cluster DNS service).
	resolv := fmt.Sprintf("nameserver %s\n", c.net.DNS)
	if err := os.WriteFile(filepath.Join(c.dir, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return err
	}
	kubelet := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               c.cgroupRoot,
		"failCgroupV1":             false, // this VM is cgroup v1 (hybrid)
		"failSwapOn":               false,
		"containerRuntimeEndpoint": "unix://" + c.containerdAddress(),
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": c.pki.path("ca.crt")},
		},
		"authorization":               map[string]any{"mode": "Webhook"},
		"clusterDNS":                  []string{c.net.DNS.String()},
		"clusterDomain":               ClusterDomain,
		"resolvConf":                  filepath.Join(c.dir, "resolv.conf"),
		"readOnlyPort":                0,
		"healthzBindAddress":          "127.0.0.1",
		"healthzPort":                 10248,
		"volumePluginDir":             filepath.Join(c.dir, "volume-plugins"),
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		// The machine is shared: evict nothing for its disk or memory.
		"evictionHard":        map[string]string{"memory.available": "1Mi", "nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
		"rotateCertificates":  false,
		"serializeImagePulls": false,
		"syncFrequency":       "10s",
		"fileCheckFrequency":  "10s",
	}
	if err := writeJSON(filepath.Join(c.dir, "kubelet.json"), kubelet); err != nil {
		return err
	}
	// 0 leaves the machine's conntrack limits and timeouts (global or
	// per-namespace) as they are.
	proxy := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": filepath.Join(c.dir, "kube-proxy.kubeconfig")},
		"mode":               "iptables",
		"hostnameOverride":   c.nodeName,
		"clusterCIDR":        PodCIDR,
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		"conntrack": map[string]any{
			"maxPerCore": 0, "min": 0,
			"tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
		},
	}
	if err := writeJSON(filepath.Join(c.dir, "kube-proxy.json"), proxy); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "containerd.toml"), []byte(c.containerdConfig()), 0o644); err != nil {
		return err
	}
	crictl := fmt.Sprintf("runtime-endpoint: unix://%[1]s\nimage-endpoint: unix://%[1]s\ntimeout: 60\npull-image-on-create: false\n", c.containerdAddress())
	if err := os.WriteFile(filepath.Join(c.dir, "crictl.yaml"), []byte(crictl), 0o644); err != nil {
		return err
	}
	primary := map[string]any{
		"cniVersion": "1.0.0", // the newest Debian's portmap speaks
		"name":       PrimaryNetwork,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": []any{[]any{map[string]any{"subnet": PodCIDR, "gateway": PodGateway}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	if err := writeJSON(filepath.Join(c.dir, "net.d", PrimaryConflist), primary); err != nil {
		return err
	}
	return c.buildPlugins()
}

// containerdConfig is containerd's configuration: everything under the
// cluster's directory, the CRI's CNI in the node's /etc/cni/net.d and
// /opt/cni/bin (where a CNI's DaemonSet and doorman's installer write),
// the pinned local sandbox image, restrict_oom_score_adj (this VM lacks
// CAP_SYS_RESOURCE, so runc cannot give the pause container the CRI's
// oom_score_adj), the native snapshotter, cgroupfs, no AppArmor profile
// loaded into the machine's kernel, and no NRI socket.
func (c *Cluster) containerdConfig() string {
	ctrd := filepath.Join(c.dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q

  [plugins."io.containerd.nri.v1.nri"]
    disable = true

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    enable_selinux = false
    stream_server_address = "127.0.0.1"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/opt/cni/bin"
      conf_dir = "/etc/cni/net.d"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %q
`, filepath.Join(ctrd, "root"), filepath.Join(ctrd, "state"), c.containerdAddress(), c.containerdAddress()+".ttrpc",
		filepath.Join(ctrd, "opt"), PauseImage, filepath.Join(c.dir, "runc"))
}

// buildPlugins builds the reference plugins into plugins/ and copies
// Debian's portmap there; the session copies them into /opt/cni/bin.
func (c *Cluster) buildPlugins() error {
	dir := filepath.Join(c.dir, "plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	build := exec.Command("go", append([]string{"build", "-o", dir + "/"}, referencePlugins...)...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the reference CNI plugins: %w\n%s", err, out)
	}
	data, err := os.ReadFile(debianPortmap)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "portmap"), data, 0o755)
}

// buildPause builds the sandbox image's archive under dir.
func buildPause(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return ociimage.Pause(dir, PauseImage)
}

// sessionSetup is the shell script the host session runs before anything
// starts in it: the overlays of nodeOverlays, the node's own
// /etc/cni/net.d and /etc/resolv.conf, the kubelet's kernel tunables, and
// the CNI plugins in /opt/cni/bin.
func (c *Cluster) sessionSetup() (string, error) {
	q := hostsession.ShellQuote
	var b strings.Builder
	overlay := func(target string) {
		name := strings.ReplaceAll(strings.Trim(target, "/"), "/", "-")
		upper, work := filepath.Join(c.dir, "ovl", name, "upper"), filepath.Join(c.dir, "ovl", name, "work")
		fmt.Fprintf(&b, "mkdir -p %s %s\nmount -t overlay overlay -o %s %s\n", q(upper), q(work),
			q("lowerdir="+target+",upperdir="+upper+",workdir="+work), q(target))
	}
	for _, d := range nodeOverlays {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("the node's overlay of %s: the machine has no such directory (%v)", d, err)
		}
		overlay(d)
	}
	// The kubelet's root dir on the cluster directory's own filesystem:
	// cAdvisor finds no device for an overlay, and the kubelet then
	// reports no capacity for the node's ephemeral storage.
	fmt.Fprintf(&b, "mkdir -p /var/lib/kubelet\nmount --bind %s /var/lib/kubelet\n", q(filepath.Join(c.dir, "kubelet")))
	// The node's CNI configuration directory: the cluster's net.d, and
	// none of the machine's files (Podman's would be loaded otherwise).
	if _, err := os.Stat("/etc/cni/net.d"); errors.Is(err, os.ErrNotExist) {
		overlay("/etc")
		b.WriteString("mkdir -p /etc/cni/net.d\n")
	}
	fmt.Fprintf(&b, "mount --bind %s /etc/cni/net.d\n", q(filepath.Join(c.dir, "net.d")))
	fmt.Fprintf(&b, "mount --bind %s /etc/resolv.conf\n", q(filepath.Join(c.dir, "resolv.conf")))
	for key, want := range kernelTunables {
		path := filepath.Join("/proc/sys", key)
		data, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("the kubelet's sysctl %s: %w", key, err)
		}
		if strings.TrimSpace(string(data)) == strconv.Itoa(want) {
			continue
		}
		file := filepath.Join(c.dir, "sysctl", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(file, []byte(strconv.Itoa(want)+"\n"), 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "mount --bind %s %s\n", q(file), q(path))
	}
	fmt.Fprintf(&b, "mkdir -p /opt/cni/bin\ncp %s/* /opt/cni/bin/\n", q(filepath.Join(c.dir, "plugins")))
	return b.String(), nil
}

// commandLine is comp's binary and arguments.
func (c *Cluster) commandLine(comp Component) (string, []string) {
	d := c.dir
	pk := c.pki
	bin := filepath.Join(c.binDir, string(comp))
	switch comp {
	case Etcd:
		return bin, []string{
			"--name=node", "--data-dir=" + filepath.Join(d, "etcd"),
			"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
			"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=node=http://127.0.0.1:2380",
			"--log-level=warn",
			// A test's cluster need not survive a crash of the machine.
			"--unsafe-no-fsync",
		}
	case APIServer:
		return bin, []string{
			"--etcd-servers=http://127.0.0.1:2379",
			"--bind-address=0.0.0.0", "--secure-port=" + strconv.Itoa(APIServerPort), "--advertise-address=" + c.nodeIP.String(),
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
			"--allow-privileged=true",
			"--client-ca-file=" + pk.path("ca.crt"),
			"--tls-cert-file=" + pk.cert("apiserver"), "--tls-private-key-file=" + pk.key("apiserver"),
			"--kubelet-client-certificate=" + pk.cert("apiserver-kubelet-client"), "--kubelet-client-key=" + pk.key("apiserver-kubelet-client"),
			"--kubelet-preferred-address-types=InternalIP",
			"--service-account-issuer=https://kubernetes.default.svc." + ClusterDomain,
			"--service-account-key-file=" + pk.path("sa.pub"), "--service-account-signing-key-file=" + pk.path("sa.key"),
			"--cert-dir=" + filepath.Join(d, "pki", "apiserver-generated"),
			// A stop (StopComponent) drains the requests in flight and
			// then closes the long-running ones within 2 s, rather than
			// waiting for them up to the request timeout (a minute).
			"--shutdown-send-retry-after=true",
			"--profiling=false", "--v=1",
		}
	case ControllerManager:
		kc := filepath.Join(d, "controller-manager.kubeconfig")
		return bin, []string{
			"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--leader-elect=false", "--bind-address=127.0.0.1",
			// Each controller as its own service account, with the
			// system:controller:* role it needs (kubeadm's setting).
			"--use-service-account-credentials=true",
			"--root-ca-file=" + pk.path("ca.crt"), "--service-account-private-key-file=" + pk.path("sa.key"),
			"--cert-dir=" + filepath.Join(d, "pki", "controller-manager-generated"),
			"--profiling=false", "--v=1",
		}
	case Scheduler:
		kc := filepath.Join(d, "scheduler.kubeconfig")
		return bin, []string{
			"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--leader-elect=false", "--bind-address=127.0.0.1",
			"--cert-dir=" + filepath.Join(d, "pki", "scheduler-generated"),
			"--profiling=false", "--v=1",
		}
	case KubeProxy:
		return bin, []string{"--config=" + filepath.Join(d, "kube-proxy.json"), "--v=1"}
	case Containerd:
		return filepath.Join(c.ctrdDir, "containerd"), []string{"--config", filepath.Join(d, "containerd.toml")}
	case Kubelet:
		return bin, []string{
			"--config=" + filepath.Join(d, "kubelet.json"),
			"--kubeconfig=" + filepath.Join(d, "kubelet.kubeconfig"),
			"--hostname-override=" + c.nodeName, "--node-ip=" + c.nodeIP.String(),
			"--v=2",
		}
	}
	panic("k8scluster: unknown component " + string(comp))
}

// crictlGlobals is crictl's flags for the node's containerd, then args.
func (c *Cluster) crictlGlobals(args ...string) []string {
	return append([]string{
		"--config", filepath.Join(c.dir, "crictl.yaml"),
		"--runtime-endpoint", "unix://" + c.containerdAddress(),
		"--image-endpoint", "unix://" + c.containerdAddress(),
		"--timeout", "60s",
	}, args...)
}

// criRuntimeReady reports whether `crictl info` output says the runtime
// and the network are ready.
func criRuntimeReady(info string) bool {
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

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
