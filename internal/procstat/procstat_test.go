package procstat

import (
	"os"
	"os/exec"
	"testing"
)

func TestParse(t *testing.T) {
	// A command name with spaces and parentheses, as a process may set.
	line := "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n"
	st, err := parse(line)
	if err != nil || st.State != 'S' || st.Start != 987654 || st.Exited() {
		t.Errorf("parse: %+v, %v; want S, start 987654", st, err)
	}
	if st, _ := parse("1 (z) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n"); !st.Exited() {
		t.Errorf("a zombie: %+v", st)
	}
	for _, bad := range []string{"", "1 no parenthesis", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 notanumber 0 0"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}

// Read names one process by its start time: this one's is stable, a
// child's differs once reaped and gone.
func TestRead(t *testing.T) {
	a, err := Read(os.Getpid())
	if err != nil || a.Exited() {
		t.Fatalf("this process: %+v, %v", a, err)
	}
	if b, err := Read(os.Getpid()); err != nil || b.Start != a.Start {
		t.Errorf("read again: %+v, %v; want start %d", b, err, a.Start)
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(cmd.Process.Pid); err == nil {
		t.Errorf("a reaped child still reads")
	}
}
