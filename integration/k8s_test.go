package integration

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/hostsession"
	"github.com/doorman-net/doorman/integration/k8scluster"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// TestK8sPodAllowlist: on a real cluster with doorman deployed by its
// manifests, a pod whose doorman.io annotations allow one host of the
// fake internet reaches it, by name through the pod's resolver, and
// reaches no other: the other host's lookup is refused, and its name sent
// to its address (or to the allowed host's) gets a TLS alert; the denied
// host's servers see nothing. The node records the pod as enforced, and
// its decision log has the allowed and the denied connection.
func TestK8sPodAllowlist(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, k8sGrantLabels)
	allowed := c.AddHost(t, ns+".allowed.test")
	denied := c.AddHost(t, ns+".denied.test")

	startProbePod(t, c, ns, "probe", map[string]string{
		"doorman.io/mode":          "allowlist",
		"doorman.io/allowed-hosts": allowed.Name(),
	})
	s := assertK8sEnforced(t, c, ns, "probe")
	if uid := podUID(t, c, ns, "probe"); s.PodUID != uid {
		t.Errorf("state's pod uid %q, want the pod's %q", s.PodUID, uid)
	}

	if r := probeGet(t, c, ns, "probe", "https://"+allowed.Name()+"/k8s"); !servedBy(r, allowed.Name()) {
		t.Errorf("the allowed host: %v", r)
	}
	if n := allowed.RequestsFor(allowed.Name()); n != 1 {
		t.Errorf("the allowed host served %d requests, want 1", n)
	}

	if r := probeGet(t, c, ns, "probe", "https://"+denied.Name()+"/by-name"); r.Exit == 0 {
		t.Errorf("the denied host by name: %v", r)
	}
	if r := probeGet(t, c, ns, "probe", "https://"+denied.Name()+"/by-addr", "--resolve", denied.Name()+":"+denied.Addrs()[0].String()); r.Exit != 3 {
		t.Errorf("the denied host's name sent to its address: want a TLS alert (exit 3), got %v", r)
	}
	if r := probeGet(t, c, ns, "probe", "https://"+denied.Name()+"/spoofed", "--resolve", denied.Name()+":"+allowed.Addrs()[0].String()); r.Exit != 3 {
		t.Errorf("the denied host's name sent to the allowed host's address: want a TLS alert (exit 3), got %v", r)
	}
	if n := denied.Requests(); n != 0 {
		t.Errorf("the denied host served %d requests, want 0", n)
	}
	if n := allowed.Requests(); n != 1 {
		t.Errorf("the allowed host served %d requests in all, want 1 (the spoofed name must not reach it)", n)
	}

	log := filepath.Join(c.NodePath(k8sLogDir), s.Key+".log")
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("the pod's decision log on the node: %v", err)
	}
	var verdicts []string
	for _, line := range strings.Split(string(data), "\n") {
		if d, ok := decisionlog.Parse([]byte(line)); ok && d.Kind == decisionlog.KindConnection {
			verdicts = append(verdicts, d.Verdict+" "+d.Name)
		}
	}
	for _, want := range []string{"allow " + allowed.Name(), "deny " + denied.Name()} {
		if !slices.Contains(verdicts, want) {
			t.Errorf("the node's decision log %s has no %q: %v", log, want, verdicts)
		}
	}
}

// TestK8sKubeSystemUntouched: a pod in kube-system (the ConfigMap's
// excludeNamespaces) passes through doorman untouched: it reaches a host
// no policy allows, and the node records it as n/a (excluded namespace)
// with no proxy. The same host is out of reach of a pod without
// annotations in another namespace (the installer's default policy:
// nothing but DNS).
func TestK8sKubeSystemUntouched(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, nil)
	host := c.AddHost(t, ns+".anyone.test")

	sys := "dm-probe-" + randomSuffix(t)
	t.Cleanup(func() {
		if r := c.Kubectl(t, "delete", "pod", "-n", "kube-system", sys, "--wait=true", "--timeout=2m"); r.Exit != 0 {
			t.Errorf("cleanup: %v", r)
		}
	})
	startProbePod(t, c, "kube-system", sys, nil)
	startProbePod(t, c, ns, "default", nil)

	s := mustNodeState(t, c, "kube-system/"+sys)
	if s.Unenforced != "excluded namespace" || s.Label != "n/a (excluded namespace)" || s.PID != 0 {
		t.Errorf("state of kube-system/%s: unenforced %q label %q proxy pid %d; want excluded namespace, n/a (excluded namespace), none",
			sys, s.Unenforced, s.Label, s.PID)
	}
	if pids := proxiesFor("kube-system/" + sys); len(pids) != 0 {
		t.Errorf("proxies for kube-system/%s: %v, want none", sys, pids)
	}
	if r := probeGet(t, c, "kube-system", sys, "https://"+host.Name()+"/kube-system"); !servedBy(r, host.Name()) {
		t.Errorf("kube-system pod: %v", r)
	}
	if n := host.RequestsFor(host.Name()); n != 1 {
		t.Errorf("the host served %d requests, want the kube-system pod's 1", n)
	}

	assertK8sEnforced(t, c, ns, "default")
	if r := probeGet(t, c, ns, "default", "https://"+host.Name()+"/default", "--resolve", host.Name()+":"+host.Addrs()[0].String()); r.Exit != 3 {
		t.Errorf("a pod with the default policy: want a TLS alert (exit 3), got %v", r)
	}
	if n := host.Requests(); n != 1 {
		t.Errorf("the host served %d requests, want 1 (the kube-system pod's only)", n)
	}
}

