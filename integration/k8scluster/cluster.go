package k8scluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/integration/hostsession"
	"github.com/doorman-net/doorman/integration/testnet"
)

// Version is the Kubernetes release the harness runs, the one
// .ci/build-cluster builds.
const Version = "v1.37.2"

// DefaultBinDir is where .ci/build-cluster puts the cluster's binaries;
// the environment variable DOORMAN_K8S_BIN overrides it.
const DefaultBinDir = "/opt/doorman-ci/k8s-" + Version + "/bin"

// DefaultContainerdDir is where .ci/run builds containerd 2 and its runc
// shim.
const DefaultContainerdDir = "/opt/containerd2/bin"

// The cluster's fixed settings.
const (
	// ServiceCIDR is the services' range (kubeadm's default, which
	// deploy/kubernetes/configmap.yaml names); APIServiceIP is the
	// kubernetes service's address in it, which kube-proxy sends to the
	// API server.
	ServiceCIDR  = "10.96.0.0/12"
	APIServiceIP = "10.96.0.1"
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain = "cluster.local"
	// PodCIDR is the node's pods' range, from the part of 198.51.100.0/24
	// testnet keeps free for its caller: the bridge cni0 holds PodGateway.
	PodCIDR    = "198.51.100.128/26"
	PodGateway = "198.51.100.129"
	// PauseImage is the sandbox image the harness builds and pins in the
	// node's containerd.
	PauseImage = "localhost/dm-pause:k8s"
	// PrimaryConflist is the node's primary CNI configuration, in
	// /etc/cni/net.d: the reference bridge and host-local plugins and
	// portmap, as a CNI's DaemonSet would write it. Its network is named
	// PrimaryNetwork.
	PrimaryConflist = "10-dmk8s.conflist"
	PrimaryNetwork  = "dmk8s"
	// APIServerPort is the API server's port on the node's address and
	// on 127.0.0.1.
	APIServerPort = 6443
)

// Component is one process of the cluster.
type Component string

// The cluster's components, in the order Start starts them.
const (
	Etcd              Component = "etcd"
	APIServer         Component = "kube-apiserver"
	ControllerManager Component = "kube-controller-manager"
	Scheduler         Component = "kube-scheduler"
	Containerd        Component = "containerd"
	Kubelet           Component = "kubelet"
	KubeProxy         Component = "kube-proxy"
)

// Components lists every component, in start order. kube-proxy comes
// after the kubelet, as a DaemonSet's would: it waits for its node's
// object, and exits when the node's addresses change (as they do when the
// kubelet registers it), for its DaemonSet to restart it.
var Components = []Component{Etcd, APIServer, ControllerManager, Scheduler, Containerd, Kubelet, KubeProxy}

// Options say where Start finds its binaries and what network it joins.
// The zero value is the default everywhere.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kube-proxy, kubelet and kubectl. Default:
	// $DOORMAN_K8S_BIN, else DefaultBinDir.
	BinDir string
	// ContainerdDir holds containerd and containerd-shim-runc-v2 (2.x).
	// Default: DefaultContainerdDir.
	ContainerdDir string
	// Net is the fake internet the node joins: the node plays its host
	// namespace. Nil: Start makes one with testnet.New.
	Net *testnet.Net
}

// Cluster is a running single-node cluster. Its methods may be called
// from the goroutine of any test using it, one test at a time.
type Cluster struct {
	tb          testing.TB // the cluster's lifetime: a test, or Shared's
	dir         string
	net         *testnet.Net
	sess        *hostsession.Session
	pki         *pki
	binDir      string
	ctrdDir     string
	nodeName    string
	nodeIP      netip.Addr
	cgroupRoot  string
	env         []string
	started     time.Time
	readyIn     time.Duration // from Start to node Ready
	kubectlPath string

	mu       sync.Mutex
	procs    map[Component]*proc
	nextHost int // the last byte of the next address AddHost gives
}

