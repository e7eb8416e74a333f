package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// previousRelease is the last commit before the fixes for the holes that
// issue14Rows measure: ICMP tunnels, DNS rebinding into private networks,
// neighbour spoofing on the bridge, and the plaintext HTTP desync and h2c
// upgrade.
const previousRelease = "1cea9776bd9b856f779fb241edf4850a5493d173"

// issue14Rows are the escape suite's rows for those holes.
var issue14Rows = []string{"icmp", "icmp-lan", "router-advert", "rebind", "arp-spoof", "ip-spoof", "http-desync", "h2c-upgrade"}

// TestEscapeRowsFailOnThePreviousRelease runs the CNI column of the
// escape suite against the doorman of previousRelease, built from this
// repository's history, and requires each of issue14Rows to measure an
// escape in at least one of its two columns: a row that measured 0 there
// could not tell the fix from its absence. (TestEscape requires the same
// rows to measure 0 against the doorman under test.)
func TestEscapeRowsFailOnThePreviousRelease(t *testing.T) {
	skipUnlessRoot(t)
	pluginDir := buildPreviousDoorman(t, previousRelease)
	bin := buildEscapeProbe(t)
	k := escapeCNIKind(t, bin, pluginDir, true, &escapeKind{name: "CNI sandbox, " + previousRelease[:7]}, nil, true)
	for _, id := range issue14Rows {
		var cells []string
		escaped := false
		for _, col := range k.columns {
			for _, r := range col.results {
				if r.attempt.id != id {
					continue
				}
				cells = append(cells, col.mode.String()+": "+r.arrived.summary())
				escaped = escaped || !r.arrived.zero()
			}
		}
		if len(cells) == 0 {
			t.Errorf("row %s: not run", id)
		} else if !escaped {
			t.Errorf("row %s measured nothing against %s (%s): it cannot tell the fix from its absence", id, previousRelease[:7], strings.Join(cells, "; "))
		} else {
			t.Logf("row %s against %s: %s", id, previousRelease[:7], strings.Join(cells, "; "))
		}
	}
}

// buildPreviousDoorman builds the doorman binary of commit from this
// repository's history into a directory that also holds the reference CNI
// plugins under test, and returns the directory. It skips the test when
// the checkout has no such commit (a shallow clone, an exported tree).
func buildPreviousDoorman(t *testing.T, commit string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	if out, err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("this checkout does not have commit %s (a shallow clone?): %v %s", commit, err, out)
	}
	dir := t.TempDir()
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
	return out
}
