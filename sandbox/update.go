package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/proxy/launch"
)

// lockTimeout bounds how long an update waits for another one to finish.
const lockTimeout = 10 * time.Second

// Update reports what UpdatePolicy, EditPolicy or UpdateDirect did
// (UpdateDirect sets State and Changed only).
type Update struct {
	// State is the sandbox's state after the update.
	State *State
	// Old is the policy that was in force (nil if the live file did not
	// load, which the proxy treats as deny-all); New the one now written.
	Old, New *conf.Policy
	// Changed is false when New equals Old: nothing was written.
	Changed bool
	// Reload is true when the running proxy picks the change up from the
	// file (within a second, see proxy.PolicyWatcher) rather than having
	// been started or stopped by the update: a caller that wants to know
	// the change is in force can wait for the proxy's "policy loaded" line.
	Reload bool
	// ProxyStarted and ProxyStopped say that the mode left or entered
	// none, so the proxy and the redirect were added or removed.
	ProxyStarted, ProxyStopped bool
	// Notes are things the operator should know (the resolver the new
	// proxy uses when it could not be learned from an earlier one).
	Notes []string
}

// Policy reads the sandbox's live policy file, the policy its proxy
// applies. A file that does not load is an error (the proxy is then
// denying everything).
func (s *State) Policy() (*conf.Policy, error) {
	return conf.LoadFile(s.PolicyPath())
}

// UpdatePolicy puts p in force on the enforced sandbox key under stateDir:
// see EditPolicy. The live policy file may be unreadable: p replaces it.
func UpdatePolicy(stateDir, key string, p *conf.Policy) (*Update, error) {
	return host.updatePolicy(stateDir, key, p)
}

// updatePolicy is UpdatePolicy on sys.
func (sys *system) updatePolicy(stateDir, key string, p *conf.Policy) (*Update, error) {
	if p == nil {
		return nil, fmt.Errorf("update sandbox %s: no policy", key)
	}
	return sys.update(stateDir, key, false, func(*conf.Policy) (*conf.Policy, error) { return p, nil })
}

// EditPolicy changes the policy of the enforced sandbox key under stateDir
// to what edit makes of the live one, holding a lock on stateDir so that
// concurrent edits do not lose each other's changes. If edit fails,
// nothing changes. The live policy file must load: a file someone broke by
// hand is replaced with UpdatePolicy, not edited.
//
// The new policy file is written atomically. Within the modes that have a
// proxy (allowlist, open) that is all: the proxy reloads the file within a
// second and closes the established connections that lost permission. A
// change into mode none installs the deny-all ruleset (no redirect, one
// atomic batch) and then stops the proxy; a change out of it writes the
// file, starts a proxy on new listeners in the sandbox and only then swaps
// the deny-all ruleset for the redirecting one. The sandbox is therefore
// never without a ruleset, and when starting fails it stays in mode none.
func EditPolicy(stateDir, key string, edit func(cur *conf.Policy) (*conf.Policy, error)) (*Update, error) {
	return host.update(stateDir, key, true, edit)
}

// update loads sandbox key from stateDir on sys, under the state
// directory's lock, and moves it to the policy edit makes of the live one
// (see EditPolicy; needCurrent says the live one must load).
func (sys *system) update(stateDir, key string, needCurrent bool, edit func(*conf.Policy) (*conf.Policy, error)) (*Update, error) {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	unlock, err := lockDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("update sandbox %s: %w", key, err)
	}
	defer unlock()
	s, err := sys.load(stateDir, key)
	if err != nil {
		return nil, fmt.Errorf("update sandbox %s: %w", key, err)
	}
	if s.Unenforced != "" {
		return nil, fmt.Errorf("update sandbox %s: doorman does not enforce it (%s), so it has no policy to change", s.ID, s.Unenforced)
	}
	oldData, readErr := os.ReadFile(s.PolicyPath())
	var cur *conf.Policy
	if readErr == nil {
		cur, readErr = conf.ParseFile(oldData)
	}
	if readErr != nil && needCurrent {
		return nil, fmt.Errorf("sandbox %s: live policy file %s does not load, so its proxy denies everything; replace it whole: %w",
			key, s.PolicyPath(), readErr)
	}
	p, err := edit(cur)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("update sandbox %s: no policy", key)
	}
	if err := prepareInspect(s.CADir, p); err != nil {
		return nil, fmt.Errorf("update sandbox %s: %w", key, err)
	}
	u := &Update{State: s, Old: cur, New: p}
	// Nothing to do if the file already says it and the ruleset matches
	// (a file edited by hand into or out of mode none does not).
	if cur != nil && cur.Equal(p) && (s.Mode == conf.ModeNone) == (p.Mode == conf.ModeNone) {
		return u, nil
	}
	u.Changed = true
	if err := s.apply(p, oldData, u); err != nil {
		return nil, fmt.Errorf("update sandbox %s: %w", key, err)
	}
	return u, nil
}

