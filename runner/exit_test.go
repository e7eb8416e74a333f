package runner

import (
	"errors"
	"os/exec"
	"testing"
)

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 255", 255},
		{"kill -TERM $$", 143},
		{"kill -KILL $$", 137},
	} {
		err := exec.Command("sh", "-c", tc.script).Run()
		if got := ExitStatus(err); got != tc.want {
			t.Errorf("sh -c %q: ExitStatus(%v) = %d, want %d", tc.script, err, got, tc.want)
		}
	}
	if got := ExitStatus(errors.New("wait: something else")); got != 1 {
		t.Errorf("a non-exit error: got %d, want 1", got)
	}
}
