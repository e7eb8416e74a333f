package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/k8scluster"
	"github.com/doorman-net/doorman/integration/testnet"
)

// TestK8sTiers: ClusterNetworkPolicies in both tiers, with Accept, Deny
// and Pass and priorities, over pods in two namespaces, as the API
// defines them:
//
//   - Admin, priority 5, both namespaces: Pass of "two", Accept of "one".
//   - Admin, priority 20, namespace B only: Deny of every network.
//   - Baseline, both namespaces: Accept of "two" and "three".
//
// A's pod reaches all three; B's reaches "one" (priority 5 before the
// Deny of priority 20), "two" (passed out of the Admin tier, so the Deny
// does not see it, and accepted by the Baseline) and not "three" (the
// Admin Deny comes before the Baseline's Accept): its server sees
// nothing. Deleting the Deny reaches B's running pod: "three" is then
// served.
func TestK8sTiers(t *testing.T) {
	c := doormanCluster(t)
	nsA := c.Namespace(t, nil)
	nsB := c.Namespace(t, nil)
	one := c.AddHost(t, nsA+".one.example")
	two := c.AddHost(t, nsA+".two.example")
	three := c.AddHost(t, nsA+".three.example")
	both := fmt.Sprintf("{namespaces: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [%s, %s]}]}}", nsA, nsB)
	pass, deny, baseline := nsA+"-pass", nsA+"-deny", nsA+"-baseline"
	c.Apply(t, fmt.Sprintf(`
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: %[1]s}
spec:
  tier: Admin
  priority: 5
  subject: %[4]s
  egress:
  - {name: pass-two, action: Pass, to: [{domainNames: ["%[6]s"]}], protocols: [{tcp: {destinationPort: {number: 443}}}]}
  - {name: accept-one, action: Accept, to: [{domainNames: ["%[5]s"]}], protocols: [{tcp: {destinationPort: {number: 443}}}]}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: %[2]s}
spec:
  tier: Admin
  priority: 20
  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: %[8]s}}}
  egress:
  - {name: deny-all, action: Deny, to: [{networks: ["0.0.0.0/0", "::/0"]}]}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: %[3]s}
spec:
  tier: Baseline
  priority: 10
  subject: %[4]s
  egress:
  - {name: accept-two-three, action: Accept, to: [{domainNames: ["%[6]s", "%[7]s"]}], protocols: [{tcp: {destinationPort: {number: 443}}}]}
`, pass, deny, baseline, both, one.Name(), two.Name(), three.Name(), nsB))
	t.Cleanup(func() { c.Kubectl(t, "delete", "clusternetworkpolicy", pass, deny, baseline, "--ignore-not-found") })

	startProbePod(t, c, nsA, "a", nil)
	startProbePod(t, c, nsB, "b", nil)
	assertK8sEnforced(t, c, nsA, "a")
	assertK8sEnforced(t, c, nsB, "b")
	reaches := func(ns, pod string, h *testnet.Host, path string) bool {
		return servedBy(probeGet(t, c, ns, pod, "https://"+h.Name()+path), h.Name())
	}
	for _, h := range []*testnet.Host{one, two, three} {
		waitServed(t, c, nsA, "a", h, "/a")
	}
	for _, h := range []*testnet.Host{one, two} {
		waitServed(t, c, nsB, "b", h, "/b")
	}
	before := three.RequestsFor(three.Name())
	if reaches(nsB, "b", three, "/b-denied") {
		t.Errorf("%s/b reaches %s, which the Admin Deny refuses", nsB, three.Name())
	}
	if n := three.RequestsFor(three.Name()) - before; n != 0 {
		t.Fatalf("%s served %d requests from %s/b, want 0", three.Name(), n, nsB)
	}

	// A live change: without the Deny, the Baseline's Accept reaches B.
	c.MustKubectl(t, "delete", "clusternetworkpolicy", deny)
	c.WaitFor(t, 30*time.Second, "the Deny's deletion reaching "+nsB+"/b", func() (bool, string) {
		r := probeGet(t, c, nsB, "b", "https://"+three.Name()+"/b-after")
		return servedBy(r, three.Name()), r.String()
	})
}

