package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchBaselineEnv names a git revision whose doorman the relay benchmark
// runs beside the tree's own, as one more path ("doorman@<rev>"), so that a
// change to the proxy is measured before and after in the same run:
//
//	DOORMAN_BENCH_BASELINE=38dd24b make bench
const benchBaselineEnv = "DOORMAN_BENCH_BASELINE"

// benchBaselineBinary builds the doorman binary of the revision
// DOORMAN_BENCH_BASELINE names, from a copy of that revision's tree (git
// archive: the repository and its worktrees are left alone), and returns
// the revision's short name and the binary's path, or "", "" if the
// variable is not set.
func benchBaselineBinary(b *testing.B) (rev, bin string) {
	b.Helper()
	want := os.Getenv(benchBaselineEnv)
	if want == "" {
		return "", ""
	}
	short, err := exec.Command("git", "rev-parse", "--short", want).Output()
	if err != nil {
		b.Fatalf("%s=%s: not a revision of this repository: %v", benchBaselineEnv, want, err)
	}
	rev = strings.TrimSpace(string(short))
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		b.Fatalf("%s: %v", benchBaselineEnv, err)
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		b.Fatal(err)
	}
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", strings.TrimSpace(string(top)), rev, src))
	if out, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("%s=%s: git archive: %v\n%s", benchBaselineEnv, want, err, out)
	}
	bin = filepath.Join(dir, "doorman")
	build := exec.Command("go", "build", "-o", bin, "./cmd/doorman")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("%s=%s: build: %v\n%s", benchBaselineEnv, want, err, out)
	}
	return rev, bin
}