// apply moves s to policy p; oldData is the live file before, restored if
// a proxy cannot be started.
func (s *State) apply(p *conf.Policy, oldData []byte, u *Update) error {
	wasNone := s.Mode == conf.ModeNone
	isNone := p.Mode == conf.ModeNone
	if wasNone != isNone && !s.NetNSCurrent() {
		// Entering or leaving mode none replaces the ruleset in the
		// namespace: never in one that is no longer the sandbox's.
		return s.errNetNSGone()
	}
	switch {
	case wasNone == isNone:
		if err := conf.WriteFileAtomic(s.PolicyPath(), p); err != nil {
			return err
		}
		u.Reload = !isNone && s.ProxyAlive()
		s.Mode = p.Mode
		s.relabel()
		return s.save()
	case isNone:
		u.ProxyStopped = true
		return s.enterNone(p)
	default:
		u.ProxyStarted = true
		return s.leaveNone(p, oldData, u)
	}
}

// enterNone switches a sandbox with a proxy to mode none: the proxy first
// applies the new file (it denies everything), then the deny-all ruleset
// replaces the redirecting one, then the proxy is stopped.
func (s *State) enterNone(p *conf.Policy) error {
	if err := conf.WriteFileAtomic(s.PolicyPath(), p); err != nil {
		return err
	}
	spec := s.spec()
	spec.DenyAll = true
	if err := s.sys().rules.Apply(s.NetNS, spec); err != nil {
		return fmt.Errorf("install the mode none ruleset (the proxy denies everything meanwhile): %w", err)
	}
	// A proxy that would not stop stays recorded, so that Teardown
	// still ends it.
	stopErr := s.stopProxy()
	s.Mode, s.Port4, s.Port6, s.DNSPort4, s.DNSPort6 = conf.ModeNone, 0, 0, 0, 0
	s.HostPort4, s.HostPort6, s.HostDNSPort4, s.HostDNSPort6 = 0, 0, 0, 0
	s.Stopped = false // mode none has no proxy to stop
	hostErr := s.reapplyHostLayer()
	s.relabel()
	if err := s.save(); err != nil {
		return err
	}
	return errors.Join(stopErr, hostErr)
}

// leaveNone switches a sandbox in mode none to mode allowlist or open: new
// file, new listeners and proxy, then the redirecting ruleset. On failure
// the deny-all ruleset and the old file stay (or are put back).
func (s *State) leaveNone(p *conf.Policy, oldData []byte, u *Update) (err error) {
	sys := s.sys()
	if err := sys.netns.Check(s.NetNS); err != nil {
		return err
	}
	// How the proxy was started is in the state (see migrate for what
	// earlier releases recorded).
	next := *s
	if next.ProxyBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the doorman binary: %w", err)
		}
		next.ProxyBinary = exe
		next.ProxyResolvers = ProxyResolversFor(nil, s.Resolvers)
		if len(next.ProxyResolvers) > 0 {
			u.Notes = append(u.Notes, fmt.Sprintf("no earlier proxy recorded its resolvers: the new proxy resolves names with the sandbox's, %s", joinAddrPorts(next.ProxyResolvers)))
		} else {
			u.Notes = append(u.Notes, "no earlier proxy recorded its resolvers, and the sandbox has none the proxy can reach: the new proxy resolves names with this host's /etc/resolv.conf")
		}
	}
	next.Mode = p.Mode
	applied := false
	defer func() {
		if err == nil {
			return
		}
		next.stopProxy()
		if applied {
			deny := s.spec()
			deny.DenyAll = true
			sys.rules.Apply(s.NetNS, deny)
		}
		if oldData != nil {
			writeAtomic(s.PolicyPath(), oldData, 0o644)
		}
	}()
	if err := conf.WriteFileAtomic(s.PolicyPath(), p); err != nil {
		return err
	}
	spawned, err := sys.proxies.Start(&next, next.makeCgroup(), workerServing)
	if err != nil {
		return err
	}
	if err := next.started(spawned); err != nil {
		return err
	}
	if err := sys.rules.Apply(s.NetNS, next.spec()); err != nil {
		return err
	}
	applied = true
	if err := next.reapplyHostLayer(); err != nil {
		return err
	}
	next.relabel()
	if err := next.save(); err != nil {
		return err
	}
	*s = next
	return nil
}

