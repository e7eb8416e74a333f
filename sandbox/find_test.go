package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nerdctlID is a container id as nerdctl makes them.
const nerdctlID = "2940e863f32ff9e81b5cf14592eb78083d271e51b99139085f9c970266d0fde2"

func TestMatch(t *testing.T) {
	dir := t.TempDir()
	nsA := filepath.Join(dir, "ns-a")
	nsB := filepath.Join(dir, "ns-b")
	for _, p := range []string{nsA, nsB} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A second path to ns-a's file, as /proc/PID/ns/net is to /run/netns/X.
	nsAlias := filepath.Join(dir, "alias")
	if err := os.Link(nsA, nsAlias); err != nil {
		t.Fatal(err)
	}
	states := []*State{
		{Key: "abc123-eth0", ID: "abc123", Name: "web", NetNS: nsA},
		{Key: "abd456-eth0", ID: "abd456", Name: "db", NetNS: nsB},
		{Key: "abd456-eth1", ID: "abd456", Name: "db", NetNS: nsB},
		// A name that is also a prefix of another container's id.
		{Key: "ffee99", ID: "ffee99", Name: "abc"},
		// nerdctl's <namespace>-<id>.
		{Key: "default-" + nerdctlID + "-eth0", ID: "default-" + nerdctlID},
	}
	tests := []struct {
		query   string
		want    string // key, or "" for an error
		errText string
	}{
		{"abc123-eth0", "abc123-eth0", ""},
		{"abc123", "abc123-eth0", ""},
		{"abc1", "abc123-eth0", ""},
		{"web", "abc123-eth0", ""},
		{"abc", "ffee99", ""}, // exact name wins over the id prefix
		{"ffe", "ffee99", ""},
		{"abd456-eth1", "abd456-eth1", ""},
		{nsA, "abc123-eth0", ""},
		{nsAlias, "abc123-eth0", ""},
		{dir + "/./ns-a", "abc123-eth0", ""},
		{"ab", "", "3 sandboxes match ab: abc123-eth0 (web), abd456-eth0 (db), abd456-eth1 (db)"},
		{"abd456", "", "2 sandboxes match abd456: abd456-eth0 (db), abd456-eth1 (db)"},
		{"db", "", "2 sandboxes match db"},
		{nsB, "", "2 sandboxes match " + nsB},
		{"zzz", "", "no sandbox matches zzz"},
		{"eth0", "", "no sandbox matches eth0"}, // not a prefix of anything
		{nerdctlID, "default-" + nerdctlID + "-eth0", ""},
		{nerdctlID[:12], "default-" + nerdctlID + "-eth0", ""},
		{"default-" + nerdctlID[:4], "default-" + nerdctlID + "-eth0", ""},
		{nerdctlID[1:13], "", "no sandbox matches"}, // not a prefix
		{filepath.Join(dir, "missing"), "", "no sandbox matches"},
		{"", "", "empty sandbox name"},
	}
	for _, tt := range tests {
		s, err := Match(states, tt.query)
		if tt.want != "" {
			if err != nil || s.Key != tt.want {
				t.Errorf("Match(%q) = %v, %v; want %s", tt.query, s, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.errText) {
			t.Errorf("Match(%q) = %v, %v; want error containing %q", tt.query, s, err, tt.errText)
		}
	}

	_, err := Match(states, "zzz")
	var nm *NoMatchError
	if !errors.As(err, &nm) || nm.Query != "zzz" {
		t.Errorf("no match: error %T %v, want *NoMatchError", err, err)
	}
	_, err = Match(states, "ab")
	var amb *AmbiguousError
	if !errors.As(err, &amb) || len(amb.Matches) != 3 {
		t.Errorf("ambiguous: error %T %v, want *AmbiguousError with 3 matches", err, err)
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []*State{{Key: "one", ID: "one", Name: "first"}, {Key: "two", ID: "two"}} {
		s.Dir = filepath.Join(dir, s.Key)
		if err := os.MkdirAll(s.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := s.save(); err != nil {
			t.Fatal(err)
		}
	}
	// Junk in the state dir is not a sandbox.
	os.MkdirAll(filepath.Join(dir, "junk"), 0o700)
	os.WriteFile(filepath.Join(dir, ".lock"), nil, 0o600)

	s, err := Find(dir, "first")
	if err != nil || s.Key != "one" || s.Dir != filepath.Join(dir, "one") {
		t.Fatalf("Find(first) = %+v, %v", s, err)
	}
	if _, err := Find(dir, "junk"); err == nil {
		t.Fatal("Find(junk) found a sandbox without state")
	}
	if _, err := Find(filepath.Join(dir, "nonexistent"), "one"); !errors.As(err, new(*NoMatchError)) {
		t.Fatalf("Find in a missing state dir: %v, want no match", err)
	}
}