// TestK8sAgentAway: a pod being created when the API server is killed
// (once the agent has computed its policy) gets the cluster's policy from
// the agent's caches, whether the kubelet creates its sandbox at once or
// waits for the API server; a restarted agent (its pod deleted, as an operator
// would) puts a change made while it was away in force on a running
// pod, and keeps the running pods enforced.
func TestK8sAgentAway(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, nil)
	granted := c.AddHost(t, ns+".granted.example")
	later := c.AddHost(t, ns+".later.example")
	cnp := func(names ...string) string { return k8scluster.DomainGrant(ns, ns, 30, names...) }
	c.ApplyClusterPolicy(t, ns, cnp(granted.Name()))
	// The agent has seen the policy once a pod's answer holds it.
	startProbePod(t, c, ns, "first", nil)
	waitServed(t, c, ns, "first", granted, "/first")

	// The API server killed while a pod is being created: once the pod
	// is bound to the node and the agent has computed its policy (its
	// file on the node), so that the kubelet, watching as the agent does,
	// has it too. (Killed before the agent has it, the ADD is refused
	// until the API server is back: the plugin's tests show that.)
	// No service account token: the kubelet would ask the API server for
	// one before it creates the sandbox.
	c.Apply(t, strings.Replace(probePod(ns, "during", nil), `"spec":{`, `"spec":{"automountServiceAccountToken":false,`, 1))
	c.WaitFor(t, 60*time.Second, "the agent's policy for the pod on the node", func() (bool, string) {
		_, err := os.Stat(c.NodePath("/run/doorman/agent/pods/" + ns + "/during.json"))
		return err == nil, fmt.Sprint(err)
	})
	c.KillComponent(t, k8scluster.APIServer)
	if _, err := nodeState(c, ns+"/during"); err == nil {
		t.Log("the pod's sandbox was enforced before the API server was killed")
	} else {
		t.Log("the API server was killed before the pod's CNI ADD finished")
	}
	apiUp := false
	defer func() {
		if !apiUp {
			c.StartComponent(t, k8scluster.APIServer)
		}
	}()
	// The kubelet goes on without the API server when it has all it
	// needs; when it does not (a pod it had not synced yet), the pod
	// waits for the API server. Either way the pod's policy is the
	// cluster's, checked below once it runs.
	created := false
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if _, err := nodeState(c, ns+"/during"); err == nil {
			created = true
			break
		}
	}
	podPolicy := func(when string) {
		t.Helper()
		show := c.NodeRun(t, "/opt/cni/bin/doorman", "show", ns+"/during", "-o", "json")
		var info struct {
			Mode   string   `json:"mode"`
			Policy []string `json:"policy"`
		}
		if err := json.Unmarshal([]byte(show.Stdout), &info); err != nil || info.Mode != "allowlist" || strings.Join(info.Policy, ",") != granted.Name()+":443" {
			t.Errorf("the policy of the pod created %s: %v\n%v", when, err, show)
		}
	}
	if created {
		t.Log("the pod's sandbox was created without the API server")
		podPolicy("without the API server")
	} else {
		t.Log("the kubelet did not create the pod's sandbox without the API server")
	}
	c.StartComponent(t, k8scluster.APIServer)
	apiUp = true
	c.WaitPodReady(t, ns, "during", 2*time.Minute)
	podPolicy("while the API server was away")
	waitServed(t, c, ns, "during", granted, "/during")
	if r := probeGet(t, c, ns, "during", "https://"+later.Name()+"/during"); r.Exit == 0 {
		t.Errorf("during reaches a host not granted: %v", r)
	}

	// The agent restarted: the DaemonSet's pod deleted; a change made
	// while it is away reaches the running pods once it is back.
	agentPod := strings.TrimSpace(c.MustKubectl(t, "-n", "doorman-system", "get", "pods", "-l", "app.kubernetes.io/name=doorman", "-o", "jsonpath={.items[0].metadata.name}"))
	c.MustKubectl(t, "-n", "doorman-system", "delete", "pod", agentPod, "--wait=false")
	c.Apply(t, cnp(granted.Name(), later.Name()))
	if r := c.Kubectl(t, "-n", "doorman-system", "rollout", "status", "daemonset/doorman", "--timeout=3m"); r.Exit != 0 {
		t.Fatalf("the DaemonSet did not come back: %v", r)
	}
	for _, pod := range []string{"first", "during"} {
		assertK8sEnforced(t, c, ns, pod)
		c.WaitFor(t, 60*time.Second, "the change made while the agent was away reaching "+pod, func() (bool, string) {
			r := probeGet(t, c, ns, pod, "https://"+later.Name()+"/"+pod)
			return servedBy(r, later.Name()), r.String()
		})
	}
	startProbePod(t, c, ns, "after", nil)
	assertK8sEnforced(t, c, ns, "after")
}