// TestK8sPodDeleteLeavesNothing: `kubectl delete pod` of an enforced pod
// leaves nothing of doorman's on the node: no state, no proxy or
// supervisor, no host-side chain, no proxy cgroup, and `doorman ls` no
// longer lists it.
func TestK8sPodDeleteLeavesNothing(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, k8sGrantLabels)
	startProbePod(t, c, ns, "gone", map[string]string{"doorman.io/mode": "allowlist", "doorman.io/allowed-hosts": "example.test"})
	id := ns + "/gone"
	s := assertK8sEnforced(t, c, ns, "gone")
	if !hostLayerHolds(t, c.Net().HostPath(), s.Key) {
		t.Fatalf("the host-side layer has no chain for %s", s.Key)
	}
	cgroups := processCgroups(t, s.PID)
	proxyCgroup := cgroups["memory"]
	if !strings.Contains(proxyCgroup, "/pod"+s.PodUID) {
		t.Errorf("the proxy's memory cgroup %q is not below pod %s's", proxyCgroup, s.PodUID)
	}
	if ls := c.NodeRun(t, "/opt/cni/bin/doorman", "ls"); !strings.Contains(ls.Stdout, id) {
		t.Errorf("doorman ls on the node does not list %s: %v", id, ls)
	}

	c.MustKubectl(t, "delete", "pod", "-n", ns, "gone", "--wait=true", "--timeout=2m")

	c.WaitFor(t, 30*time.Second, "nothing of "+id+" on the node", func() (bool, string) {
		var left []string
		if _, err := nodeState(c, id); !isNoMatch(err) {
			left = append(left, fmt.Sprintf("state (%v)", err))
		}
		if pids := proxiesFor(id); len(pids) > 0 {
			left = append(left, fmt.Sprintf("proxies %v", pids))
		}
		if pids := supervisorsFor(id); len(pids) > 0 {
			left = append(left, fmt.Sprintf("supervisors %v", pids))
		}
		if hostLayerHolds(t, c.Net().HostPath(), s.Key) {
			left = append(left, "host-side chain sbx-"+s.Key)
		}
		dirs, _ := hostsession.CgroupDirs(proxyCgroup)
		for _, d := range dirs {
			if _, err := os.Stat(d); err == nil {
				left = append(left, "cgroup "+d)
			}
		}
		if ls := c.NodeRun(t, "/opt/cni/bin/doorman", "ls"); strings.Contains(ls.Stdout, id) {
			left = append(left, "doorman ls: "+ls.Stdout)
		}
		return len(left) == 0, strings.Join(left, "; ")
	})
}

// TestK8sInstallerRestartKeepsEntry: `kubectl rollout restart` of
// doorman's DaemonSet replaces the installer's pod, and doorman's entry
// stays in the node's conflist throughout (read every 20 ms from the
// restart to the end of the rollout); a pod created while the installer
// restarts is enforced and reaches only what its policy allows.
func TestK8sInstallerRestartKeepsEntry(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, k8sGrantLabels)
	allowed := c.AddHost(t, ns+".allowed.test")
	denied := c.AddHost(t, ns+".denied.test")
	before := c.MustKubectl(t, "get", "pods", "-n", "doorman-system", "-l", "app.kubernetes.io/name=doorman", "-o", "jsonpath={.items[*].metadata.uid}")

	conflist := c.NodePath("/etc/cni/net.d/" + k8scluster.PrimaryConflist)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads int
	var missing []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			types, err := chainOf(conflist)
			reads++
			if err != nil || !slices.Equal(types, []string{"bridge", "portmap", "doorman"}) {
				missing = append(missing, fmt.Sprintf("%s: %v %v", time.Now().Format(time.StampMilli), types, err))
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	c.MustKubectl(t, "-n", "doorman-system", "rollout", "restart", "daemonset/doorman")
	startProbePod(t, c, ns, "during", map[string]string{"doorman.io/mode": "allowlist", "doorman.io/allowed-hosts": allowed.Name()})
	c.MustKubectl(t, "-n", "doorman-system", "rollout", "status", "daemonset/doorman", "--timeout=3m")
	close(stop)
	wg.Wait()

	after := c.MustKubectl(t, "get", "pods", "-n", "doorman-system", "-l", "app.kubernetes.io/name=doorman", "-o", "jsonpath={.items[*].metadata.uid}")
	if after == before || after == "" {
		t.Errorf("the installer's pod is %q after the restart, was %q: not replaced", after, before)
	}
	if len(missing) > 0 {
		t.Errorf("doorman's entry was missing from the node's conflist in %d of %d reads during the restart: %v", len(missing), reads, missing)
	}
	t.Logf("the conflist was read %d times during the restart", reads)

	assertK8sEnforced(t, c, ns, "during")
	if r := probeGet(t, c, ns, "during", "https://"+allowed.Name()+"/during"); !servedBy(r, allowed.Name()) {
		t.Errorf("the allowed host: %v", r)
	}
	if r := probeGet(t, c, ns, "during", "https://"+denied.Name()+"/during", "--resolve", denied.Name()+":"+denied.Addrs()[0].String()); r.Exit != 3 {
		t.Errorf("the denied host: want a TLS alert (exit 3), got %v", r)
	}
	if n := denied.Requests(); n != 0 {
		t.Errorf("the denied host served %d requests, want 0", n)
	}
}

