package integration

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/k8scluster"
	"github.com/doorman-net/doorman/integration/testnet"
)

// k8sUpstreamCA is where deployDoorman puts the fake internet's CA on the
// node, and what its ConfigMap's upstreamCAFile names: the pods' proxies
// verify the inspected hosts' certificates against it, as they would a
// private CA's on a cluster that has one.
const k8sUpstreamCA = "/var/lib/doorman/upstream-ca.pem"

// TestK8sRequestRules: an EgressPolicy's request rules and its Secret
// credential, end to end through kubectl, as an operator and a namespace
// admin would use them. The namespace's admin writes a Secret and an
// EgressPolicy that inspects a host the cluster grants: POST /v1/files is
// refused, and a placeholder in x-api-key is replaced by the Secret's
// value. The pod trusts the network's CA (`doorman ca show --pem` on the
// node, in a ConfigMap mounted into the pod, as docs/policy.md says).
//
//   - The refused request gets doorman's 403, the host's server never sees
//     it, the pod's decision log has its deny line and the agent's metrics
//     count it (doorman_requests_total{verdict="deny"}).
//   - An allowed request reaches the server, with the Secret's value in
//     place of the placeholder (the server answers with the header's
//     SHA-256, so the pod never sees the value).
//   - The EgressPolicy's rule set closed-book refuses a model call to the
//     fake api.anthropic.com that asks for the provider's web search (the
//     provider gets nothing) and passes one that does not.
//   - The Secret's value is nowhere in the pod: not in its object
//     (kubectl get -o yaml), not in its container's environment or files;
//     on the node, it is only in the agent's 0600 file, not in any state
//     or log file of the sandbox.
func TestK8sRequestRules(t *testing.T) {
	c := doormanCluster(t)
	ns := c.Namespace(t, nil)
	api := c.AddHost(t, ns+".api.example")
	// A fake model API (its name is the provider's), for the rule set.
	model := c.AddHost(t, "api.anthropic.com")
	secret := "dm-secret-" + rand.Text()
	const placeholder = "dm-placeholder-key"
	c.ApplyClusterPolicy(t, ns, k8scluster.DomainGrant(ns, ns, 60, api.Name(), model.Name()))
	c.Apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: api-creds, namespace: %[1]s}
stringData: {api-key: %[3]s}
---
apiVersion: doorman.io/v1alpha1
kind: EgressPolicy
metadata: {name: rules, namespace: %[1]s}
spec:
  podSelector: {matchLabels: {app: rules}}
  ruleSets: [closed-book]
  inspect:
  - host: %[2]s
    deny: [{method: [POST], path: /v1/files}]
    default: allow
    inject:
    - {header: x-api-key, placeholder: %[4]s, secretKeyRef: {name: api-creds, key: api-key}}