// TestK8sPrometheus: a real Prometheus (Debian's), on the node, scrapes
// the agent where the DaemonSet's scrape annotations say
// (prometheus.io/scrape, port and path on its pods: Debian builds
// Prometheus without Kubernetes service discovery, so the test reads
// them with kubectl, as that discovery would, and hands Prometheus the
// target in a file_sd file), and has the allowed and the denied
// connections and the refused DNS queries of a pod, by namespace and pod.
func TestK8sPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus binary (Debian's prometheus package; .ci/run installs it)")
	}
	c := doormanCluster(t)
	ns := c.Namespace(t, k8sGrantLabels)
	allowed := c.AddHost(t, ns+".allowed.test")
	denied := c.AddHost(t, ns+".denied.test")
	startProbePod(t, c, ns, "scraped", map[string]string{"doorman.io/allowed-hosts": allowed.Name()})
	if r := probeGet(t, c, ns, "scraped", "https://"+allowed.Name()+"/"); !servedBy(r, allowed.Name()) {
		t.Fatalf("allowed: %v", r)
	}
	// Refused by name (the DNS filter), and by the proxy (the address
	// given, so the connection reaches it).
	if r := probeGet(t, c, ns, "scraped", "https://"+denied.Name()+"/"); r.Exit == 0 {
		t.Fatalf("denied: %v", r)
	}
	if r := probeGet(t, c, ns, "scraped", "https://"+denied.Name()+"/", "--resolve", denied.Name()+":"+denied.Addrs()[0].String()); r.Exit != 3 {
		t.Fatalf("denied by address: %v", r)
	}

	// The targets, as Kubernetes discovery with the usual relabelling
	// would find them: the pods whose prometheus.io/scrape is "true", at
	// their IP and prometheus.io/port, path prometheus.io/path.
	pods := c.MustKubectl(t, "-n", "doorman-system", "get", "pods", "-l", "app.kubernetes.io/name=doorman", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.metadata.annotations.prometheus\.io/scrape} {.metadata.annotations.prometheus\.io/port} {.metadata.annotations.prometheus\.io/path}{"\n"}{end}`)
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	var groups []group
	for _, line := range strings.Split(strings.TrimSpace(pods), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[2] != "true" {
			t.Fatalf("the DaemonSet's pod does not declare its metrics (name, IP, scrape, port, path): %q", line)
		}
		groups = append(groups, group{Targets: []string{f[1] + ":" + f[3]}, Labels: map[string]string{"__metrics_path__": f[4], "kubernetes_pod": f[0]}})
	}
	dir := t.TempDir()
	targets, _ := json.Marshal(groups)
	cfg := fmt.Sprintf(`
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
- job_name: doorman-agent
  file_sd_configs: [{files: [%q]}]
