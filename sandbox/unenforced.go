package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/doorman-net/doorman/hostconf"
)

// LabelUnenforced is the label of an attachment recorded by
// RecordUnenforced: "n/a (<why>)".
func LabelUnenforced(why string) string { return "n/a (" + why + ")" }

// RecordUnenforced records attachment a as one the front door passes
// through on purpose (a pod in a namespace the CNI configuration
// excludes), why saying so ("excluded namespace"): a state with
// Unenforced set and the label LabelUnenforced(why), and nothing else.
// No proxy, policy file, ruleset or host-side layer is made, and the
// namespace is left as it is. List, Find and the CLI show it; Teardown
// removes the record; Check finds it as recorded; UpdatePolicy and
// EditPolicy refuse it; Holder never counts it as holding a namespace.
// A sandbox already enforced under a.Key is torn down first.
func RecordUnenforced(stateDir string, a Attachment, why string) (*State, error) {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	if a.ID == "" {
		a.ID = a.Key
	}
	if err := ValidKey(a.Key); err != nil {
		return nil, err
	}
	if old, err := Load(stateDir, a.Key); err == nil && old.Unenforced == "" {
		if err := Teardown(stateDir, a.Key); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(stateDir, a.Key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("record sandbox %s: %w", a.Key, err)
	}
	label := LabelUnenforced(why)
	s := &State{
		Key: a.Key, ID: a.ID, Name: a.Name, PodUID: a.PodUID, CgroupParent: a.CgroupParent, Runtime: a.Runtime,
		Network: a.Network, IfName: a.IfName, NetNS: a.NetNS, Label: label, BaseLabel: label, Unenforced: why,
		Created: time.Now().UTC(), Dir: dir,
	}
	if a.NetNS != "" {
		// The identity, as for an enforced sandbox, so that the CLI can
		// tell this namespace is accounted for.
		s.NetNSDev, s.NetNSIno, _ = netnsIdentity(a.NetNS)
	}
	if err := s.save(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("record sandbox %s: %w", a.Key, err)
	}
	return s, nil
}