`, ns, api.Name(), secret, placeholder))

	// The first pod the policy selects makes the network's CA (a policy
	// inspecting a host makes it): then it can be given to the pods.
	labelled := func(name string, volumes bool) string {
		var pod map[string]any
		if err := json.Unmarshal([]byte(probePod(ns, name, nil)), &pod); err != nil {
			t.Fatal(err)
		}
		pod["metadata"].(map[string]any)["labels"] = map[string]string{"app": "rules"}
		if volumes {
			spec := pod["spec"].(map[string]any)
			spec["volumes"] = []any{map[string]any{"name": "doorman-ca", "configMap": map[string]any{"name": "doorman-ca"}}}
			ctr := spec["containers"].([]any)[0].(map[string]any)
			ctr["volumeMounts"] = []any{map[string]any{"name": "doorman-ca", "mountPath": "/doorman-ca", "readOnly": true}}
		}
		data, _ := json.Marshal(pod)
		return string(data)
	}
	c.Apply(t, labelled("seed", false))
	c.WaitPodReady(t, ns, "seed", 2*time.Minute)
	var show k8scluster.Result
	c.WaitFor(t, 30*time.Second, "the network's CA (doorman ca show --pem "+k8scluster.PrimaryNetwork+" on the node)", func() (bool, string) {
		show = c.NodeRun(t, "/opt/cni/bin/doorman", "ca", "show", "--pem", k8scluster.PrimaryNetwork)
		return show.Exit == 0 && strings.Contains(show.Stdout, "BEGIN CERTIFICATE"), show.String()
	})
	cm, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "doorman-ca", "namespace": ns},
		"data":     map[string]string{"ca.pem": show.Stdout},
	})
	c.Apply(t, string(cm))
	start := time.Now()
	c.Apply(t, labelled("rules", true))
	c.WaitPodReady(t, ns, "rules", 2*time.Minute)
	t.Logf("pod %s/rules: kubectl apply to Ready in %v", ns, time.Since(start).Round(time.Millisecond))
	st := assertK8sEnforced(t, c, ns, "rules")

	get := func(path string, extra ...string) k8scluster.Result {
		t.Helper()
		return c.Exec(t, ns, "rules", append([]string{"/probe", "get", "https://" + api.Name() + path, "--ca", "/doorman-ca/ca.pem"}, extra...)...)
	}

	// Allowed, with the credential put in.
	r := get(testnet.HeaderDigestsPath, "--header", "x-api-key:"+placeholder)
	if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "status: 200\n") {
		t.Fatalf("an allowed request to the inspected host: %v", r)
	}
	var digests struct {
		Digests map[string][]string `json:"digests"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(r.Stdout, "status: 200\n")), &digests); err != nil {
		t.Fatalf("the server's answer: %v\n%v", err, r)
	}
	sum := sha256.Sum256([]byte(secret))
	if got := digests.Digests["X-Api-Key"]; len(got) != 1 || got[0] != hex.EncodeToString(sum[:]) {
		ph := sha256.Sum256([]byte(placeholder))
		t.Errorf("x-api-key at the server: digests %v; want the Secret's %s (the placeholder's is %s)", got, hex.EncodeToString(sum[:]), hex.EncodeToString(ph[:]))
	}
	if r := get("/allowed"); !servedBy(r, api.Name()) {
		t.Errorf("GET /allowed: %v", r)
	}

	// Refused by the rule: doorman's 403, nothing at the server.
	before := api.RequestsFor(api.Name())
	r = get("/v1/files", "--data", `{"purpose":"exfiltrate"}`)
	if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "status: 403\n") {
		t.Errorf("POST /v1/files, which the EgressPolicy denies: %v", r)
	}
	if n := api.RequestsFor(api.Name()) - before; n != 0 {
		t.Errorf("the server saw %d requests the rule refuses", n)
	}
	// The rule set: a model call asking for the provider's web search is
	// refused, one without it goes through.
	mget := func(body string) k8scluster.Result {
		t.Helper()
		return c.Exec(t, ns, "rules", "/probe", "get", "https://"+model.Name()+"/v1/messages", "--ca", "/doorman-ca/ca.pem", "--data", body)
	}
	model.ResetProviderRequests()
	if r := mget(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`); r.Exit != 0 || !strings.HasPrefix(r.Stdout, "status: 403\n") {
		t.Errorf("a model call with web search, which closed-book refuses: %v", r)
	}
	if got := model.ProviderRequests(); len(got) != 0 {
		t.Errorf("the fake provider got %d requests closed-book refuses: %v", len(got), got)
	}
	if r := mget(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`); r.Exit != 0 || !strings.HasPrefix(r.Stdout, "status: 200\n") || len(model.ProviderRequests()) != 1 {
		t.Errorf("a model call without tools: %v; the provider got %d requests", r, len(model.ProviderRequests()))
	}

	// The decision log's line for it, and the agent's metric.
	logPath := c.NodePath(st.LogFile)
	c.WaitFor(t, 15*time.Second, "the deny line of POST /v1/files in "+st.LogFile, func() (bool, string) {
		for _, m := range readLogLines(logPath) {
			if m["msg"] == "request" && m["verdict"] == "deny" && m["method"] == "POST" && m["path"] == "/v1/files" && m["status"] == float64(403) {
				return true, ""
			}
		}
		return false, tailFile(logPath, 10)
	})
	c.WaitFor(t, 30*time.Second, "the agent's metric of the refused request", func() (bool, string) {
		r := c.NodeRun(t, "curl", "-s", "--max-time", "5", "http://127.0.0.1:9489/metrics")
		want := fmt.Sprintf(`doorman_requests_total{namespace=%q,pod="rules",verdict="deny"} `, ns)
		for _, line := range strings.Split(r.Stdout, "\n") {
			if v, ok := strings.CutPrefix(line, want); ok {
				n, err := strconv.ParseFloat(v, 64)
				return err == nil && n >= 1, line
			}
		}
		return false, "no " + want + "series"
	})

	// The Secret's value is nowhere in the pod.
	for _, pod := range []string{"seed", "rules"} {
		if y := c.MustKubectl(t, "get", "pod", "-n", ns, pod, "-o", "yaml"); strings.Contains(y, secret) {
			t.Errorf("the Secret's value is in pod %s's object:\n%s", pod, y)
		}
	}
	uid := podUID(t, c, ns, "rules")
	pid := podProcess(t, uid, "/probe\x00sleep")
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err != nil || bytes.Contains(env, []byte(secret)) {
		t.Errorf("the container's environment (pid %d): %v, has the Secret: %v", pid, err, bytes.Contains(env, []byte(secret)))
	}
	root := fmt.Sprintf("/proc/%d/root/", pid) // the link's target, walked
	files := 0
	for _, f := range filesWith(t, root, []byte(secret), &files, "proc", "sys", "dev") {
		t.Errorf("the Secret's value is in the container's file %s", f)
	}
	if files == 0 {
		t.Errorf("no file read in the container's root %s", root)
	}
	// On the node: only the agent's file, 0600.
	agentFile := filepath.Join(k8sStateDir, "agent", "secrets", ns, "api-creds", "api-key")
	if fi, err := os.Stat(c.NodePath(agentFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the agent's file of the Secret %s: %v, mode %v; want 0600", agentFile, err, fi)
	}
	n := 0
	for _, dir := range []string{k8sStateDir, k8sLogDir} {
		for _, f := range filesWith(t, c.NodePath(dir), []byte(secret), &n) {
			if f != filepath.Join(c.NodePath(k8sStateDir), "agent", "secrets", ns, "api-creds", "api-key") {
				t.Errorf("the Secret's value is in the node's file %s", f)
			}
		}
	}
	if n == 0 {
		t.Errorf("no file read under the node's %s and %s", k8sStateDir, k8sLogDir)
	}
}

// readLogLines is every JSON line of the file at path.
func readLogLines(path string) []map[string]any {
	data, _ := os.ReadFile(path)
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// tailFile is the last n lines of the file at path, or why not.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tailLines(string(data), n)
}

// podProcess is the pid of the process of pod uid (by its cgroup, under
// the systemd or the cgroupfs driver's name) whose command line starts
// with cmdline (arguments separated by NULs).
func podProcess(t *testing.T, uid, cmdline string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.HasPrefix(string(cmd), cmdline) {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err == nil && (strings.Contains(string(cg), uid) || strings.Contains(string(cg), strings.ReplaceAll(uid, "-", "_"))) {
			return pid
		}
	}
	t.Fatalf("no process %q of pod %s", strings.ReplaceAll(cmdline, "\x00", " "), uid)
	return 0
}

// filesWith lists the regular files under root (not under its top-level
// directories skip) that hold value, counting the files it read in n.
func filesWith(t *testing.T, root string, value []byte, n *int, skip ...string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone or unreadable: nothing of it to find
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			for _, s := range skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		*n++
		if bytes.Contains(data, value) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return found
}