`, filepath.Join(dir, "targets.json"))
	if err := os.WriteFile(filepath.Join(dir, "targets.json"), targets, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	const listen = "127.0.0.1:19489"
	ctx, cancel := context.WithCancel(context.Background())
	cmd := c.NodeCommand(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait(); logf.Close() })
	promLog := func() string {
		log, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		return "\nprometheus log:\n" + tailLines(string(log), 20)
	}

	// Prometheus listens in the node's network namespace: ask it there.
	query := func(q string) (string, error) {
		r := c.NodeRun(t, "curl", "-s", "--max-time", "5", "http://"+listen+"/api/v1/query?query="+url.QueryEscape(q))
		if r.Exit != 0 {
			return "", fmt.Errorf("%v", r)
		}
		return r.Stdout, nil
	}
	c.WaitFor(t, 90*time.Second, "Prometheus scraping the agent", func() (bool, string) {
		for _, q := range []string{
			fmt.Sprintf(`doorman_connections_total{namespace=%q,pod="scraped",verdict="allow"} >= 1`, ns),
			fmt.Sprintf(`doorman_connections_total{namespace=%q,pod="scraped",verdict="deny"} >= 1`, ns),
			fmt.Sprintf(`doorman_dns_queries_total{namespace=%q,pod="scraped",verdict="deny"} >= 1`, ns),
		} {
			out, err := query(q)
			if err != nil {
				return false, err.Error() + promLog()
			}
			var res struct {
				Status string `json:"status"`
				Data   struct {
					Result []struct {
						Metric map[string]string `json:"metric"`
					} `json:"result"`
				} `json:"data"`
			}
			if json.Unmarshal([]byte(out), &res) != nil || res.Status != "success" || len(res.Data.Result) != 1 || res.Data.Result[0].Metric["job"] != "doorman-agent" {
				up, _ := query("up")
				return false, q + ": " + out + "\nup: " + up + promLog()
			}
		}
		return true, ""
	})
}

// TestK8sEgressPolicy: a namespace's EgressPolicy (doorman's CRD), applied
// with kubectl, narrows what the cluster grants a running pod, live: the
// host it leaves out is no longer reached, and the host it names but the
// cluster does not grant is not reached either (it never widens). Its
// request rules and rule set are in force in the pod's sandbox (doorman
// show on the node), and the proxy now terminates the inspected host's
// TLS: the probe, which trusts only the fake internet's CA, refuses
// doorman's certificate, and the host's server sees nothing. A
// namespace's admin may write EgressPolicies, not ClusterNetworkPolicies.
func TestK8sEgressPolicy(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, nil)
	kept := c.AddHost(t, ns+".kept.example")
	dropped := c.AddHost(t, ns+".dropped.example")
	never := c.AddHost(t, ns+".never.example")
	c.ApplyClusterPolicy(t, ns, k8scluster.DomainGrant(ns, ns, 50, kept.Name(), dropped.Name()))
	pod := probePod(ns, "ep", nil)
	pod = strings.Replace(pod, `"name":"ep"`, `"labels":{"app":"ep"},"name":"ep"`, 1)
	c.Apply(t, pod)
	c.WaitPodReady(t, ns, "ep", 2*time.Minute)
	for _, h := range []*testnet.Host{kept, dropped} {
		waitServed(t, c, ns, "ep", h, "/before")
	}

	c.Apply(t, fmt.Sprintf(`
apiVersion: doorman.io/v1alpha1
kind: EgressPolicy
metadata: {name: narrow, namespace: %s}
spec:
  podSelector: {matchLabels: {app: ep}}
  allowedHosts: ["%s", "%s"]
  ruleSets: [closed-book]
  inspect:
  - host: %s
    deny: [{method: [POST], path: /v1/files}]
