package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
)

// record writes a state of sandbox key in mode m, recorded on the
// namespace at nsPath, under stateDir.
func record(t *testing.T, stateDir, key string, m conf.Mode, nsPath string) {
	t.Helper()
	s := &State{Key: key, ID: key, Runtime: "hook", NetNS: nsPath, Mode: m, Dir: filepath.Join(stateDir, key)}
	var err error
	if s.NetNSDev, s.NetNSIno, err = netnsIdentity(nsPath); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
}

// Holder names the sandbox whose enforcement runs in a namespace, and the
// stale records on it, never the asker's own, never another namespace's.
func TestHolder(t *testing.T) {
	nsPath, other := newNetNS(t, "holder"), newNetNS(t, "other")
	stateDir := t.TempDir()
	record(t, stateDir, "stale", conf.ModeAllowlist, nsPath) // no proxy runs
	record(t, stateDir, "live", conf.ModeNone, nsPath)
	record(t, stateDir, "elsewhere", conf.ModeNone, other)

	// No table yet: nobody's enforcement runs there.
	if h, stale := Holder(stateDir, "me", nsPath); h != nil || len(stale) != 2 {
		t.Errorf("without a table: holder %v, stale %d; want none and 2", h, len(stale))
	}
	if err := enforce.Apply(nsPath, enforce.Spec{DenyAll: true}); err != nil {
		t.Fatal(err)
	}
	h, stale := Holder(stateDir, "me", nsPath)
	if h == nil || h.Key != "live" || len(stale) != 1 || stale[0].Key != "stale" {
		t.Errorf("holder %v, stale %v; want live, [stale]", h, stale)
	}
	if h, _ := Holder(stateDir, "live", nsPath); h != nil {
		t.Errorf("a sandbox is not its own holder: %v", h.Key)
	}
	if h, stale := Holder(stateDir, "me", filepath.Join(t.TempDir(), "gone")); h != nil || stale != nil {
		t.Errorf("a namespace that is not there: %v, %v", h, stale)
	}
}
