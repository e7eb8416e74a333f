package runner

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/hostconf"
)

// caDir is the run network's CA directory: one CA per bridge, as for any
// CNI network (the bridge names the conflist).
func (c Config) caDir() string {
	return filepath.Join(cmp.Or(c.CADir, hostconf.DefaultCADir), c.Bridge)
}

// addTrust registers, when the run's policy inspects hosts, a trust
// bundle for the run (the host's system bundle plus the network's CA,
// which the doorman plugin's ADD made) and picks the host's bundle paths
// the command sees it at. The CA's key is never mounted.
func (s *Sandbox) addTrust(c Config) error {
	if !c.Policy.HasInspection() {
		return nil
	}
	path, err := ca.WriteBundle(c.caDir(), s.Key(), ca.ReadSystemBundle("/"))
	if err != nil {
		return err
	}
	s.trustBundle = path
	for _, p := range ca.SystemBundlePaths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			s.trustPaths = append(s.trustPaths, p)
		}
	}
	return nil
}

// trustEnv is the environment that makes the common TLS stacks read the
// run's bundle.
func (s *Sandbox) trustEnv() []string {
	if s.trustBundle == "" {
		return nil
	}
	at := s.trustBundle
	if len(s.trustPaths) > 0 {
		at = s.trustPaths[0]
	}
	var env []string
	for _, k := range ca.BundleEnv {
		env = append(env, k+"="+at)
	}
	return env
}

// mountTrust mounts the run's bundle read-only over the host's bundle
// paths, inside the command's mount namespace (enterSandbox's).
func mountTrust(bundle string, paths []string) error {
	for _, p := range paths {
		if err := unix.Mount(bundle, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount the trust bundle over %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	return nil
}

// withEnv returns env with each KEY=value of add replacing an earlier KEY.
func withEnv(env, add []string) []string {
	out := make([]string, 0, len(env)+len(add))
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		replaced := false
		for _, a := range add {
			if ak, _, _ := strings.Cut(a, "="); ak == k {
				replaced = true
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return append(out, add...)
}
