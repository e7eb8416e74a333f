package agent

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	npaclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/kube/agentclient"
	"github.com/doorman-net/doorman/plugin"
)

// k8sBin is where the cluster's binaries are (.ci/build-cluster builds
// them); DOORMAN_K8S_BIN names another directory.
func k8sBin(t *testing.T) string {
	dir := os.Getenv("DOORMAN_K8S_BIN")
	if dir == "" {
		dir = "/opt/doorman-ci/k8s-v1.37.2/bin"
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Skipf("no %s in %s (set DOORMAN_K8S_BIN): %v", b, dir, err)
		}
	}
	return dir
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// apiServer is a real kube-apiserver over a real etcd, on loopback.
type apiServer struct {
	t       *testing.T
	bin     string
	dir     string
	url     string
	token   string
	apiCmd  *exec.Cmd
	apiArgs []string
}

// startAPIServer starts etcd and kube-apiserver (token authentication,
// AlwaysAllow authorization: this tests the agent, not RBAC).
func startAPIServer(t *testing.T) *apiServer {
	bin := k8sBin(t)
	dir := t.TempDir()
	s := &apiServer{t: t, bin: bin, dir: dir, token: "doorman-test-token"}
	etcdPort, peerPort := freePort(t), freePort(t)
	etcd := exec.Command(filepath.Join(bin, "etcd"), "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort), "--log-level", "error")
	etcd.Stderr, _ = os.Create(filepath.Join(dir, "etcd.log"))
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Process.Kill(); etcd.Wait() })
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(s.token+",admin,admin,system:masters\n"), 0o600)
	port := freePort(t)
	s.url = fmt.Sprintf("https://127.0.0.1:%d", port)
	s.apiArgs = []string{"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port), "--cert-dir", filepath.Join(dir, "pki"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"), "--authorization-mode", "AlwaysAllow",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", keyFile,
		"--service-account-signing-key-file", keyFile, "--service-cluster-ip-range", "10.96.0.0/16",
		"--disable-admission-plugins", "ServiceAccount", "--enable-priority-and-fairness=false"}
	s.startAPI()
	t.Cleanup(s.stopAPI)
	return s
}

func (s *apiServer) startAPI() {
	s.apiCmd = exec.Command(filepath.Join(s.bin, "kube-apiserver"), s.apiArgs...)
	f, _ := os.OpenFile(filepath.Join(s.dir, "apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	s.apiCmd.Stderr, s.apiCmd.Stdout = f, f
	if err := s.apiCmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 2 * time.Second}
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		req, _ := http.NewRequest("GET", s.url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "apiserver.log"))
	s.t.Fatalf("kube-apiserver not ready:\n%s", tail(log))
}

