package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.conf")
	for _, durable := range []bool{false, true} {
		want := "content durable=" + map[bool]string{false: "no", true: "yes"}[durable]
		if err := Write(path, strings.NewReader(want), Options{Perm: 0o640, Durable: durable}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("read back %q, %v; want %q", got, err, want)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
			t.Errorf("mode %v, want 0640", fi.Mode().Perm())
		}
	}
	assertOnly(t, dir, "f.conf")
}

// TestWriteFailureChangesNothing: a reader that fails half-way leaves the
// old file and no temporary one.
func TestWriteFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.conf")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	r := &failAfter{r: strings.NewReader("partial"), err: boom}
	if err := Write(path, r, Options{Perm: 0o644, Durable: true, TempInfix: ".doorman-tmp-"}); !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want %v", err, boom)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("file = %q after a failed write, want the old content", got)
	}
	assertOnly(t, dir, "f.conf")
}

type failAfter struct {
	r   *strings.Reader
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.r.Len() == 0 {
		return 0, f.err
	}
	return f.r.Read(p)
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("directory holds %v, want %v", got, names)
	}
}