// UpdateDirect puts allowDirect and allowICMP in force on the enforced
// sandbox key under stateDir, holding the state directory's lock as
// UpdatePolicy does. The running proxy is first told to log the flows of
// the old and the new list, and waited for when the list grows (see
// logDirect; a proxy that does not confirm in time is a note in
// Update.Notes). The in-namespace ruleset is applied again with them
// (one atomic batch), then the host-side layer where the sandbox holds
// one, then the state is saved. A destination taken out is refused to new
// connections and packets once the ruleset that no longer lists it is in;
// flows the kernel already tracks as established go on until they end.
// When a step fails, the ruleset and the host-side layer are put back as
// they were and the state is not changed: nothing is half applied. The
// same values as now change nothing (Update.Changed false). The policy
// file is not touched (see UpdatePolicy); once the change is in, the
// proxy logs the new list's flows alone.
func UpdateDirect(stateDir, key string, allowDirect []conf.Direct, allowICMP bool) (*Update, error) {
	return host.updateDirect(stateDir, key, allowDirect, allowICMP)
}

// updateDirect is UpdateDirect on sys.
func (sys *system) updateDirect(stateDir, key string, allowDirect []conf.Direct, allowICMP bool) (*Update, error) {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	unlock, err := lockDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("update allowDirect of sandbox %s: %w", key, err)
	}
	defer unlock()
	s, err := sys.load(stateDir, key)
	if err != nil {
		return nil, fmt.Errorf("update allowDirect of sandbox %s: %w", key, err)
	}
	if s.Unenforced != "" {
		return nil, fmt.Errorf("update allowDirect of sandbox %s: doorman does not enforce it (%s), so it has no rules to change", s.ID, s.Unenforced)
	}
	u := &Update{State: s}
	if slices.Equal(s.AllowDirect, allowDirect) && s.AllowICMP == allowICMP {
		return u, nil
	}
	if err := s.applyDirect(allowDirect, allowICMP, &u.Notes); err != nil {
		return nil, fmt.Errorf("update allowDirect of sandbox %s: %w", key, err)
	}
	u.Changed = true
	return u, nil
}

// applyDirect moves s to allowDirect and allowICMP: the proxy told which
// flows to log, the ruleset, the host-side layer, the state; on failure
// the old ruleset and layer are applied again and s is left as it was.
// What the caller should know besides an error is added to notes.
func (s *State) applyDirect(allowDirect []conf.Direct, allowICMP bool, notes *[]string) (err error) {
	if !s.NetNSCurrent() {
		// Never replace the ruleset of a namespace that is no longer
		// the sandbox's.
		return s.errNetNSGone()
	}
	sys := s.sys()
	next := *s
	next.AllowDirect, next.AllowICMP = slices.Clone(allowDirect), allowICMP
	rulesApplied, layerTried := false, false
	defer func() {
		if err == nil {
			return
		}
		var undo []error
		if rulesApplied {
			if e := sys.rules.Apply(s.NetNS, s.spec()); e != nil {
				undo = append(undo, fmt.Errorf("put the old ruleset back: %w", e))
			}
		}
		if layerTried {
			// A failed Apply changes nothing, but one that failed
			// after the kernel took the batch may not say so.
			old := *s
			if e := old.reapplyHostLayer(); e != nil {
				undo = append(undo, fmt.Errorf("put the old host-side layer back: %w", e))
			}
		}
		if e := s.logDirect(s.AllowDirect); e != nil {
			undo = append(undo, e)
		}
		err = errors.Join(append([]error{err}, undo...)...)
	}()
	// The proxy logs the flows of both lists while the rules change.
	if err := s.logDirect(directUnion(s.AllowDirect, next.AllowDirect)); errors.Is(err, errDirectUnconfirmed) {
		*notes = append(*notes, err.Error()+": flows of the new destinations may have no line until it does")
	} else if err != nil {
		return err
	}
	if err := sys.rules.Apply(s.NetNS, next.spec()); err != nil {
		return fmt.Errorf("apply the ruleset: %w", err)
	}
	rulesApplied = true
	layerTried = next.HostLayer
	if err := next.reapplyHostLayer(); err != nil {
		return err
	}
	if err := next.save(); err != nil {
		return err
	}
	*s = next
	// Failing here leaves the proxy logging the union: more lines, none
	// lost.
	s.logDirect(s.AllowDirect)
	return nil
}

