package ca

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// SystemBundlePaths are where the common distributions keep their PEM
// trust bundle, in the order a bundle is looked for: Debian, Ubuntu and
// Alpine; Fedora, RHEL and their kin; openSUSE; and the OpenSSL default
// some images link to one of the others. A sandbox that trusts its
// network's CA gets its bundle over each of these that its image has.
var SystemBundlePaths = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// BundleEnv are the environment variables that make the common TLS
// stacks read a bundle file (OpenSSL and Go, Node's extra CAs, Python
// requests, curl); a sandbox gets them pointing at its bundle.
var BundleEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"}

// maxBaseBundle bounds an image's system bundle (a full Mozilla bundle is
// about 220 KiB).
const maxBaseBundle = 8 << 20

// ReadSystemBundle returns the system trust bundle of the filesystem at
// root ("/" for the host's): the first of SystemBundlePaths there that is
// a regular file (symlinks are followed inside root only), or nil.
func ReadSystemBundle(root string) []byte {
	for _, p := range SystemBundlePaths {
		if data, err := readInRoot(root, p); err == nil && len(data) > 0 {
			return data
		}
	}
	return nil
}

// readInRoot reads path inside root, following symlinks as if root were
// "/" (an image's /etc/ssl/cert.pem -> certs/ca-certificates.crt must not
// resolve on the host), at most 40 of them.
func readInRoot(root, path string) ([]byte, error) {
	cur := path
	for range 40 {
		full := filepath.Join(root, cur)
		fi, err := os.Lstat(full)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(full)
			if err != nil {
				return nil, err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(cur), target)
			}
			cur = filepath.Clean("/" + target)
			continue
		}
		if !fi.Mode().IsRegular() {
			return nil, errors.New("not a regular file")
		}
		f, err := os.Open(full)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, maxBaseBundle))
	}
	return nil, errors.New("too many symlinks")
}

// ExistingBundlePaths returns those of SystemBundlePaths that exist in
// the filesystem at root (as files or symlinks): where a sandbox's bundle
// is mounted, besides the first path, which always is.
func ExistingBundlePaths(root string) []string {
	out := []string{SystemBundlePaths[0]}
	for _, p := range SystemBundlePaths[1:] {
		if _, err := readInRoot(root, p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// WriteBundle registers a trust bundle for sandbox id in dir's CA: base
// (the sandbox's own system bundle, may be empty) followed by the CA
// certificate, at the returned path. The CA must exist (Ensure). Ensure
// and Rotate rewrite it in place whenever the certificate changes.
func WriteBundle(dir, id string, base []byte) (string, error) {
	if id == "" || filepath.Base(id) != id || strings.HasPrefix(id, ".") {
		return "", fmt.Errorf("CA bundle: bad sandbox id %q", id)
	}
	unlock, err := lock(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	bdir := filepath.Join(dir, bundlesDir)
	if err := os.MkdirAll(bdir, 0o755); err != nil {
		return "", fmt.Errorf("CA bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bdir, id+".base"), base, 0o644); err != nil {
		return "", fmt.Errorf("CA bundle: %w", err)
	}
	path := filepath.Join(bdir, id+".pem")
	if err := writeBundle(dir, path, base); err != nil {
		return "", err
	}
	return path, nil
}

// BundlePath is where WriteBundle puts sandbox id's bundle.
func BundlePath(dir, id string) string { return filepath.Join(dir, bundlesDir, id+".pem") }

// RemoveBundle forgets sandbox id's bundle. A missing one is no error.
func RemoveBundle(dir, id string) error {
	if id == "" || filepath.Base(id) != id {
		return nil
	}
	bdir := filepath.Join(dir, bundlesDir)
	for _, f := range []string{id + ".pem", id + ".base"} {
		if err := os.Remove(filepath.Join(bdir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("CA bundle: %w", err)
		}
	}
	return nil
}

// writeBundle writes base and dir's certificate to path in place: the
// same inode, truncated and rewritten, since a running container holds a
// bind mount of it.
func writeBundle(dir, path string, base []byte) error {
	cert, err := CertPEM(dir)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.Write(base)
	if len(base) > 0 && base[len(base)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString("# doorman CA of network " + filepath.Base(dir) + ": it vouches only for the hosts doorman inspects\n")
	b.Write(cert)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	_, err = f.WriteAt(b.Bytes(), 0)
	if err == nil {
		err = f.Truncate(int64(b.Len()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("CA bundle %s: %w", path, err)
	}
	return nil
}

// rewriteBundles rewrites every registered bundle with the current
// certificate. The caller holds the lock.
func rewriteBundles(dir string) error {
	bdir := filepath.Join(dir, bundlesDir)
	entries, err := os.ReadDir(bdir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("CA bundles: %w", err)
	}
	var errs []error
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".pem")
		if !ok {
			continue
		}
		base, err := os.ReadFile(filepath.Join(bdir, id+".base"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if err := writeBundle(dir, filepath.Join(bdir, e.Name()), base); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
