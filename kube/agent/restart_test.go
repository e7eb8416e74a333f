package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	npaclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/doorman-net/doorman/kube/agentclient"
	"github.com/doorman-net/doorman/plugin"
)

// restartDowntime is how long TestAgentAPIServerRestart keeps the API
// server away: long enough for client-go informers' backoff to have
// grown past 15 s.
const restartDowntime = 30 * time.Second

// TestAgentAPIServerRestart: a change made once a restarted API server is
// back (after restartDowntime away) reaches the agent's answer within 15 s
// (a generous bound: watchBackoff retries within 4 s; client-go's
// informers' backoff would be at 25 to 60 s by then). It logs the time.
func TestAgentAPIServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("keeps an API server away for 30 s")
	}
	s := startAPIServer(t)
	s.kubectl("", "apply", "-f", filepath.Join(moduleDir(t, "sigs.k8s.io/network-policy-api"), "config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml"))
	s.kubectl("", "wait", "--for", "condition=established", "--timeout", "60s", "crd/clusternetworkpolicies.policy.networking.k8s.io")
	cnp := func(names string) string {
		return fmt.Sprintf(`
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: grant}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {}}
  egress:
  - {name: names, action: Accept, to: [{domainNames: [%s]}], protocols: [{tcp: {destinationPort: {number: 443}}}]}
`, names)
	}
	s.kubectl(`
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Node
metadata: {name: node-1}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: team-a}
spec: {nodeName: node-1, containers: [{name: c, image: localhost/none}]}
---`+cnp(`"before.example.com"`), "apply", "-f", "-")

	dir := t.TempDir()
	settings, err := plugin.ParseSettings([]byte(fmt.Sprintf(`{"mode": "none", "stateDir": %q, "agent": {"dir": %q}}`, filepath.Join(dir, "state"), filepath.Join(dir, "agent"))))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(settings.StateDir, 0o700)
	kc := kubernetes.NewForConfigOrDie(s.config())
	a, err := New(Config{NodeName: "node-1", Settings: settings, Kube: kc,
		NetworkPolicy: npaclient.NewForConfigOrDie(s.config()), Dynamic: dynamic.NewForConfigOrDie(s.config()),
		Log: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	pod, err := kc.CoreV1().Pods("team-a").Get(context.Background(), "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admits := func(name string) bool {
		ans, fromFile, err := agentclient.Get(settings.Agent.Dir, "team-a", "web-0", string(pod.UID), 10*time.Second)
		if err != nil || fromFile || ans.Policy == nil {
			return false
		}
		_, ok := ans.Policy.MatchName(name, 443)
		return ok
	}
	for deadline := time.Now().Add(30 * time.Second); !admits("before.example.com"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent never granted the first policy")
		}
	}

	s.stopAPI()
	time.Sleep(restartDowntime)
	s.startAPI()
	start := time.Now()
	s.kubectl(cnp(`"after.example.com"`), "apply", "-f", "-")
	for !admits("after.example.com") {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("a change made once the API server was back (after %v away) had not reached the agent after 15 s", restartDowntime)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("API server back after %v away: kubectl apply of a change to the agent's new answer in %v", restartDowntime, time.Since(start).Round(time.Millisecond))
}

// TestWatchBackoff: the agent's reflectors never wait more than 4 s
// before they try the API server again, however long it stays away.
func TestWatchBackoff(t *testing.T) {
	b := watchBackoff
	var longest time.Duration
	for range 1000 {
		longest = max(longest, b.Step())
	}
	if longest > 4*time.Second || longest < 2*time.Second {
		t.Errorf("longest wait of 1000: %v, want 2 to 4 s", longest)
	}
}