// proc is a component's running process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// Start builds and starts a cluster for tb: the PKI and configuration
// under a directory of its own, a host session in net's host namespace
// (see the package comment), then etcd, the API server, the controller
// manager, the scheduler, kube-proxy, containerd and the kubelet, each
// waited for, and then the node's Ready condition. It skips tb when the
// binaries are missing (.ci/run builds them). Everything is undone by
// tb.Cleanup, in reverse, also when tb fails.
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("k8scluster: needs root")
	}
	c := &Cluster{
		tb:       tb,
		binDir:   opts.BinDir,
		ctrdDir:  opts.ContainerdDir,
		procs:    map[Component]*proc{},
		started:  time.Now(),
		nextHost: 100,
	}
	if c.binDir == "" {
		c.binDir = os.Getenv("DOORMAN_K8S_BIN")
	}
	if c.binDir == "" {
		c.binDir = DefaultBinDir
	}
	if c.ctrdDir == "" {
		c.ctrdDir = DefaultContainerdDir
	}
	c.checkTools()

	c.net = opts.Net
	if c.net == nil {
		c.net = testnet.New(tb)
	}
	id := strings.TrimPrefix(c.net.HostNS().Name(), "dm-host-")
	c.nodeName = "dm-node-" + id
	c.nodeIP = c.net.HostAddr4
	c.cgroupRoot = "/dm-k8s-" + id
	c.kubectlPath = filepath.Join(c.binDir, "kubectl")
	c.env = append(hostsession.EnvWithoutProxy(), "PATH="+c.ctrdDir+":"+c.binDir+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")

	// A short path of its own (unix sockets live under it), removed last.
	dir, err := os.MkdirTemp("", "dm-k8s-")
	if err != nil {
		tb.Fatal(err)
	}
	c.dir = dir
	tb.Cleanup(func() {
		if keep := os.Getenv("DOORMAN_K8S_LOGS"); keep != "" {
			c.copyLogs(keep)
		}
		if err := os.RemoveAll(dir); err != nil {
			tb.Errorf("k8scluster: cleanup: %v", err)
		}
	})
	for _, sub := range []string{"logs", "pki", "etcd", "kubelet", "net.d", "volume-plugins", "containerd", "runc", "sysctl"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if err := c.writePKI(); err != nil {
		tb.Fatalf("k8scluster: %v", err)
	}
	if err := c.writeConfig(); err != nil {
		tb.Fatalf("k8scluster: %v", err)
	}
	c.makeCgroupRoot()

	setup, err := c.sessionSetup()
	if err != nil {
		tb.Fatalf("k8scluster: %v", err)
	}
	c.sess = hostsession.Start(tb, c.net.HostNS(), setup)
	tb.Cleanup(c.killLeftovers)
	tb.Cleanup(c.teardown)
	tb.Cleanup(func() {
		if tb.Failed() {
			c.DumpLogs(tb)
		}
	})

	pause, err := buildPause(filepath.Join(dir, "images"))
	if err != nil {
		tb.Fatalf("k8scluster: %v", err)
	}
	for _, comp := range Components {
		if comp == KubeProxy {
			c.WaitFor(tb, time.Minute, "node "+c.nodeName+" registered", func() (bool, string) {
				r := c.Kubectl(tb, "get", "node", c.nodeName, "-o", "jsonpath={.status.addresses}")
				return r.Exit == 0 && strings.Contains(r.Stdout, c.nodeIP.String()), r.Stdout + r.Stderr
			})
		}
		c.StartComponent(tb, comp)
		if comp == Containerd {
			c.ImportImage(tb, pause)
		}
	}
	c.WaitFor(tb, 2*time.Minute, "node "+c.nodeName+" Ready", func() (bool, string) {
		r := c.Kubectl(tb, "get", "node", c.nodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return r.Exit == 0 && r.Stdout == "True", r.Stdout + r.Stderr
	})
	c.readyIn = time.Since(c.started)
	tb.Logf("k8scluster: node %s Ready %v after start (dir %s)", c.nodeName, c.readyIn.Round(time.Millisecond), dir)
	return c
}

// checkTools skips tb unless every binary the cluster runs is there.
func (c *Cluster) checkTools() {
	tb := c.tb
	tb.Helper()
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet", "kubectl"} {
		if _, err := os.Stat(filepath.Join(c.binDir, b)); err != nil {
			tb.Skipf("k8scluster: the cluster's binaries are not built (.ci/build-cluster builds them into %s): %v", DefaultBinDir, err)
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(c.ctrdDir, b)); err != nil {
			tb.Skipf("k8scluster: containerd 2 is not built (.ci/run builds it into %s): %v", DefaultContainerdDir, err)
		}
	}
	for _, tool := range []string{"runc", "ctr", "crictl", "nsenter", "iptables", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("k8scluster: %s is not installed (see .ci/run): %v", tool, err)
		}
	}
	for _, p := range []string{debianPortmap} {
		if _, err := os.Stat(p); err != nil {
			tb.Skipf("k8scluster: %s: %v (apt-get install containernetworking-plugins)", p, err)
		}
	}
}

