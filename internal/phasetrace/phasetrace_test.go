package phasetrace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// envChild makes this test binary mark two phases and exit (see
// TestMain): the environment is read once per process, so tracing on
// and off is tested in children.
const envChild = "PHASETRACE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		Mark("one")
		Mark("two")
		if On() != (Env() != "") {
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(t *testing.T, dir string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append([]string{envChild + "=1"}, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	return cmd
}

// With DOORMAN_TRACE set, each Mark appends "<ns> <pid> <phase>", in
// order; without it, nothing is written.
func TestMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace")
	cmd := child(t, t.TempDir(), EnvVar+"="+path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("trace %q: want two lines", data)
	}
	var last int64
	for i, want := range []string{"one", "two"} {
		f := strings.Fields(lines[i])
		if len(f) != 3 || f[1] != strconv.Itoa(cmd.Process.Pid) || f[2] != want {
			t.Fatalf("line %q: want <ns> %d %s", lines[i], cmd.Process.Pid, want)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || ns < last {
			t.Fatalf("line %q: time not a number or going back", lines[i])
		}
		last = ns
	}

	// Untraced, in a directory of its own: it writes nothing there.
	dir := t.TempDir()
	child(t, dir)
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("untraced child left %v in its directory (%v)", left, err)
	}
}