// Relabel records label as what the in-namespace rules of the enforced
// sandbox key under stateDir cover (see ComposeLabel), as when a
// container less covered than the sandbox's own joins its namespace.
// Nothing else of the sandbox changes.
func Relabel(stateDir, key, label string) (*State, error) {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	unlock, err := lockDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("relabel sandbox %s: %w", key, err)
	}
	defer unlock()
	s, err := Load(stateDir, key)
	if err != nil {
		return nil, fmt.Errorf("relabel sandbox %s: %w", key, err)
	}
	s.BaseLabel = label
	s.relabel()
	if err := s.save(); err != nil {
		return nil, fmt.Errorf("relabel sandbox %s: %w", key, err)
	}
	return s, nil
}

// joinAddrPorts lists addresses for a message.
func joinAddrPorts(aps []netip.AddrPort) string {
	s := make([]string, len(aps))
	for i, ap := range aps {
		s[i] = ap.String()
	}
	return strings.Join(s, ", ")
}

// lockDir takes an exclusive flock on dir, waiting up to lockTimeout.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock state dir: %w", err)
	}
	deadline := time.Now().Add(lockTimeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() {
				unix.Flock(int(f.Fd()), unix.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock state dir %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock state dir %s: another update has held it for %v", dir, lockTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// directConfirmTimeout bounds the wait for a running proxy to say it
// logs a widened allowDirect list (see logDirect).
const directConfirmTimeout = 2 * time.Second

// errDirectUnconfirmed is logDirect's error when the running proxy did not
// say in time that it logs the list: the rules may go on, with a note.
var errDirectUnconfirmed = errors.New("the proxy did not confirm in time that it logs the new allowDirect flows")

// logDirect tells the sandbox's running proxy which allowDirect flows to
// log: the config file its workers read (proxyConfigFile) gets list as its
// allowDirect, which a running worker follows (see proxy/daemon) and a
// restarted one starts with. When list holds a destination the old one
// did not, it waits until the proxy says it logs list
// (launch.DirectLoggedFile), so that the rules admitting it come after
// (errDirectUnconfirmed after directConfirmTimeout). A sandbox without a
// proxy config or a live proxy (mode none, a proxy an older doorman
// started) has nothing to tell.
func (s *State) logDirect(list []conf.Direct) error {
	path := filepath.Join(s.Dir, proxyConfigFile)
	cfg, err := launch.Load(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tell the proxy its allowDirect: %w", err)
	}
	if slices.Equal(cfg.AllowDirect, list) {
		return nil
	}
	grows := len(directUnion(cfg.AllowDirect, list)) > len(cfg.AllowDirect)
	old := cfg.AllowDirect
	cfg.AllowDirect = slices.Clone(list)
	if err := cfg.WriteFile(path); err != nil {
		return fmt.Errorf("tell the proxy its allowDirect: %w", err)
	}
	if !grows || s.Mode == conf.ModeNone || !s.ProxyAlive() {
		return nil
	}
	for deadline := time.Now().Add(directConfirmTimeout); ; {
		if got, err := launch.ReadDirectLogged(path); err == nil && slices.Equal(got, list) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (%q, then %q: %s)", errDirectUnconfirmed, conf.JoinDirect(old), conf.JoinDirect(list), launch.DirectLoggedFile(path))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// directUnion is old and then what of next old does not hold: the list a
// proxy logs while a change from old to next is applied, so that a flow
// either ruleset admits has its line.
func directUnion(old, next []conf.Direct) []conf.Direct {
	out := slices.Clone(old)
	for _, d := range next {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}
