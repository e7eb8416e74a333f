package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Leaf certificates: valid for a week, re-minted a day before they end,
// at most maxLeaves cached (the cache is emptied when full).
const (
	leafValidity = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
	maxLeaves    = 1024
	// recheck is how often the CA files are looked at for a change.
	recheck = time.Second
)

// Minter mints the leaf certificates the proxy presents for inspected
// hosts, signed by the CA in one directory, and caches them by name. It
// notices a re-issued or rotated CA (the files' change times) within a
// second and mints from it from then on. It only reads the directory.
// Its methods are safe for concurrent use.
type Minter struct {
	dir string

	mu      sync.Mutex
	checked time.Time
	stamp   string // the files' identity when last loaded
	signer  *signer
	loadErr error
	leaves  map[string]*tls.Certificate
}

// signer is one loaded CA, and the one key all its leaves share (a leaf
// key protects nothing the CA key does not: it never leaves the proxy).
type signer struct {
	key     *ecdsa.PrivateKey
	cert    *x509.Certificate
	leafKey *ecdsa.PrivateKey
}

// NewMinter returns a minter for the CA in dir. The CA need not exist
// yet: Leaf fails until it does.
func NewMinter(dir string) *Minter {
	return &Minter{dir: dir, leaves: map[string]*tls.Certificate{}}
}

// Dir is the CA directory.
func (m *Minter) Dir() string { return m.dir }

// Leaf returns a certificate for name (an inspected host, canonical),
// signed by the CA, with the CA certificate as its chain.
func (m *Minter) Leaf(name string) (*tls.Certificate, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if now.Sub(m.checked) >= recheck || m.signer == nil {
		m.checked = now
		m.reload()
	}
	if m.signer == nil {
		return nil, m.loadErr
	}
	if c, ok := m.leaves[name]; ok && now.Before(c.Leaf.NotAfter.Add(-leafRenew)) {
		return c, nil
	}
	c, err := m.signer.mint(name, now)
	if err != nil {
		return nil, err
	}
	if len(m.leaves) >= maxLeaves {
		clear(m.leaves)
	}
	m.leaves[name] = c
	return c, nil
}

// reload loads the CA if its files changed. A CA that does not load
// keeps the last good one in use (a rotation in progress writes the
// certificate before the key).
func (m *Minter) reload() {
	stamp := fileStamp(filepath.Join(m.dir, KeyFile)) + "|" + fileStamp(filepath.Join(m.dir, CertFile))
	if stamp == m.stamp && m.signer != nil {
		return
	}
	key, cert, err := load(m.dir)
	if err != nil {
		m.loadErr = err
		return
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		m.loadErr = err
		return
	}
	m.stamp, m.loadErr = stamp, nil
	m.signer = &signer{key: key, cert: cert, leafKey: leafKey}
	clear(m.leaves)
}

func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "-"
	}
	return fmt.Sprintf("%d.%d", fi.ModTime().UnixNano(), fi.Size())
}

func (s *signer) mint(name string, now time.Time) (*tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(s.cert.NotAfter) {
		notAfter = s.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{Organization: []string{"doorman (inspected)"}, CommonName: name},
		NotBefore:      now.Add(-time.Hour),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:       []string{name},
		AuthorityKeyId: s.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.cert, &s.leafKey.PublicKey, s.key)
	if err != nil {
		return nil, fmt.Errorf("mint a certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, s.cert.Raw}, PrivateKey: s.leafKey, Leaf: leaf}, nil
}

// MintFor signs a leaf for any name with the CA in dir, bypassing the
// proxy's checks: for tests that show the name constraints hold (a leaf
// for a name outside them must not verify).
func MintFor(dir, name string) (certPEM []byte, err error) {
	key, cert, err := load(dir)
	if err != nil {
		return nil, err
	}
	s := &signer{key: key, cert: cert, leafKey: key}
	c, err := s.mint(name, time.Now())
	if err != nil {
		return nil, err
	}
	return pemCert(c.Certificate[0]), nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