// Dir is the cluster's directory: its PKI (pki/), configuration, logs
// (logs/<component>.log) and the node's private directories (ovl/).
func (c *Cluster) Dir() string { return c.dir }

// Net is the fake internet the node is on.
func (c *Cluster) Net() *testnet.Net { return c.net }

// NodeName is the node's name.
func (c *Cluster) NodeName() string { return c.nodeName }

// NodeIP is the node's InternalIP, its address on the veth to the fake
// internet (testnet's host uplink).
func (c *Cluster) NodeIP() netip.Addr { return c.nodeIP }

// Kubeconfig is the path of the cluster admin's kubeconfig (user
// kubernetes-admin, group system:masters; server https://127.0.0.1:6443,
// which only the node's network namespace reaches).
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.dir, "admin.kubeconfig") }

// ReadyIn is how long Start took from its call to the node's Ready.
func (c *Cluster) ReadyIn() time.Duration { return c.readyIn }

// CgroupRoot is the kubelet's cgroupRoot: every pod's cgroup is below
// <root>/kubepods in each hierarchy.
func (c *Cluster) CgroupRoot() string { return c.cgroupRoot }

// LogPath is the log file of comp (its stdout and stderr, appended to
// across restarts).
func (c *Cluster) LogPath(comp Component) string {
	return filepath.Join(c.dir, "logs", string(comp)+".log")
}

