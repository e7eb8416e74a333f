package sandbox

import (
	"github.com/doorman-net/doorman/conf"
)

// Holder says who holds the network namespace at nsPath, other than
// sandbox key: holder is the first sandbox recorded on that namespace whose
// enforcement runs there (its ruleset in place, and its proxy running,
// stopped by an operator, or the sandbox in mode none), or nil; stale are
// the others recorded on it, whose enforcement does not run (table gone,
// or proxy dead), oldest first. One network namespace has one doorman ruleset: the front doors
// ask before they enforce a sandbox there, and decide what a stale one
// means for them.
//
// A sandbox is recorded on the namespace its state's identity (nsfs device
// and inode) names, or, for a state recorded without one, the namespace
// its path names now. A namespace that cannot be read has no holder.
func Holder(stateDir, key, nsPath string) (holder *State, stale []*State) {
	return host.holder(stateDir, key, nsPath)
}

// holder is Holder on sys.
func (sys *system) holder(stateDir, key, nsPath string) (holder *State, stale []*State) {
	dev, ino, err := sys.netns.Identity(nsPath)
	if err != nil {
		return nil, nil
	}
	present, _ := sys.rules.Present(nsPath)
	states, _ := sys.list(stateDir)
	for _, s := range states {
		if s.Key == key || !s.recordedOn(dev, ino) {
			continue
		}
		if present && holder == nil && (s.Mode == conf.ModeNone || s.Stopped || s.ProxyAlive()) {
			holder = s
			continue
		}
		stale = append(stale, s)
	}
	return holder, stale
}

// recordedOn reports whether s was enforced in the namespace with nsfs
// device dev and inode ino.
func (s *State) recordedOn(dev, ino uint64) bool {
	sDev, sIno := s.NetNSDev, s.NetNSIno
	if sIno == 0 {
		var err error
		if sDev, sIno, err = s.sys().netns.Identity(s.NetNS); err != nil {
			return false
		}
	}
	return sDev == dev && sIno == ino
}
