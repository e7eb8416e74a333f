package k8scluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/hostsession"
	"github.com/doorman-net/doorman/integration/testnet"
)

// Result is what a command run on the node (kubectl, crictl, ctr, a
// node tool) did: its stdout, stderr and exit status.
type Result = hostsession.Result

// commandTimeout bounds every command the helpers run.
const commandTimeout = 3 * time.Minute

// Kubectl runs kubectl with args as the cluster admin, on the node (the
// API server is reachable only from its network namespace), and returns
// what it did. It fails tb only if kubectl could not be run at all.
func (c *Cluster) Kubectl(tb testing.TB, args ...string) Result {
	tb.Helper()
	return c.KubectlStdin(tb, "", args...)
}

// KubectlStdin is Kubectl with stdin.
func (c *Cluster) KubectlStdin(tb testing.TB, stdin string, args ...string) Result {
	tb.Helper()
	return c.NodeRunStdin(tb, stdin, c.kubectlPath, append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
}

// MustKubectl is Kubectl that fails tb unless kubectl exits 0, and returns
// its trimmed stdout.
func (c *Cluster) MustKubectl(tb testing.TB, args ...string) string {
	tb.Helper()
	r := c.Kubectl(tb, args...)
	if r.Exit != 0 {
		tb.Fatalf("k8scluster: %v", r)
	}
	return strings.TrimSpace(r.Stdout)
}

// Apply is `kubectl apply -f -` of manifests (YAML or JSON, documents
// separated by ---); it fails tb unless kubectl succeeds.
func (c *Cluster) Apply(tb testing.TB, manifests string) string {
	tb.Helper()
	r := c.KubectlStdin(tb, manifests, "apply", "-f", "-")
	if r.Exit != 0 {
		tb.Fatalf("k8scluster: %v\nmanifests:\n%s", r, manifests)
	}
	return strings.TrimSpace(r.Stdout)
}

// Exec runs command in the first container of pod namespace/name
// (`kubectl exec`), whose exit status is the result's.
func (c *Cluster) Exec(tb testing.TB, namespace, pod string, command ...string) Result {
	tb.Helper()
	return c.Kubectl(tb, append([]string{"exec", "-n", namespace, pod, "--"}, command...)...)
}

// WaitPodReady waits until pod namespace/name is Ready, and fails tb
// after timeout with the pod's description and events.
func (c *Cluster) WaitPodReady(tb testing.TB, namespace, name string, timeout time.Duration) {
	tb.Helper()
	r := c.Kubectl(tb, "wait", "-n", namespace, "--for=condition=Ready", "pod/"+name, "--timeout="+timeout.String())
	if r.Exit != 0 {
		d := c.Kubectl(tb, "describe", "-n", namespace, "pod", name)
		tb.Fatalf("k8scluster: pod %s/%s not Ready after %v: %v\n%s", namespace, name, timeout, r, d.Stdout)
	}
}

// Namespace creates a namespace for tb's objects, named after the test
// (with a random suffix) and labelled with labels (may be nil), and waits
// for its default service account. tb.Cleanup deletes it and waits until
// it is gone (its pods' sandboxes torn down); a failed test first logs its
// pods and events.
func (c *Cluster) Namespace(tb testing.TB, labels map[string]string) string {
	tb.Helper()
	name := namespaceName(tb.Name())
	c.MustKubectl(tb, "create", "namespace", name)
	tb.Cleanup(func() {
		if tb.Failed() {
			for _, args := range [][]string{
				{"get", "pods", "-n", name, "-o", "wide"},
				{"get", "events", "-n", name, "--sort-by=.lastTimestamp"},
			} {
				r := c.Kubectl(tb, args...)
				tb.Logf("k8scluster: kubectl %s:\n%s%s", strings.Join(args, " "), r.Stdout, r.Stderr)
			}
		}
		if r := c.Kubectl(tb, "delete", "namespace", name, "--wait=true", "--timeout=3m"); r.Exit != 0 {
			tb.Errorf("k8scluster: cleanup: %v", r)
		}
	})
	if len(labels) > 0 {
		args := []string{"label", "namespace", name}
		for k, v := range labels {
			args = append(args, k+"="+v)
		}
		c.MustKubectl(tb, args...)
	}
	c.WaitFor(tb, time.Minute, "service account default in namespace "+name, func() (bool, string) {
		r := c.Kubectl(tb, "get", "serviceaccount", "default", "-n", name, "-o", "name")
		return r.Exit == 0, r.Stderr
	})
	return name
}

var notDNSLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// namespaceName is a DNS label made of the test's name and 6 random hex
// digits.
func namespaceName(test string) string {
	base := strings.Trim(notDNSLabel.ReplaceAllString(strings.ToLower(test), "-"), "-")
	if len(base) > 48 {
		base = strings.TrimRight(base[:48], "-")
	}
	b := make([]byte, 3)
	rand.Read(b)
	return base + "-" + hex.EncodeToString(b)
}

// NodePath is path as the node sees it (its mount namespace, with its
// overlays: /run/doorman, /etc/cni/net.d, /var/log/pods ...), for the
// test process to read: /proc/<session>/root<path>.
func (c *Cluster) NodePath(path string) string { return c.sess.Path(path) }

// NodeRun runs name with args on the node (its network and mount
// namespaces, the components' PATH: containerd 2's directory, then the
// cluster's binaries, then the system's), such as `/opt/cni/bin/doorman
// ls`. It fails tb only if name could not be run at all.
func (c *Cluster) NodeRun(tb testing.TB, name string, args ...string) Result {
	tb.Helper()
	return c.NodeRunStdin(tb, "", name, args...)
}

// NodeCommand is a command running name with args on the node (as
// NodeRun), for the caller to start and stop: a server a test runs beside
// the cluster, such as Prometheus. ctx ending kills it.
func (c *Cluster) NodeCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := c.sess.Command(ctx, name, args...)
	cmd.Env = c.env
	return cmd
}

