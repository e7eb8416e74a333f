package k8scluster

import (
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestNamespaceName: a test's name becomes a DNS label of at most 63
// characters, different at each call.
func TestNamespaceName(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	for _, test := range []string{"TestK8sPodAllowlist", "TestX/sub_test#01", strings.Repeat("TestLong", 20), "Test--"} {
		a, b := namespaceName(test), namespaceName(test)
		if !label.MatchString(a) || len(a) > 63 {
			t.Errorf("namespaceName(%q) = %q: not a DNS label", test, a)
		}
		if a == b {
			t.Errorf("namespaceName(%q) gave %q twice", test, a)
		}
	}
}

// TestPKI: every certificate the cluster issues chains to its CA, with
// the identity (CN, O) and SANs its component needs.
func TestPKI(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	node := netip.MustParseAddr("198.51.100.2")
	specs := []certSpec{
		{name: "apiserver", cn: "kube-apiserver", server: true, dns: []string{"kubernetes.default.svc"}, ips: []netip.Addr{node}},
		{name: "kubelet", cn: "system:node:n1", orgs: []string{"system:nodes"}},
	}
	for _, s := range specs {
		if err := p.issue(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.serviceAccountKeys(); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)

	server := readCert(t, p.cert("apiserver"))
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "kubernetes.default.svc"}); err != nil {
		t.Errorf("the API server's certificate for its service name: %v", err)
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: node.String()}); err != nil {
		t.Errorf("the API server's certificate for the node's address: %v", err)
	}
	client := readCert(t, p.cert("kubelet"))
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the kubelet's client certificate: %v", err)
	}
	if client.Subject.CommonName != "system:node:n1" || !slices.Equal(client.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("the kubelet's identity: %v", client.Subject)
	}
	if slices.Contains(client.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("a client certificate may serve")
	}
	for _, f := range []string{"sa.key", "sa.pub", "ca.key", "kubelet.key"} {
		if data, err := os.ReadFile(p.path(f)); err != nil || !strings.Contains(string(data), "-----BEGIN ") {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLifetime: a shared cluster's lifetime runs its cleanups last first
// (those registered by a cleanup too), keeps the errors reported while no
// test uses the cluster, forwards them to the test that does, survives a
// Fatal in a cleanup, and remembers why it skipped.
func TestLifetime(t *testing.T) {
	l := newLifetime(nil)
	var order []int
	l.Cleanup(func() { order = append(order, 1) })
	l.Cleanup(func() {
		order = append(order, 2)
		l.Cleanup(func() { order = append(order, 3) })
	})
	l.Cleanup(func() { l.Fatalf("cleanup %d failed", 4) })
	l.Errorf("while no test runs: %d", 5)
	if !l.Failed() {
		t.Error("Failed after an error with no test running: false")
	}
	l.runCleanups()
	if !slices.Equal(order, []int{2, 3, 1}) {
		t.Errorf("cleanup order %v, want [2 3 1]", order)
	}
	if errs := l.errors(); !slices.Equal(errs, []string{"while no test runs: 5", "cleanup 4 failed"}) {
		t.Errorf("errors %q", errs)
	}
	if l.Context().Err() == nil {
		t.Error("the lifetime's context is not done once its cleanups ran")
	}

	inner := newLifetime(nil)
	t.Run("forwarded", func(t *testing.T) {
		inner.setCurrent(t)
		inner.Logf("to the test's log")
		if inner.Failed() {
			t.Error("Failed before any error")
		}
	})
	inner.setCurrent(nil)
	if len(inner.errors()) != 0 {
		t.Errorf("errors %q, want none", inner.errors())
	}

	skipped := newLifetime(nil)
	func() {
		defer func() { recover() }()
		skipped.Skipf("no %s here", "binaries")
	}()
	if skipped.skipReason() != "no binaries here" || !skipped.Skipped() {
		t.Errorf("skip reason %q", skipped.skipReason())
	}
}