func (s *apiServer) stopAPI() {
	if s.apiCmd != nil && s.apiCmd.Process != nil {
		s.apiCmd.Process.Kill()
		s.apiCmd.Wait()
		s.apiCmd = nil
	}
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (s *apiServer) config() *rest.Config {
	return &rest.Config{Host: s.url, BearerToken: s.token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// kubectl runs kubectl against the server, the manifest (if any) on stdin.
func (s *apiServer) kubectl(stdin string, args ...string) string {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "kubectl"), append([]string{"--server", s.url, "--token", s.token, "--insecure-skip-tls-verify"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// moduleDir is a module's directory in the module cache.
func moduleDir(t *testing.T, mod string) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	if err != nil {
		t.Skipf("go list -m %s: %v", mod, err)
	}
	return strings.TrimSpace(string(out))
}

// TestAgentAgainstAPIServer runs the agent against a real kube-apiserver:
// the CRDs applied with kubectl (the EgressPolicy CRD's schema checked by
// the server), pods on the agent's node, ClusterNetworkPolicies and an
// EgressPolicy, and the answers the CNI plugin gets (package
// agentclient), live changes, Events, the file fallback with the agent
// stopped, answers from the caches with the API server stopped, and the
// agent restarted while the API server is away.
func TestAgentAgainstAPIServer(t *testing.T) {
	s := startAPIServer(t)
	repo, _ := filepath.Abs("../..")
	s.kubectl("", "apply", "-f", filepath.Join(moduleDir(t, "sigs.k8s.io/network-policy-api"), "config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml"),
		"-f", filepath.Join(repo, "deploy/kubernetes/crd-egresspolicies.yaml"))
	s.kubectl("", "wait", "--for", "condition=established", "--timeout", "60s",
		"crd/clusternetworkpolicies.policy.networking.k8s.io", "crd/egresspolicies.doorman.io")
	s.kubectl(`
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: v1
kind: Node
metadata: {name: node-1}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: team-a, labels: {app: web}}
spec: {nodeName: node-1, containers: [{name: c, image: localhost/none}]}
---
apiVersion: v1
kind: Pod
metadata: {name: api-0, namespace: team-b, labels: {app: api}, annotations: {doorman.io/allowed-hosts: "www.example.com,evil.example.org"}}
spec: {nodeName: node-1, containers: [{name: c, image: localhost/none}]}
---
apiVersion: v1
kind: Pod
metadata: {name: elsewhere-0, namespace: team-a}
spec: {nodeName: node-2, containers: [{name: c, image: localhost/none}]}
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-example}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {}}
  egress:
  - name: example
    action: Accept
    to: [{domainNames: ["*.example.com"]}]
    protocols: [{tcp: {destinationPort: {number: 443}}}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: baseline-deny}
spec:
  tier: Baseline
  priority: 10
  subject: {namespaces: {}}
  egress:
  - {name: deny-all, action: Deny, to: [{networks: ["0.0.0.0/0", "::/0"]}]}
`, "apply", "-f", "-")

	dir := t.TempDir()
	settings, err := plugin.ParseSettings([]byte(fmt.Sprintf(`{"mode": "open", "stateDir": %q, "agent": {"dir": %q}}`, filepath.Join(dir, "state"), filepath.Join(dir, "agent"))))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(settings.StateDir, 0o700)
	kc := kubernetes.NewForConfigOrDie(s.config())
	startAgent := func() context.CancelFunc {
		a, err := New(Config{NodeName: "node-1", Settings: settings, Kube: kc,
			NetworkPolicy: npaclient.NewForConfigOrDie(s.config()), Dynamic: dynamic.NewForConfigOrDie(s.config()),
			Log: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			if err := a.Run(ctx); err != nil {
				t.Errorf("agent: %v", err)
			}
			close(done)
		}()
		sock := filepath.Join(settings.Agent.Dir, agentclient.SocketName)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(sock); err == nil {
				break
			}
		}
		return func() { cancel(); <-done }
	}
	stop := startAgent()
	defer func() { stop() }()
	agentDir := settings.Agent.Dir
	uid := func(ns, name string) string {
		p, err := kc.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(p.UID)
	}
	webUID := uid("team-a", "web-0")
	get := func(ns, name, uid string) *agentclient.Answer {
		t.Helper()
		a, fromFile, err := agentclient.Get(agentDir, ns, name, uid, 10*time.Second)
		if err != nil {
			t.Fatalf("%s/%s: %v", ns, name, err)
		}
		if fromFile {
			t.Fatalf("%s/%s: answered from the file, not the agent: %s", ns, name, askRaw(agentDir, ns, name, uid))
		}
		return a
	}
	admits := func(a *agentclient.Answer, name string, port uint16) bool {
		if a.Policy.Mode == conf.ModeOpen {
			return true
		}
		_, ok := a.Policy.MatchName(name, port)
		return ok
	}

	// The CNP grant: *.example.com on 443; the installer's open is
	// narrowed by the baseline deny (v1alpha2 objects read as v1beta1).
	a := get("team-a", "web-0", webUID)
	if !admits(a, "www.example.com", 443) || admits(a, "www.example.com", 80) || admits(a, "example.org", 443) {
		t.Errorf("web-0: %v", a.Policy)
	}
	// An annotation that tries to widen is narrowed.
	b := get("team-b", "api-0", uid("team-b", "api-0"))
	if !admits(b, "www.example.com", 443) || admits(b, "evil.example.org", 443) || admits(b, "api.example.com", 443) {
		t.Errorf("api-0: %v", b.Policy)
	}
	if !slices.ContainsFunc(b.Notes, func(n string) bool { return strings.Contains(n, "evil.example.org") }) {
		t.Errorf("api-0: no note on the widening annotation: %v", b.Notes)
	}
	// A pod of another node is not this agent's.
	if _, _, err := agentclient.Get(agentDir, "team-a", "elsewhere-0", "", time.Second); err == nil {
		t.Error("the agent answered for another node's pod")
	}
	// The answer is on the node for the plugin to fall back to.
	if f, err := agentclient.ReadFile(agentDir, "team-a", "web-0", webUID); err != nil || !f.Policy.Equal(a.Policy) {
		t.Errorf("file: %v %v", f, err)
	}

	// A live change reaches the answer.
	start := time.Now()
	s.kubectl(`
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-example}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {}}
  egress:
  - name: example
    action: Accept
    to: [{domainNames: ["*.example.com", "api.example.org"]}]
    protocols: [{tcp: {destinationPort: {number: 443}}}]
`, "apply", "-f", "-")
	for !admits(get("team-a", "web-0", webUID), "api.example.org", 443) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the change did not reach the agent's answer in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("kubectl apply to a new answer: %v", time.Since(start))

	// The EgressPolicy narrows; the server took its schema.
	s.kubectl(`
apiVersion: doorman.io/v1alpha1
kind: EgressPolicy
metadata: {name: web, namespace: team-a}
spec:
  podSelector: {matchLabels: {app: web}}
  allowedHosts: ["api.example.org"]
  ruleSets: [closed-book]
  inspect:
  - host: api.example.org
    deny: [{method: [POST], path: /v1/files}]
`, "apply", "-f", "-")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a = get("team-a", "web-0", webUID)
		if admits(a, "api.example.org", 443) && !admits(a, "www.example.com", 443) && a.Policy.InspectFor("api.example.org") != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("EgressPolicy not applied: %v", a.Policy)
		}
	}
	if !slices.Equal(a.RuleSets, []string{"closed-book"}) {
		t.Errorf("rule sets %v", a.RuleSets)
	}
	// The server refuses an EgressPolicy its schema does not admit.
	cmd := exec.Command(filepath.Join(s.bin, "kubectl"), "--server", s.url, "--token", s.token, "--insecure-skip-tls-verify", "apply", "-f", "-")
	cmd.Stdin = strings.NewReader("apiVersion: doorman.io/v1alpha1\nkind: EgressPolicy\nmetadata: {name: bad, namespace: team-a}\nspec: {podSelector: {}, icmp: maybe}\n")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("a bad EgressPolicy was accepted: %s", out)
	}

	// What doorman cannot express becomes Events on the policy and the node.
	s.kubectl(`
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: inexact}
spec:
  tier: Admin
  priority: 5
  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: team-b}}}
  egress:
  - {name: deny-doc, action: Deny, to: [{networks: ["198.51.100.0/24"]}]}
`, "apply", "-f", "-")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		evs, err := kc.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var onPolicy, onNode bool
		for _, e := range evs.Items {
			onPolicy = onPolicy || (e.InvolvedObject.Kind == "ClusterNetworkPolicy" && e.InvolvedObject.Name == "inexact" && e.Reason == "PolicyNotExact")
			onNode = onNode || (e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == "node-1" && strings.Contains(e.Message, "inexact"))
		}
		if onPolicy && onNode {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Events on the policy (%v) and the node (%v): %v", onPolicy, onNode, evs.Items)
		}
	}

	// The API server stopped: the agent answers from its caches.
	s.stopAPI()
	if a := get("team-a", "web-0", webUID); !admits(a, "api.example.org", 443) {
		t.Errorf("with the API server stopped: %v", a.Policy)
	}
	// The agent stopped too: the plugin falls back to the file.
	stop()
	stop = func() {}
	f, fromFile, err := agentclient.Get(agentDir, "team-a", "web-0", webUID, time.Second)
	if err != nil || !fromFile || !f.Policy.Equal(a.Policy) {
		t.Errorf("without the agent: %v %v %v", f, fromFile, err)
	}
	// A pod the agent never saw: no answer (the plugin refuses it).
	if _, _, err := agentclient.Get(agentDir, "team-a", "new-0", "", time.Second); err == nil {
		t.Error("an answer for a pod never seen")
	}
	// The agent restarted while the API server is still away: until it
	// has synced the plugin gets the file; once the API server is back,
	// the answer is the cluster's again (the installer's mode open would
	// be far wider: the agent must not take a discovery that failed for
	// CRDs that are not installed).
	stop = startAgent()
	if f, fromFile, err := agentclient.Get(agentDir, "team-a", "web-0", webUID, time.Second); err != nil || !fromFile || !f.Policy.Equal(a.Policy) {
		t.Errorf("agent restarted without the API server: %v %v %v", f, fromFile, err)
	}
	s.startAPI()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, fromFile, err := agentclient.Get(agentDir, "team-a", "web-0", webUID, 10*time.Second)
		if err == nil && !fromFile {
			if !admits(got, "api.example.org", 443) || admits(got, "www.example.com", 443) || admits(got, "example.org", 443) || got.Policy.InspectFor("api.example.org") == nil {
				t.Errorf("after the restart: %v (sources %v)", got.Policy, got.Sources)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent restarted without the API server never answered once it was back: %v", err)
		}
	}
}

// askRaw asks the agent's socket and returns what it said, for failures.
func askRaw(dir, ns, name, uid string) string {
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, agentclient.SocketName))
	}}}
	start := time.Now()
	resp, err := c.Get("http://agent/v1/pods/" + ns + "/" + name + "?wait=10s&uid=" + uid)
	if err != nil {
		return fmt.Sprintf("after %v: %v", time.Since(start), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("after %v: %s %s", time.Since(start), resp.Status, b)
}