`, ns, kept.Name(), never.Name(), kept.Name()))
	c.WaitFor(t, 30*time.Second, "the EgressPolicy reaching the running pod", func() (bool, string) {
		r := probeGet(t, c, ns, "ep", "https://"+dropped.Name()+"/after")
		return r.Exit != 0, r.String()
	})
	before := dropped.RequestsFor(dropped.Name())
	if r := probeGet(t, c, ns, "ep", "https://"+dropped.Name()+"/after-again"); r.Exit == 0 || dropped.RequestsFor(dropped.Name()) != before {
		t.Errorf("the host the EgressPolicy leaves out: %v", r)
	}
	if r := probeGet(t, c, ns, "ep", "https://"+never.Name()+"/widen"); r.Exit == 0 || never.Requests() != 0 {
		t.Errorf("the host only the EgressPolicy names (never granted): %v, %d requests", r, never.Requests())
	}
	show := c.NodeRun(t, "/opt/cni/bin/doorman", "show", ns+"/ep", "-o", "json")
	var info struct {
		Policy   []string `json:"policy"`
		Inspect  []string `json:"inspect"`
		RuleSets []string `json:"rulesets"`
	}
	if err := json.Unmarshal([]byte(show.Stdout), &info); err != nil || strings.Join(info.Policy, ",") != kept.Name()+":443" ||
		!strings.Contains(strings.Join(info.Inspect, "\n"), "deny POST /v1/files") || len(info.RuleSets) != 1 || !strings.HasPrefix(info.RuleSets[0], "closed-book") {
		t.Errorf("the pod's sandbox after the EgressPolicy: %v\n%v", err, show)
	}
	n := kept.RequestsFor(kept.Name())
	if r := probeGet(t, c, ns, "ep", "https://"+kept.Name()+"/inspected"); r.Exit == 0 || !strings.Contains(r.Stderr, "certificate") {
		t.Errorf("the inspected host: want the probe to refuse doorman's certificate: %v", r)
	}
	if got := kept.RequestsFor(kept.Name()); got != n {
		t.Errorf("the inspected host's server saw %d requests through a TLS connection the probe refused", got-n)
	}

	// RBAC: a namespace's admin may write EgressPolicies there (the
	// ClusterRole aggregated to admin), not ClusterNetworkPolicies.
	c.MustKubectl(t, "-n", ns, "create", "rolebinding", "ns-admin", "--clusterrole=admin", "--user=ns-admin")
	c.WaitFor(t, 30*time.Second, "a namespace admin allowed to write EgressPolicies", func() (bool, string) {
		r := c.Kubectl(t, "auth", "can-i", "create", "egresspolicies.doorman.io", "-n", ns, "--as=ns-admin")
		return strings.TrimSpace(r.Stdout) == "yes", r.String()
	})
	if r := c.Kubectl(t, "auth", "can-i", "create", "clusternetworkpolicies.policy.networking.k8s.io", "--as=ns-admin"); strings.TrimSpace(r.Stdout) != "no" {
		t.Errorf("a namespace admin may write ClusterNetworkPolicies: %v", r)
	}
}

// TestK8sAnnotationsReplace: the installer's option "annotations":
// "replace" (single-tenant clusters) restores the annotations' meaning
// before the agent: a pod's doorman.io/allowed-hosts is its policy, even
// where no ClusterNetworkPolicy grants it. With the shipped "narrow", the
// same pod reaches nothing.
func TestK8sAnnotationsReplace(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, nil)
	host := c.AddHost(t, ns+".own.example")
	ann := map[string]string{"doorman.io/allowed-hosts": host.Name()}
	startProbePod(t, c, ns, "narrow", ann)
	if r := probeGet(t, c, ns, "narrow", "https://"+host.Name()+"/narrow"); r.Exit == 0 || host.Requests() != 0 {
		t.Fatalf("annotations narrow (the default), yet the pod reached a host no policy grants: %v", r)
	}

	setAnnotations := func(mode string) {
		t.Helper()
		cm := c.MustKubectl(t, "-n", "doorman-system", "get", "configmap", "doorman-config", "-o", "jsonpath={.data.install-cni\\.json}")
		var cfg map[string]any
		if err := json.Unmarshal([]byte(cm), &cfg); err != nil {
			t.Fatalf("install-cni.json: %v\n%s", err, cm)
		}
		agent, _ := cfg["agent"].(map[string]any)
		if agent == nil {
			t.Fatalf("install-cni.json has no agent key: %s", cm)
		}
		agent["annotations"] = mode
		data, _ := json.Marshal(cfg)
		patch, _ := json.Marshal(map[string]any{"data": map[string]string{"install-cni.json": string(data)}})
		c.MustKubectl(t, "-n", "doorman-system", "patch", "configmap", "doorman-config", "--type", "merge", "-p", string(patch))
		c.MustKubectl(t, "-n", "doorman-system", "rollout", "restart", "daemonset/doorman")
		if r := c.Kubectl(t, "-n", "doorman-system", "rollout", "status", "daemonset/doorman", "--timeout=3m"); r.Exit != 0 {
			t.Fatalf("rollout: %v", r)
		}
	}
	setAnnotations("replace")
	t.Cleanup(func() { setAnnotations("narrow") })
	startProbePod(t, c, ns, "replace", ann)
	if r := probeGet(t, c, ns, "replace", "https://"+host.Name()+"/replace"); !servedBy(r, host.Name()) {
		t.Errorf("annotations replace: %v", r)
	}
}

// waitServed waits until pod namespace/name's request to h is served: a
// pod's first policy is the agent's view of the cluster when the pod
// started, which lags the API server when its watches are backing off
// (after the API server restarted, in TestK8sComponentsRestart); the
// change then reaches the running pod.
func waitServed(t *testing.T, c *k8scluster.Cluster, namespace, name string, h *testnet.Host, path string) {
	t.Helper()
	c.WaitFor(t, 60*time.Second, namespace+"/"+name+" reaching "+h.Name(), func() (bool, string) {
		r := probeGet(t, c, namespace, name, "https://"+h.Name()+path)
		return servedBy(r, h.Name()), r.String()
	})
}
