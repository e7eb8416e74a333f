package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// previousBuilds are the doorman binaries buildPreviousDoorman made, by
// commit, once per test binary (under binDir, removed with it).
var previousBuilds struct {
	mu   sync.Mutex
	dirs map[string]string
}

// buildPreviousDoorman builds the doorman binary of commit from this
// repository's history into a directory that also holds the reference CNI
// plugins under test, and returns the directory; a second call for the
// same commit returns the same one. It skips the test when the checkout
// has no such commit (a shallow clone, an exported tree).
func buildPreviousDoorman(t *testing.T, commit string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	if out, err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("this checkout does not have commit %s (a shallow clone?): %v %s", commit, err, out)
	}
	previousBuilds.mu.Lock()
	defer previousBuilds.mu.Unlock()
	if dir, ok := previousBuilds.dirs[commit]; ok {
		return dir
	}
	dir := filepath.Join(binDir, "at-"+commit)
	src, out := filepath.Join(dir, "src"), filepath.Join(dir, "bin")
	for _, d := range []string{src, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	archive := exec.Command("sh", "-c", `cd "$(git rev-parse --show-toplevel)" && git archive "$1" | tar -x -C "$2"`, "sh", commit, src)
	if b, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, b)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(out, "doorman"), "./cmd/doorman")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build doorman at %s: %v\n%s", commit, err, b)
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if err := os.Symlink(filepath.Join(binDir, p), filepath.Join(out, p)); err != nil {
			t.Fatal(err)
		}
	}
	if previousBuilds.dirs == nil {
		previousBuilds.dirs = map[string]string{}
	}
	previousBuilds.dirs[commit] = out
	return out
}
