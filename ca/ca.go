// Package ca is the certificate authority of one doorman network: the
// ECDSA P-256 key and certificate the proxy signs inspected hosts' leaf
// certificates with, and the trust bundles that put that certificate in
// front of the sandboxes' TLS clients.
//
// A network (a CNI network's name, or the hook's and `doorman run`'s own)
// has one CA, in a directory of its own on the host:
//
//	ca.key           the private key, 0600, never mounted into a sandbox
//	ca.crt           the certificate, constrained to the inspected hosts
//	bundles/<id>.pem one sandbox's trust bundle: its image's own system
//	                 bundle (bundles/<id>.base) and then ca.crt
//
// The certificate carries X.509 name constraints (critical): it may vouch
// only for the inspected hosts' names (and, as DNS constraints go, names
// below them) and for no IP address, so that a leaked bundle, or the CA
// in a client's trust, cannot be used for any other host. The names are
// in the certificate, so a host set that grows needs a new certificate:
// Ensure re-issues it with the same key and subject, for the union of the
// hosts it had and the new ones, and rewrites every registered bundle in
// place (the same inode, so a bind mount of the file in a running
// container sees the new content; processes that already read it keep
// the old one until they read it again). Narrowing the set is Rotate's:
// a new key and a certificate for exactly the given hosts.
package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/internal/atomicfile"
)

// The files of a CA directory.
const (
	KeyFile    = "ca.key"
	CertFile   = "ca.crt"
	bundlesDir = "bundles"
	lockFile   = ".lock"
)

// caValidity is how long a CA certificate is valid.
const caValidity = 10 * 365 * 24 * time.Hour

// Info describes a CA as `doorman ca show` prints it.
type Info struct {
	Dir         string    `json:"dir"`
	Subject     string    `json:"subject"`
	Fingerprint string    `json:"sha256"` // of the certificate, hex
	NotBefore   time.Time `json:"notBefore"`
	NotAfter    time.Time `json:"notAfter"`
	// Hosts are the names the certificate may vouch for (its permitted
	// DNS constraints, "*.example.com" for ".example.com").
	Hosts   []string `json:"hosts"`
	Bundles []string `json:"bundles,omitempty"`
}

// Ensure makes sure dir holds a CA whose certificate covers hosts
// (canonical names and *.wildcards): it creates the directory, the key
// and the certificate on first use, and re-issues the certificate (same
// key) for the union of its hosts and these when some are missing, then
// rewrites the registered bundles. changed reports a new certificate. An
// error leaves the CA as it was.
func Ensure(dir string, hosts []string) (changed bool, err error) {
	unlock, err := lock(dir)
	if err != nil {
		return false, err
	}
	defer unlock()
	key, cert, err := load(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if key, err = newKey(dir); err != nil {
			return false, err
		}
	case err != nil:
		return false, err
	default:
		have := certHosts(cert)
		if covers(have, hosts) {
			return false, nil
		}
		hosts = union(have, hosts)
	}
	if err := issue(dir, key, hosts); err != nil {
		return false, err
	}
	return true, rewriteBundles(dir)
}

// Rotate replaces dir's key and certificate with new ones for exactly
// hosts, and rewrites the registered bundles. Leaves signed by the old key
// no longer verify once a client reads its bundle again.
func Rotate(dir string, hosts []string) error {
	unlock, err := lock(dir)
	if err != nil {
		return err
	}
	defer unlock()
	key, err := newKeyAside(dir)
	if err != nil {
		return err
	}
	if err := issue(dir, key, hosts); err != nil {
		return err
	}
	if err := installKey(dir); err != nil {
		return err
	}
	return rewriteBundles(dir)
}

// Show describes the CA in dir.
func Show(dir string) (Info, error) {
	_, cert, err := load(dir)
	if err != nil {
		return Info{}, err
	}
	sum := sha256.Sum256(cert.Raw)
	info := Info{Dir: dir, Subject: cert.Subject.String(), Fingerprint: fmt.Sprintf("%x", sum),
		NotBefore: cert.NotBefore, NotAfter: cert.NotAfter, Hosts: certHosts(cert)}
	entries, _ := os.ReadDir(filepath.Join(dir, bundlesDir))
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".pem"); ok {
			info.Bundles = append(info.Bundles, id)
		}
	}
	return info, nil
}

