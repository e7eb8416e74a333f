package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/doorman-net/doorman/integration/k8scluster"
)

// binDir holds the doorman binary and the reference CNI plugins, built once
// for the whole test binary from this module (the plugins from the
// containernetworking/plugins version in go.mod).
var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration: skipping, the end-to-end tests need root")
		return 0
	}
	dir, err := os.MkdirTemp("", "doorman-it-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	build := exec.Command("go", "build", "-o", dir+"/",
		"github.com/doorman-net/doorman/cmd/doorman",
		"github.com/doorman-net/doorman/cmd/doorman-agent",
		"github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/main/loopback",
	)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: build:", err)
		return 1
	}
	code := m.Run()
	// The Kubernetes tests' cluster (k8s_test.go) outlives each test.
	if err := k8scluster.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		code = max(code, 1)
	}
	return code
}

// doormanBin is the path of the doorman binary under test.
func doormanBin() string { return filepath.Join(binDir, "doorman") }

// skipUnlessRoot keeps `go test` usable for non-root users.
func skipUnlessRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}
