package integration

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/k8scluster"
	"github.com/doorman-net/doorman/sandbox"
)

// The Kubernetes tests run on the test binary's shared cluster
// (k8scluster.Shared) with doorman deployed on it once, as an operator
// deploys it (deployDoorman), and talk to it through kubectl only.

// doormanImage is the image `make image` names, which the DaemonSet runs.
const doormanImage = "localhost/doorman:latest"

// The node's doorman directories, as the ConfigMap leaves them (the
// installer's defaults).
const (
	k8sStateDir = "/run/doorman"
	k8sLogDir   = "/var/log/doorman"
)

// k8sDeploy records doorman's deployment on the shared cluster.
var k8sDeploy struct {
	mu      sync.Mutex
	cluster *k8scluster.Cluster // the cluster it is deployed on
	err     string
}

// doormanCluster is the shared cluster with doorman deployed on it and
// the probe image imported: the first test to ask deploys it.
func doormanCluster(t testing.TB) *k8scluster.Cluster {
	t.Helper()
	c := k8scluster.Shared(t)
	k8sDeploy.mu.Lock()
	defer k8sDeploy.mu.Unlock()
	if k8sDeploy.err != "" {
		t.Fatal(k8sDeploy.err)
	}
	if k8sDeploy.cluster != c {
		ok := false
		defer func() {
			if !ok {
				k8sDeploy.err = "doorman's deployment on the shared cluster failed in " + t.Name() + " (see its log)"
			}
		}()
		deployDoorman(t, c)
		c.ImportImage(t, buildCRIProbeImage(t, filepath.Join(c.Dir(), "images"), c.Net().CAPEM))
		ok = true
		k8sDeploy.cluster = c
	}
	return c
}

// deployDoorman deploys doorman on c as docs/kubernetes.md's "Install on a cluster"
// says: the image `make image` builds (mkimage on the doorman binary under
// test: bin/doorman-image.tar), imported into the node's containerd, then
// `kubectl apply` of deploy/kubernetes (its ConfigMap with upstreamCAFile
// set to k8sUpstreamCA) and the DaemonSet's rollout. It
// checks that the installer chained doorman into the node's primary
// conflist, and logs how long apply → rollout took.
func deployDoorman(t testing.TB, c *k8scluster.Cluster) {
	t.Helper()
	dir := filepath.Join(c.Dir(), "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "doorman-image.tar")
	mk := exec.Command("go", "run", "github.com/doorman-net/doorman/deploy/kubernetes/mkimage",
		"-binary", doormanBin(), "-agent", filepath.Join(binDir, "doorman-agent"), "-name", doormanImage, "-version", "test", "-o", archive)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("mkimage: %v\n%s", err, out)
	}
	c.ImportImage(t, archive)

	manifests, err := filepath.Abs("../deploy/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	// The ClusterNetworkPolicy CRD, as `make crds` copies it, and the
	// grant the annotation tests narrow: *.test to the namespaces labelled
	// k8sGrantLabels (the shipped ConfigMap has the agent, so annotations
	// only narrow what the cluster grants).
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/network-policy-api").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/network-policy-api: %v", err)
	}
	start := time.Now()
	c.MustKubectl(t, "apply", "-f", filepath.Join(strings.TrimSpace(string(mod)), "config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml"))
	c.MustKubectl(t, "wait", "--for", "condition=established", "--timeout", "60s", "crd/clusternetworkpolicies.policy.networking.k8s.io")
	c.Apply(t, k8sTestGrant)
	// The shipped manifests, with the ConfigMap edited as an operator
	// whose upstreams have a private CA would: upstreamCAFile names the
	// fake internet's CA, put on the node (k8sUpstreamCA).
	if err := os.MkdirAll(c.NodePath(filepath.Dir(k8sUpstreamCA)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.NodePath(k8sUpstreamCA), c.Net().CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(manifests, "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const agentKey = `      "agent": {`
	if !strings.Contains(string(shipped), agentKey) {
		t.Fatalf("deploy/kubernetes/configmap.yaml has no line %q to put upstreamCAFile before", agentKey)
	}
	c.MustKubectl(t, "apply", "-f", filepath.Join(manifests, "namespace.yaml"))
	c.Apply(t, strings.Replace(string(shipped), agentKey, `      "upstreamCAFile": "`+k8sUpstreamCA+`",`+"\n"+agentKey, 1))
	args := []string{"apply"}
	yamls, _ := filepath.Glob(filepath.Join(manifests, "*.yaml"))
	for _, y := range yamls {
		if base := filepath.Base(y); base != "configmap.yaml" && base != "namespace.yaml" {
			args = append(args, "-f", y)
		}
	}
	c.MustKubectl(t, args...)
	if r := c.Kubectl(t, "-n", "doorman-system", "rollout", "status", "daemonset/doorman", "--timeout=3m"); r.Exit != 0 {
		d := c.Kubectl(t, "-n", "doorman-system", "describe", "pods")
		t.Fatalf("%v\n%s", r, d.Stdout)
	}
	if types := nodeChain(t, c); !slices.Equal(types, []string{"bridge", "portmap", "doorman"}) {
		t.Fatalf("the node's conflist after the rollout chains %v, want bridge, portmap, doorman", types)
	}
	t.Logf("doorman deployed: kubectl apply to the DaemonSet rolled out with doorman chained: %v", time.Since(start).Round(time.Millisecond))
}

// k8sGrantLabels label the namespaces of the tests whose pods' annotations
// ask for hosts of the fake internet: k8sTestGrant grants them *.test.
var k8sGrantLabels = map[string]string{"doorman-test/grant": "test"}

// k8sTestGrant is a Baseline ClusterNetworkPolicy granting the namespaces
// labelled k8sGrantLabels the names of the tests' hosts under .test, which
// their pods' annotations narrow. (The API's domainNames need two labels
// after "*.": "*.test" is refused.)
const k8sTestGrant = `
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: doorman-test-grant}
spec:
  tier: Baseline
  priority: 100
  subject: {namespaces: {matchLabels: {doorman-test/grant: test}}}
  egress:
  - name: test-names
    action: Accept
    to: [{domainNames: ["*.allowed.test", "*.denied.test", "*.restart.test", "example.test"]}]
`

// nodeChain is the plugin types of the node's primary conflist, in order.
func nodeChain(t testing.TB, c *k8scluster.Cluster) []string {
	t.Helper()
	types, err := chainOf(c.NodePath("/etc/cni/net.d/" + k8scluster.PrimaryConflist))
	if err != nil {
		t.Fatal(err)
	}
	return types
}

func chainOf(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, err
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Type)
	}
	return types, nil
}

