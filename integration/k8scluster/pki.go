package k8scluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's public key infrastructure, made with crypto/x509
// the way kubeadm lays it out: one CA that signs every serving and
// client certificate, and the service-account signing key. Keys are
// ECDSA P-256 (fast to make; every component accepts them). Files are PEM
// under dir: ca.crt, <name>.crt and <name>.key, sa.key and sa.pub.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
}

// certSpec is one certificate the CA issues: a client's identity is its
// CN (the user) and O (the groups); a server's, its SANs.
type certSpec struct {
	name   string // file name stem
	cn     string
	orgs   []string
	server bool
	dns    []string
	ips    []netip.Addr
}

// newPKI makes the CA and writes ca.crt and ca.key under dir.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "doorman-test-kubernetes-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("make the cluster CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key}
	if err := writePEM(p.path("ca.crt"), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if err := writeKey(p.path("ca.key"), key); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// cert is the path of <name>.crt, key that of <name>.key.
func (p *pki) cert(name string) string { return p.path(name + ".crt") }
func (p *pki) key(name string) string  { return p.path(name + ".key") }

// issue writes <name>.crt and <name>.key for s.
func (p *pki) issue(s certSpec) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     s.dns,
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, ip := range s.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return fmt.Errorf("issue the certificate %s: %w", s.name, err)
	}
	if err := writePEM(p.cert(s.name), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(p.key(s.name), key)
}

// serviceAccountKeys writes sa.key, the key the API server signs
// service-account tokens with, and sa.pub, the one it verifies them with.
func (p *pki) serviceAccountKeys() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(p.path("sa.key"), key); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	return writePEM(p.path("sa.pub"), "PUBLIC KEY", pub)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("k8scluster: crypto/rand failed: %v", err))
	}
	return n
}
