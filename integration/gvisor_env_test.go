package integration

import (
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// runscBinEnv names the directory holding runsc and
// containerd-shim-runsc-v1 (.ci/build-runsc builds them into
// /opt/doorman-ci/gvisor-<version>/bin, where the tests look by default).
const runscBinEnv = "DOORMAN_RUNSC_BIN"

// runscDir returns the directory of the runsc binary, or fails t: CI
// builds it (.ci/run calls .ci/build-runsc), so a missing one is a broken
// machine, as a missing cluster or SDK fixture is, not a test to skip.
func runscDir(t testing.TB) string {
	t.Helper()
	d := runscDirIfBuilt()
	if d == "" {
		t.Fatalf("runsc is not built: run .ci/build-runsc (it builds runsc into /opt/doorman-ci/gvisor-<version>/bin), or set %s to its directory", runscBinEnv)
	}
	return d
}

// runscDirIfBuilt is the directory of the runsc binary, "" if none.
func runscDirIfBuilt() string {
	dirs := []string{os.Getenv(runscBinEnv)}
	found, _ := filepath.Glob("/opt/doorman-ci/gvisor-*/bin")
	dirs = append(dirs, found...)
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if fi, err := os.Stat(filepath.Join(d, "runsc")); err == nil && !fi.IsDir() {
			return d
		}
	}
	return ""
}

// runscFlags are runsc's flags on these machines: its own network stack
// on the container's interface, and a platform that needs no KVM.
var runscFlags = []string{"--network=sandbox", "--platform=systrap"}

// newRunscEnv is newRuncEnv with runsc as the runtime: the same rootfs,
// bundles, hooks and fake internet, the workload on gVisor.
func newRunscEnv(t *testing.T) *runcEnv {
	t.Helper()
	dir := runscDir(t)
	r := newRuncEnv(t)
	r.runtime = append([]string{filepath.Join(dir, "runsc")}, runscFlags...)
	return r
}

// withNoCgroup leaves the container's cgroup to the runtime's default.
func withNoCgroup() specOption {
	return func(s *specs.Spec) { s.Linux.CgroupsPath = "" }
}