// probePod is a pod that runs the probe image's `probe sleep`, with
// annotations (may be nil), for kubectl apply.
func probePod(namespace, name string, annotations map[string]string) string {
	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": name, "namespace": namespace, "annotations": annotations},
		"spec": map[string]any{
			"terminationGracePeriodSeconds": 1,
			"containers": []any{map[string]any{
				"name":            "probe",
				"image":           criProbeImage,
				"imagePullPolicy": "Never",
				"command":         []string{"/probe", "sleep", "1h"},
			}},
		},
	}
	data, err := json.Marshal(pod)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// startProbePod applies probePod and waits until it is Ready, logging how
// long that took.
func startProbePod(t testing.TB, c *k8scluster.Cluster, namespace, name string, annotations map[string]string) {
	t.Helper()
	start := time.Now()
	c.Apply(t, probePod(namespace, name, annotations))
	c.WaitPodReady(t, namespace, name, 2*time.Minute)
	t.Logf("pod %s/%s: kubectl apply to Ready in %v", namespace, name, time.Since(start).Round(time.Millisecond))
}

// nodeState is doorman's state of sandbox id (<namespace>/<pod>) on the
// node, or nil and why not.
func nodeState(c *k8scluster.Cluster, id string) (*sandbox.State, error) {
	return sandbox.Find(c.NodePath(k8sStateDir), id)
}

// mustNodeState is nodeState that fails the test unless the state is
// there.
func mustNodeState(t testing.TB, c *k8scluster.Cluster, id string) *sandbox.State {
	t.Helper()
	s, err := nodeState(c, id)
	if err != nil {
		r := c.NodeRun(t, "/opt/cni/bin/doorman", "ls", "--all")
		t.Fatalf("doorman's state of %s on the node: %v\ndoorman ls --all:\n%s%s", id, err, r.Stdout, r.Stderr)
	}
	return s
}

// assertK8sEnforced checks that doorman enforces pod namespace/name on the
// node: its state (runtime cni, the pod's id, label full, both protective
// layers) and one live proxy, the recorded one.
func assertK8sEnforced(t testing.TB, c *k8scluster.Cluster, namespace, name string) *sandbox.State {
	t.Helper()
	id := namespace + "/" + name
	s := mustNodeState(t, c, id)
	if s.Runtime != "cni" || s.Network != k8scluster.PrimaryNetwork || s.Label != "full" || !s.HostLayer || !s.DNSFilter || s.PodUID == "" {
		t.Errorf("state of %s: runtime %q network %q label %q pod uid %q, host-side layer %v, DNS filter %v; want cni, %s, full, the pod's uid, both layers",
			id, s.Runtime, s.Network, s.Label, s.PodUID, s.HostLayer, s.DNSFilter, k8scluster.PrimaryNetwork)
	}
	if pids := proxiesFor(id); !slices.Equal(pids, []int{s.PID}) {
		t.Errorf("proxy processes for %s: %v, want the recorded pid %d", id, pids, s.PID)
	}
	return s
}

// podUID is the uid of pod namespace/name.
func podUID(t testing.TB, c *k8scluster.Cluster, namespace, name string) string {
	t.Helper()
	return c.MustKubectl(t, "get", "pod", "-n", namespace, name, "-o", "jsonpath={.metadata.uid}")
}

// isNoMatch reports whether err says no sandbox matched.
func isNoMatch(err error) bool {
	var nm *sandbox.NoMatchError
	return errors.As(err, &nm)
}

// probeGet runs `probe get URL --ca /ca.pem [extra...]` in the pod.
func probeGet(t testing.TB, c *k8scluster.Cluster, namespace, pod, url string, extra ...string) k8scluster.Result {
	t.Helper()
	return c.Exec(t, namespace, pod, append([]string{"/probe", "get", url, "--ca", "/ca.pem"}, extra...)...)
}

// servedBy reports whether r is a probe get that the host name answered
// with status 200.
func servedBy(r k8scluster.Result, name string) bool {
	return r.Exit == 0 && strings.HasPrefix(r.Stdout, "status: 200\n"+name+" ")
}