func randomSuffix(t testing.TB) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestK8sComponentsRestart: the harness stops and starts the cluster's
// components as the node-agent tests need (the API server stopped while
// pods run, the kubelet and containerd restarted): kubectl fails while the
// API server is down and works again after, and a running pod survives
// every restart (same container, no restart) and still reaches the fake
// internet through doorman; a ClusterNetworkPolicy applied once the API
// server is back reaches a running pod within 30 s (a generous bound; the
// time is logged).
func TestK8sComponentsRestart(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, k8sGrantLabels)
	host := c.AddHost(t, ns+".restart.test")
	startProbePod(t, c, ns, "survivor", map[string]string{"doorman.io/mode": "allowlist", "doorman.io/allowed-hosts": host.Name()})
	containerID := func() string {
		return c.MustKubectl(t, "get", "pod", "-n", ns, "survivor", "-o", "jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}")
	}
	before := containerID()
	// A pod the cluster grants nothing yet: a grant made once the API
	// server is back must reach it within seconds (the agent's watches
	// retry within 4 s), not when client-go's backoff (up to a minute)
	// would.
	nsLater := c.Namespace(t, nil)
	later := c.AddHost(t, nsLater+".later.example")
	startProbePod(t, c, nsLater, "waiting", nil)
	t.Cleanup(func() { c.Kubectl(t, "delete", "clusternetworkpolicy", nsLater, "--ignore-not-found") })

	stop := time.Now()
	c.StopComponent(t, k8scluster.APIServer)
	t.Logf("the API server stopped %v after SIGTERM", time.Since(stop).Round(time.Millisecond))
	if r := c.Kubectl(t, "get", "pods", "-n", ns, "--request-timeout=3s"); r.Exit == 0 {
		t.Errorf("kubectl with the API server stopped: %v", r)
	}
	if r := c.Crictl(t, "ps", "--name", "probe", "--state", "running", "--quiet"); r.Exit != 0 || strings.TrimSpace(r.Stdout) == "" {
		t.Errorf("the pod's container is not running with the API server stopped: %v", r)
	}
	c.StartComponent(t, k8scluster.APIServer)
	// And a crash of it.
	c.KillComponent(t, k8scluster.APIServer)
	c.StartComponent(t, k8scluster.APIServer)
	granted := time.Now()
	c.ApplyClusterPolicy(t, nsLater, k8scluster.DomainGrant(nsLater, nsLater, 70, later.Name()))
	c.WaitFor(t, 30*time.Second, "a grant made once the API server was back reaching "+nsLater+"/waiting", func() (bool, string) {
		r := probeGet(t, c, nsLater, "waiting", "https://"+later.Name()+"/later", "--timeout", "2s")
		return servedBy(r, later.Name()), r.String()
	})
	t.Logf("the API server back (stopped, then killed): kubectl apply of a grant to the running pod served in %v (polled with kubectl exec)", time.Since(granted).Round(time.Millisecond))

	for _, comp := range []k8scluster.Component{k8scluster.Kubelet, k8scluster.Containerd} {
		c.RestartComponent(t, comp)
		c.WaitFor(t, time.Minute, "node Ready after restarting "+string(comp), func() (bool, string) {
			r := c.Kubectl(t, "get", "node", c.NodeName(), "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return r.Exit == 0 && r.Stdout == "True", r.Stdout + r.Stderr
		})
	}
	c.WaitPodReady(t, ns, "survivor", time.Minute)
	if after := containerID(); after != before {
		t.Errorf("the pod's container after the restarts: %q, was %q", after, before)
	}
	assertK8sEnforced(t, c, ns, "survivor")
	if r := probeGet(t, c, ns, "survivor", "https://"+host.Name()+"/restart"); !servedBy(r, host.Name()) {
		t.Errorf("after the restarts: %v", r)
	}
}
