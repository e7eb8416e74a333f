package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// benchBaselineEnv names an older doorman that the relay, inspection and
// ADD benchmarks run beside the tree's own, so that a change is measured
// before and after in the same run: a doorman binary, or a git revision of
// this repository, built for the run:
//
//	DOORMAN_BENCH_BASELINE=38dd24b make bench
//	DOORMAN_BENCH_BASELINE=/usr/local/bin/doorman make bench
//
// The relay benchmark takes several, comma-separated, each one more path
// in the same rounds (the others use the first):
//
//	DOORMAN_BENCH_BASELINE=38dd24b,8feb24a make bench
const benchBaselineEnv = "DOORMAN_BENCH_BASELINE"

// benchBaselineBinary returns a name for the (first) doorman
// DOORMAN_BENCH_BASELINE names and its binary, or "", "" if the variable
// is not set.
func benchBaselineBinary(b *testing.B) (rev, bin string) {
	b.Helper()
	want, _, _ := strings.Cut(os.Getenv(benchBaselineEnv), ",")
	if want == "" {
		return "", ""
	}
	return benchBuildBaseline(b, want)
}

// benchBaseline is an older doorman: a name and its binary.
type benchBaseline struct{ rev, bin string }

// benchBaselineBinaries returns every doorman DOORMAN_BENCH_BASELINE
// names, in its order, none if it is not set.
func benchBaselineBinaries(b *testing.B) []benchBaseline {
	b.Helper()
	var out []benchBaseline
	for want := range strings.SplitSeq(os.Getenv(benchBaselineEnv), ",") {
		if want = strings.TrimSpace(want); want == "" {
			continue
		}
		rev, bin := benchBuildBaseline(b, want)
		out = append(out, benchBaseline{rev: rev, bin: bin})
	}
	return out
}

// benchBuildBaseline returns a name for the doorman want names (a binary
// or a revision) and its binary. A revision is built from a copy of its
// tree (git archive: the repository and its worktrees are left alone).
func benchBuildBaseline(b *testing.B, want string) (rev, bin string) {
	b.Helper()
	if fi, err := os.Stat(want); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return filepath.Base(want), benchOlderFlags(b, want)
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
	return rev, benchOlderFlags(b, bin)
}

// benchOlderFlags returns a doorman that runs bin without the flags this
// tree's sandbox package passes and an older doorman does not know:
// bin itself if it knows them, else a wrapper script that drops them.
// Dropping `supervise --ready-on-start` makes the older supervisor say ready
// once its worker serves, as it always did.
func benchOlderFlags(b *testing.B, bin string) string {
	b.Helper()
	out, _ := exec.Command(bin, "supervise", "--help").CombinedOutput()
	if strings.Contains(string(out), "ready-on-start") {
		return bin
	}
	wrapper := filepath.Join(b.TempDir(), "doorman")
	script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do shift; [ \"$a\" = --ready-on-start ] || set -- \"$@\" \"$a\"; done\nexec %q \"$@\"\n", bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	return wrapper
}