// NodeRunStdin is NodeRun with stdin.
func (c *Cluster) NodeRunStdin(tb testing.TB, stdin, name string, args ...string) Result {
	tb.Helper()
	r, err := c.sess.Run(c.env, stdin, commandTimeout, name, args...)
	if err != nil {
		tb.Fatalf("k8scluster: %v", err)
	}
	return r
}

// Crictl runs crictl with args against the node's containerd.
func (c *Cluster) Crictl(tb testing.TB, args ...string) Result {
	tb.Helper()
	return c.NodeRun(tb, "crictl", c.crictlGlobals(args...)...)
}

// ImportImage imports the OCI archive at path into the node's containerd,
// in the namespace the kubelet uses (`ctr -n k8s.io images import`), as
// an operator loads an image on a node without a registry. Pods run it
// with imagePullPolicy: Never.
func (c *Cluster) ImportImage(tb testing.TB, path string) {
	tb.Helper()
	r := c.NodeRun(tb, "ctr", "--address", c.containerdAddress(), "--namespace", "k8s.io",
		"images", "import", "--snapshotter", "native", path)
	if r.Exit != 0 {
		tb.Fatalf("k8scluster: %v\ncontainerd's log:\n%s", r, c.LogTail(Containerd, 30))
	}
}

// AddHost adds a host named name to the fake internet, on the next free
// address of 203.0.113.100-250 (testnet.Net.AddHost: HTTP, HTTPS and the
// other servers, counting what reaches them, and DNS answering name). The
// host lives as long as the cluster: tests sharing a cluster give their
// hosts names of their own.
func (c *Cluster) AddHost(tb testing.TB, name string) *testnet.Host {
	tb.Helper()
	c.mu.Lock()
	n := c.nextHost
	c.nextHost++
	c.mu.Unlock()
	if n > 250 {
		tb.Fatalf("k8scluster: AddHost(%q): no address left", name)
	}
	return c.net.AddHost(name, netip.AddrFrom4([4]byte{203, 0, 113, byte(n)}))
}

// String names the cluster for a log line.
func (c *Cluster) String() string { return fmt.Sprintf("cluster %s (%s)", c.nodeName, c.dir) }
