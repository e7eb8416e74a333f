package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/k8scluster"
)

// TestK8sClusterNetworkPolicy: on a real cluster with doorman deployed
// by its manifests (the node agent included), an Admin-tier
// ClusterNetworkPolicy with domainNames grants a namespace one host of
// the fake internet. A pod there whose annotation asks for that host and
// another one reaches only the granted one (the other's servers see
// nothing), and the agent reports the widening annotation as an Event
// on the pod. A `kubectl apply` that adds the second host reaches the
// running pod: its requests are then served. The agent's metrics on the
// node count the pod's connections.
func TestK8sClusterNetworkPolicy(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, nil)
	granted := c.AddHost(t, ns+".granted.example")
	later := c.AddHost(t, ns+".later.example")
	cnp := func(names ...string) string {
		return k8scluster.DomainGrant(ns, ns, 10, names...) +
			`  - {name: the-rest, action: Deny, to: [{networks: ["0.0.0.0/0", "::/0"]}]}` + "\n"
	}
	c.ApplyClusterPolicy(t, ns, cnp(granted.Name()))

	startProbePod(t, c, ns, "probe", map[string]string{"doorman.io/allowed-hosts": granted.Name() + "," + later.Name()})
	assertK8sEnforced(t, c, ns, "probe")
	if r := probeGet(t, c, ns, "probe", "https://"+granted.Name()+"/k8s"); !servedBy(r, granted.Name()) {
		t.Errorf("the granted host: %v", r)
	}
	if r := probeGet(t, c, ns, "probe", "https://"+later.Name()+"/before"); r.Exit == 0 {
		t.Errorf("the host only the annotation asks for: %v", r)
	}
	if n := later.Requests(); n != 0 {
		t.Fatalf("the host only the annotation asks for served %d requests, want 0", n)
	}
	c.WaitFor(t, 30*time.Second, "the agent's Event on the pod", func() (bool, string) {
		r := c.Kubectl(t, "-n", ns, "get", "events", "--field-selector", "reason=PolicyNotExact", "-o", "jsonpath={.items[*].message}")
		return strings.Contains(r.Stdout, "not granted: ") && strings.Contains(r.Stdout, later.Name()), r.Stdout + r.Stderr
	})

	// doorman show on the node says it too.
	if r := c.NodeRun(t, "/opt/cni/bin/doorman", "show", ns+"/probe"); !strings.Contains(r.Stdout, "not exact") || !strings.Contains(r.Stdout, later.Name()) || !strings.Contains(r.Stdout, "ClusterNetworkPolicy/"+ns) {
		t.Errorf("doorman show does not say what the cluster did not grant:\n%v", r)
	}

	// A live change: the cluster grants the second host too.
	start := time.Now()
	c.Apply(t, cnp(granted.Name(), later.Name()))
	var took time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if r := probeGet(t, c, ns, "probe", "https://"+later.Name()+"/after"); servedBy(r, later.Name()) {
			took = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the change did not reach the running pod within 30 s")
		}
	}
	t.Logf("kubectl apply of the ClusterNetworkPolicy to the new host served from the running pod: %v", took.Round(time.Millisecond))
	if n := later.RequestsFor(later.Name()); n < 1 {
		t.Errorf("the second host served %d requests after the change", n)
	}

	// The agent's metrics on the node.
	c.WaitFor(t, 30*time.Second, "the agent's metrics", func() (bool, string) {
		r := c.NodeRun(t, "curl", "-s", "http://127.0.0.1:9489/metrics")
		want := fmt.Sprintf(`doorman_connections_total{namespace=%q,pod="probe",verdict="allow"}`, ns)
		return strings.Contains(r.Stdout, want) && strings.Contains(r.Stdout, fmt.Sprintf(`doorman_policy_applications_total{namespace=%q,pod="probe",result="applied"}`, ns)), tailLines(r.Stdout, 30)
	})
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