// CertPEM returns the CA certificate of dir, PEM-encoded.
func CertPEM(dir string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", dir, err)
	}
	return data, nil
}

// lock holds dir's lock file (making dir, 0700) until the returned
// function is called: Ensure, Rotate and the bundle writers of several
// processes (two sandboxes starting on one network) take turns.
func lock(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("CA %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("CA %s: lock: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// load reads dir's key and certificate; os.ErrNotExist if there is no CA
// yet.
func load(dir string) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("CA %s: no key: %w", dir, os.ErrNotExist)
		}
		return nil, nil, fmt.Errorf("CA %s: %w", dir, err)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("CA %s: no certificate: %w", dir, os.ErrNotExist)
		}
		return nil, nil, fmt.Errorf("CA %s: %w", dir, err)
	}
	return parse(dir, keyPEM, certPEM)
}

func parse(dir string, keyPEM, certPEM []byte) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, nil, fmt.Errorf("CA %s: %s holds no EC PRIVATE KEY", dir, KeyFile)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA %s: %s: %w", dir, KeyFile, err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("CA %s: %s holds no CERTIFICATE", dir, CertFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA %s: %s: %w", dir, CertFile, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("CA %s: %s and %s do not belong together", dir, KeyFile, CertFile)
	}
	return key, cert, nil
}

func marshalKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// newKey makes and writes dir's first key (0600).
func newKey(dir string) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA %s: new key: %w", dir, err)
	}
	data, err := marshalKey(key)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dir, KeyFile), bytes.NewReader(data), atomicfile.Options{Perm: 0o600, Durable: true}); err != nil {
		return nil, fmt.Errorf("CA %s: write key: %w", dir, err)
	}
	return key, nil
}

// newKeyAside writes a new key beside the current one (ca.key.new), for
// Rotate to install once its certificate is written.
func newKeyAside(dir string) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA %s: new key: %w", dir, err)
	}
	data, err := marshalKey(key)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dir, KeyFile+".new"), bytes.NewReader(data), atomicfile.Options{Perm: 0o600, Durable: true}); err != nil {
		return nil, fmt.Errorf("CA %s: write key: %w", dir, err)
	}
	return key, nil
}

// installKey moves the key Rotate made over the old one.
func installKey(dir string) error {
	if err := os.Rename(filepath.Join(dir, KeyFile+".new"), filepath.Join(dir, KeyFile)); err != nil {
		return fmt.Errorf("CA %s: install key: %w", dir, err)
	}
	return nil
}

// issue writes a new CA certificate for key, constrained to hosts.
func issue(dir string, key *ecdsa.PrivateKey, hosts []string) error {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	ski := sha256.Sum256(pub)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			Organization: []string{"doorman"},
			CommonName:   "doorman CA " + filepath.Base(dir),
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski[:20],
		// Only these names, and no address at all.
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         constraints(hosts),
		ExcludedIPRanges: []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		},
	}
	if len(tmpl.PermittedDNSDomains) == 0 {
		// No host inspected yet: a constraint no real name meets, so
		// that the CA vouches for nothing.
		tmpl.PermittedDNSDomains = []string{"invalid"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("CA %s: issue certificate: %w", dir, err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := atomicfile.Write(filepath.Join(dir, CertFile), bytes.NewReader(data), atomicfile.Options{Perm: 0o644, Durable: true}); err != nil {
		return fmt.Errorf("CA %s: write certificate: %w", dir, err)
	}
	return nil
}

// constraints turns hosts into DNS name constraints: a name stays as it
// is (it then also covers names below it, as RFC 5280 says), a wildcard
// becomes ".example.com" (only names below it).
func constraints(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if rest, ok := strings.CutPrefix(h, "*."); ok {
			h = "." + rest
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// certHosts reads the hosts back from a certificate's constraints.
func certHosts(c *x509.Certificate) []string {
	var out []string
	for _, d := range c.PermittedDNSDomains {
		if d == "invalid" {
			continue
		}
		if rest, ok := strings.CutPrefix(d, "."); ok {
			d = "*." + rest
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

func covers(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
