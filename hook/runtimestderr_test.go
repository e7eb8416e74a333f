package hook

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReportVia checks that a refusal reaches the runtime's stderr and log
// when the hook's own stderr is /dev/null (crun), and nothing is written
// when it is not (runc keeps a hook's stderr itself).
func TestReportVia(t *testing.T) {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	refusal := errors.New(`doorman: container c1 not started: annotation doorman.io/allowed-hosts: "a*b.com": bad`)

	for _, tc := range []struct {
		name     string
		own      func(dir string) *os.File
		reported bool
	}{
		{"stderr on /dev/null", func(string) *os.File { return devNull }, true},
		{"stderr kept", func(dir string) *os.File {
			f, err := os.Create(filepath.Join(dir, "own"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stderrFile, logFile := filepath.Join(dir, "stderr"), filepath.Join(dir, "oci-log")
			const earlier = "an earlier line\n"
			if err := os.WriteFile(stderrFile, []byte(earlier), 0o644); err != nil {
				t.Fatal(err)
			}
			// crun's arguments as conmon gives them for Podman.
			args := []string{"--log-format=json", "--log", logFile, "create", "--bundle", "/b", "c1"}
			reportVia(refusal, tc.own(dir), stderrFile, args)

			gotStderr, _ := os.ReadFile(stderrFile)
			gotLog, _ := os.ReadFile(logFile)
			if !tc.reported {
				if string(gotStderr) != earlier || len(gotLog) != 0 {
					t.Errorf("wrote to the runtime although the hook's stderr is kept: stderr %q, log %q", gotStderr, gotLog)
				}
				return
			}
			if want := earlier + refusal.Error() + "\n"; string(gotStderr) != want {
				t.Errorf("runtime stderr %q, want %q (appended)", gotStderr, want)
			}
			var line struct{ Level, Msg string }
			if err := json.Unmarshal(gotLog, &line); err != nil || line.Level != "error" || line.Msg != refusal.Error() {
				t.Errorf("runtime log %q: want one JSON error line with the refusal (%v)", gotLog, err)
			}
		})
	}
}

// TestReportViaNullRuntimeStderr checks that nothing fails where the
// runtime's stderr is missing or /dev/null too.
func TestReportViaNullRuntimeStderr(t *testing.T) {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	reportVia(errors.New("x"), devNull, os.DevNull, nil)
	missing := filepath.Join(t.TempDir(), "missing")
	reportVia(errors.New("x"), devNull, missing, nil)
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("created the missing stderr file: %v", err)
	}
}

func TestRuntimeArgs(t *testing.T) {
	cmdline := []byte(strings.Join([]string{"/usr/bin/crun", "--log-format=json", "--log", "/x/oci-log", "create", "c1"}, "\x00") + "\x00")
	if got, want := runtimeArgs(cmdline), []string{"--log-format=json", "--log", "/x/oci-log", "create", "c1"}; !slices.Equal(got, want) {
		t.Errorf("runtimeArgs = %q, want %q", got, want)
	}
	if got := runtimeArgs(nil); got != nil {
		t.Errorf("runtimeArgs(nil) = %q", got)
	}
}
