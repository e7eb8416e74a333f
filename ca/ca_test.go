package ca

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func pool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	data, err := CertPEM(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		t.Fatal("no certificate")
	}
	return p
}

func verify(t *testing.T, dir string, name string) error {
	t.Helper()
	data, err := MintFor(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Verify(x509.VerifyOptions{Roots: pool(t, dir), DNSName: name})
	return err
}

func TestEnsureConstrainsAndGrows(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net1")
	changed, err := Ensure(dir, []string{"api.example.com"})
	if err != nil || !changed {
		t.Fatalf("first Ensure: %v %v", changed, err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v %v", fi.Mode(), err)
	}
	if err := verify(t, dir, "api.example.com"); err != nil {
		t.Fatalf("inspected host: %v", err)
	}
	if err := verify(t, dir, "evil.example.net"); err == nil {
		t.Fatal("a leaf for a name outside the constraints verified")
	}
	// A registered bundle is rewritten in place when the hosts grow.
	path, err := WriteBundle(dir, "sb1", []byte("# base\n"))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	if changed, err := Ensure(dir, []string{"api.example.com"}); err != nil || changed {
		t.Fatalf("same hosts: %v %v", changed, err)
	}
	if changed, err := Ensure(dir, []string{"*.github.example"}); err != nil || !changed {
		t.Fatalf("new host: %v %v", changed, err)
	}
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Fatal("bundle replaced, not rewritten in place")
	}
	data, _ := os.ReadFile(path)
	cert, _ := CertPEM(dir)
	if !strings.HasPrefix(string(data), "# base\n") || !strings.HasSuffix(string(data), string(cert)) {
		t.Fatalf("bundle:\n%s", data)
	}
	info, err := Show(dir)
	if err != nil || strings.Join(info.Hosts, " ") != "*.github.example api.example.com" || len(info.Bundles) != 1 {
		t.Fatalf("Show: %+v %v", info, err)
	}
	for _, ok := range []string{"api.example.com", "a.github.example"} {
		if err := verify(t, dir, ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"github.example", "other.example", "203.0.113.7"} {
		if err := verify(t, dir, bad); err == nil {
			t.Errorf("%s verified", bad)
		}
	}
	// openssl agrees, where it is installed.
	if _, err := exec.LookPath("openssl"); err == nil {
		leaf, _ := MintFor(dir, "evil.example.net")
		lf := filepath.Join(t.TempDir(), "leaf.pem")
		os.WriteFile(lf, leaf, 0o644)
		out, err := exec.Command("openssl", "verify", "-CAfile", filepath.Join(dir, CertFile), lf).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "permitted subtree violation") {
			t.Errorf("openssl verify of a leaf outside the constraints: %v\n%s", err, out)
		}
		good, _ := MintFor(dir, "api.example.com")
		os.WriteFile(lf, good, 0o644)
		if out, err := exec.Command("openssl", "verify", "-CAfile", filepath.Join(dir, CertFile), lf).CombinedOutput(); err != nil {
			t.Errorf("openssl verify of an inspected host's leaf: %v\n%s", err, out)
		}
	}
	if err := RemoveBundle(dir, "sb1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("bundle left")
	}
}

func TestRotateAndMinter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net")
	m := NewMinter(dir)
	if _, err := m.Leaf("a.example"); err == nil {
		t.Fatal("minted without a CA")
	}
	if _, err := Ensure(dir, []string{"a.example", "b.example"}); err != nil {
		t.Fatal(err)
	}
	l1, err := m.Leaf("a.example")
	if err != nil {
		t.Fatal(err)
	}
	if l2, _ := m.Leaf("a.example"); l2 != l1 {
		t.Fatal("not cached")
	}
	old, _ := CertPEM(dir)
	if err := Rotate(dir, []string{"a.example"}); err != nil {
		t.Fatal(err)
	}
	if now, _ := CertPEM(dir); string(now) == string(old) {
		t.Fatal("rotate kept the certificate")
	}
	if err := verify(t, dir, "b.example"); err == nil {
		t.Fatal("rotate did not narrow the constraints")
	}
	m.checked = m.checked.Add(-recheck) // the next Leaf looks at the files
	l3, err := m.Leaf("a.example")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l3.Leaf.Verify(x509.VerifyOptions{Roots: pool(t, dir), DNSName: "a.example"}); err != nil {
		t.Fatalf("leaf after rotation: %v", err)
	}
}

func TestReadSystemBundleInRoot(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"), []byte("image bundle"), 0o644)
	os.Symlink("/etc/ssl/certs/ca-certificates.crt", filepath.Join(root, "etc/ssl/cert.pem"))
	if got := ReadSystemBundle(root); string(got) != "image bundle" {
		t.Fatalf("got %q", got)
	}
	if got := ExistingBundlePaths(root); strings.Join(got, " ") != "/etc/ssl/certs/ca-certificates.crt /etc/ssl/cert.pem" {
		t.Fatalf("paths %v", got)
	}
	// A symlink that points out of the root is read inside it.
	os.Remove(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	os.Symlink("../../../../../../etc/hostname", filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	if got := ReadSystemBundle(root); got != nil {
		t.Fatalf("followed a link out of the root: %q", got)
	}
}