// Running reports whether comp is running.
func (c *Cluster) Running(comp Component) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[comp]
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// StartComponent starts comp and waits until it serves (etcd and the API
// server healthy, containerd's CRI ready, the kubelet's healthz; the
// others listening). It fails tb if comp is running already, exits, or
// is not ready within a minute and a half.
func (c *Cluster) StartComponent(tb testing.TB, comp Component) {
	tb.Helper()
	if c.Running(comp) {
		tb.Fatalf("k8scluster: %s is running already", comp)
	}
	bin, args := c.commandLine(comp)
	logf, err := os.OpenFile(c.LogPath(comp), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Fprintf(logf, "=== k8scluster: %s starting at %s: %s %s\n", comp, time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := c.sess.Command(context.Background(), bin, args...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		tb.Fatalf("k8scluster: start %s: %v", comp, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(logf, "=== k8scluster: %s exited at %s: %v\n", comp, time.Now().Format(time.RFC3339Nano), p.err)
		logf.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs[comp] = p
	c.mu.Unlock()

	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, status := c.ready(comp)
		if ok {
			return
		}
		select {
		case <-p.done:
			tb.Fatalf("k8scluster: %s exited while starting (%v); its log:\n%s", comp, p.err, c.LogTail(comp, 40))
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("k8scluster: %s not ready after 90s (%s); its log:\n%s", comp, status, c.LogTail(comp, 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StopComponent stops comp gracefully (SIGTERM to its process group,
// SIGKILL after stopGrace) and waits for it to exit. Stopping containerd
// or the kubelet leaves the pods running, as on a node. A component that
// is not running is left alone.
func (c *Cluster) StopComponent(tb testing.TB, comp Component) {
	tb.Helper()
	if err := c.stop(comp); err != nil {
		tb.Errorf("k8scluster: %v", err)
	}
}

// KillComponent kills comp at once (SIGKILL to its process group), as a
// crash would, and waits for it to exit.
func (c *Cluster) KillComponent(tb testing.TB, comp Component) {
	tb.Helper()
	c.mu.Lock()
	p := c.procs[comp]
	c.mu.Unlock()
	if p == nil {
		return
	}
	unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
	<-p.done
}

// stopGrace is how long StopComponent waits after SIGTERM.
func stopGrace(comp Component) time.Duration { return 20 * time.Second }

// RestartComponent stops comp and starts it again.
func (c *Cluster) RestartComponent(tb testing.TB, comp Component) {
	tb.Helper()
	c.StopComponent(tb, comp)
	c.StartComponent(tb, comp)
}

func (c *Cluster) stop(comp Component) error {
	c.mu.Lock()
	p := c.procs[comp]
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	pgid := p.cmd.Process.Pid
	unix.Kill(-pgid, unix.SIGTERM)
	grace := stopGrace(comp)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		unix.Kill(-pgid, unix.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", comp, grace)
	}
}

// ready reports whether comp serves, and what the probe saw.
func (c *Cluster) ready(comp Component) (bool, string) {
	switch comp {
	case Etcd:
		return c.probeHTTP("http://127.0.0.1:2379/health", false, `"health":"true"`)
	case APIServer:
		return c.probeHTTP(fmt.Sprintf("https://127.0.0.1:%d/readyz", APIServerPort), true, "ok")
	case ControllerManager:
		return c.probeHTTP("https://127.0.0.1:10257/healthz", false, "ok")
	case Scheduler:
		return c.probeHTTP("https://127.0.0.1:10259/healthz", false, "ok")
	case KubeProxy:
		// Serving is enough: its healthz says 503 until the node's
		// rules are synced, which needs the node registered.
		return c.probeHTTP("http://127.0.0.1:10256/healthz", false, "")
	case Kubelet:
		return c.probeHTTP("http://127.0.0.1:10248/healthz", false, "ok")
	case Containerd:
		r, err := c.sess.Run(c.env, "", 30*time.Second, "crictl", c.crictlGlobals("info")...)
		if err != nil {
			return false, err.Error()
		}
		return r.Exit == 0 && criRuntimeReady(r.Stdout), r.Stderr
	}
	return false, "unknown component"
}

// probeHTTP GETs url from inside the node's namespace: ready when it
// answers 200 with a body containing want, or anything if want is empty.
// Over https the server is not
// verified unless admin, which presents the admin's certificate and
// trusts the cluster CA.
func (c *Cluster) probeHTTP(url string, admin bool, want string) (bool, string) {
	tlsConf := &tls.Config{InsecureSkipVerify: true}
	if admin {
		cert, err := tls.LoadX509KeyPair(c.pki.cert("admin"), c.pki.key("admin"))
		if err != nil {
			return false, err.Error()
		}
		pool := x509.NewCertPool()
		pool.AddCert(c.pki.caCert)
		tlsConf = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
	}
	tr := &http.Transport{DialContext: c.net.HostNS().Dial, TLSClientConfig: tlsConf, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if want != "" && (resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want)) {
		return false, fmt.Sprintf("%s: %s: %s", url, resp.Status, body)
	}
	return true, ""
}

// Dead lists the components that were started and have exited since, with
// how: for a failure message.
func (c *Cluster) Dead() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, comp := range Components {
		if p := c.procs[comp]; p != nil {
			select {
			case <-p.done:
				out = append(out, fmt.Sprintf("%s (%v)", comp, p.err))
			default:
			}
		}
	}
	return out
}

// WaitFor polls cond every 200 ms until it reports done, and fails tb
// after timeout with what, cond's last status and the components that
// have died.
func (c *Cluster) WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() (done bool, status string)) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, status := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("k8scluster: %s: not after %v; last: %s", what, timeout, strings.TrimSpace(status))
			if dead := c.Dead(); len(dead) > 0 {
				msg += "\ncomponents that exited: " + strings.Join(dead, ", ")
			}
			tb.Fatal(msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// teardown stops the cluster: the kubelet first (so that it restarts
// nothing), then every pod through the CRI (their CNI DELs run while
// containerd is there), containerd and any shim it left, and the control
// plane.
func (c *Cluster) teardown() {
	tb := c.tb
	c.stop(Kubelet)
	if !c.Running(Containerd) {
		c.mu.Lock()
		started := c.procs[Containerd] != nil
		c.mu.Unlock()
		if started {
			// A test stopped it: the pods' DELs need it once more.
			func() {
				defer func() { recover() }()
				c.StartComponent(tb, Containerd)
			}()
		}
	}
	if c.Running(Containerd) {
		c.removeAllPods()
	}
	for _, comp := range slices.Backward(Components) {
		if err := c.stop(comp); err != nil {
			tb.Errorf("k8scluster: cleanup: %v", err)
		}
	}
	for _, pid := range processesWithArg(c.containerdAddress()) {
		tb.Errorf("k8scluster: cleanup: a containerd shim (pid %d) was left; killing it", pid)
		unix.Kill(pid, unix.SIGKILL)
	}
}

// removeAllPods stops and removes every pod sandbox of the node's
// containerd.
func (c *Cluster) removeAllPods() {
	tb := c.tb
	r, err := c.sess.Run(c.env, "", time.Minute, "crictl", c.crictlGlobals("pods", "--quiet")...)
	if err != nil || r.Exit != 0 {
		tb.Errorf("k8scluster: cleanup: crictl pods: %v %v", err, r)
		return
	}
	for _, id := range strings.Fields(r.Stdout) {
		for _, verb := range [][]string{{"stopp", id}, {"rmp", "--force", id}} {
			if r, err := c.sess.Run(c.env, "", 2*time.Minute, "crictl", c.crictlGlobals(verb...)...); err != nil || r.Exit != 0 {
				tb.Errorf("k8scluster: cleanup: %v %v", err, r)
			}
		}
	}
}

// killLeftovers kills what still runs in the node's mount namespace once
// every component is stopped (a pod's process its runtime lost, a
// doorman proxy its DEL did not stop) and reports each as an error.
func (c *Cluster) killLeftovers() {
	for _, pid := range c.sess.Processes() {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		c.tb.Errorf("k8scluster: cleanup: process %d (%s) was left in the node; killing it", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
		unix.Kill(pid, unix.SIGKILL)
	}
}

// makeCgroupRoot makes the kubelet's cgroupRoot in every hierarchy (the
// kubelet requires it to exist), with the cpuset of its parent, and has
// tb's cleanup remove it with every pod's cgroup below it.
func (c *Cluster) makeCgroupRoot() {
	tb := c.tb
	tb.Cleanup(func() {
		if err := hostsession.RemoveCgroupParent(c.cgroupRoot); err != nil {
			tb.Errorf("k8scluster: cleanup: %v", err)
		}
	})
	dirs, err := hostsession.CgroupDirs(c.cgroupRoot)
	if err != nil {
		tb.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			tb.Fatalf("k8scluster: cgroup root: %v", err)
		}
		// A v1 cpuset cgroup starts with no CPUs and no memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					tb.Fatalf("k8scluster: cgroup root %s: %v", f, err)
				}
			}
		}
	}
}

// LogTail is the last n lines of comp's log.
func (c *Cluster) LogTail(comp Component, n int) string {
	data, err := os.ReadFile(c.LogPath(comp))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// DumpLogs logs to tb the tail of every component's log, the nodes and
// the pods of every namespace: what a failed test prints.
func (c *Cluster) DumpLogs(tb testing.TB) {
	tb.Helper()
	for _, comp := range Components {
		n := 25
		if comp == Kubelet || comp == Containerd {
			n = 60
		}
		tb.Logf("k8scluster: last lines of %s's log (%s):\n%s", comp, c.LogPath(comp), c.LogTail(comp, n))
	}
	if c.Running(APIServer) {
		r := c.Kubectl(tb, "get", "nodes,pods", "-A", "-o", "wide")
		tb.Logf("k8scluster: kubectl get nodes,pods -A:\n%s%s", r.Stdout, r.Stderr)
	}
	if dead := c.Dead(); len(dead) > 0 {
		tb.Logf("k8scluster: components that exited: %s", strings.Join(dead, ", "))
	}
}

// copyLogs copies the components' logs to dir/<node name>/.
func (c *Cluster) copyLogs(dir string) {
	dst := filepath.Join(dir, c.nodeName)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		c.tb.Errorf("k8scluster: DOORMAN_K8S_LOGS: %v", err)
		return
	}
	for _, comp := range Components {
		if data, err := os.ReadFile(c.LogPath(comp)); err == nil {
			os.WriteFile(filepath.Join(dst, string(comp)+".log"), data, 0o644)
		}
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
		if err == nil && strings.Contains("\x00"+string(cmdline), "\x00"+arg+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}
