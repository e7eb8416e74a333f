package decisionlog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.log")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Decision, 16)
	done := make(chan error, 1)
	// The log does not exist yet.
	go func() {
		done <- Follow(ctx, path, 0, func(d Decision) error { got <- d; return nil })
	}()
	next := func(what string) Decision {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(3 * time.Second):
			t.Fatalf("%s: no decision", what)
		}
		return Decision{}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case d := <-got:
			t.Fatalf("%s: unexpected decision %+v", what, d)
		case <-time.After(3 * followPoll):
		}
	}

	appendFile(t, path, lineAllow+"\n"+lineEvent+"\n")
	if d := next("created"); d.Verdict != Allow {
		t.Fatalf("first: %+v", d)
	}
	// A line written in two parts is handed on once, whole.
	appendFile(t, path, lineDeny[:50])
	quiet("half a line")
	appendFile(t, path, lineDeny[50:]+"\n")
	if d := next("completed line"); d.Name != "evil.example.test" {
		t.Fatalf("completed line: %+v", d)
	}
	// Truncated: start over.
	if err := os.WriteFile(path, []byte(lineError+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d := next("truncated"); d.Verdict != Error {
		t.Fatalf("after truncation: %+v", d)
	}
	// Rotated: the old file moves away, a new one takes its name.
	os.Rename(path, path+".1")
	appendFile(t, path+".1", lineDeny+"\n") // still written to the old file
	appendFile(t, path, lineAllow+"\n"+lineAllow+"\n")
	verdicts := []string{next("rotated").Verdict, next("rotated").Verdict, next("rotated").Verdict}
	if strings.Join(verdicts, " ") != "deny allow allow" {
		t.Fatalf("around rotation: %v", verdicts)
	}
	quiet("nothing more")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestFollowFromOffset(t *testing.T) {
	path := writeLog(t, lineAllow+"\n", lineDeny+"\n")
	_, off, _ := ReadFile(path, Filter{})
	appendFile(t, path, lineError+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []string
	err := Follow(ctx, path, off, func(d Decision) error {
		got = append(got, d.Verdict)
		cancel()
		return nil
	})
	if err != nil || strings.Join(got, " ") != "error" {
		t.Fatalf("from offset: %v, %v", got, err)
	}
}
