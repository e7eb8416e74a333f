package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
)

// nsLink is a path that names one network namespace and then another, as
// /proc/PID/ns/net does when PID exits and is reused by a process in
// another namespace: a bind mount of the namespace file, moved by the test.
type nsLink struct {
	t    *testing.T
	path string
}

func newNSLink(t *testing.T, target string) *nsLink {
	t.Helper()
	l := &nsLink{t: t, path: filepath.Join(t.TempDir(), "net")}
	if err := os.WriteFile(l.path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l.point(target)
	t.Cleanup(func() { unix.Unmount(l.path, unix.MNT_DETACH) })
	return l
}

// point makes the link name the namespace at target.
func (l *nsLink) point(target string) {
	l.t.Helper()
	unix.Unmount(l.path, unix.MNT_DETACH)
	if err := unix.Mount(target, l.path, "", unix.MS_BIND, ""); err != nil {
		l.t.Fatalf("bind %s on %s: %v", target, l.path, err)
	}
}

// recordOn records a sandbox in mode none enforced in the namespace link
// names now, with the deny-all ruleset there.
func recordOn(t *testing.T, link *nsLink) (stateDir string, s *State) {
	t.Helper()
	stateDir, s = fakeSandbox(t, conf.ModeNone)
	s.NetNS, s.LogFile = link.path, filepath.Join(t.TempDir(), "s.log")
	var err error
	if s.NetNSDev, s.NetNSIno, err = netnsIdentity(link.path); err != nil {
		t.Fatal(err)
	}
	// Should a mode change get as far as starting a proxy, it starts one
	// that fails at once (the default would be this test binary).
	s.ProxyBinary = "/bin/false"
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	if err := enforce.Apply(link.path, enforce.Spec{DenyAll: true}); err != nil {
		t.Fatal(err)
	}
	return stateDir, s
}

// TestStaleNetNSPath: once a sandbox's recorded path names another
// namespace, doorman leaves that namespace's rules alone. Teardown does not
// remove them, a mode change is refused, Check says why, and the path no
// longer finds the sandbox; while the path still names the sandbox's own
// namespace, Teardown removes its rules.
func TestStaleNetNSPath(t *testing.T) {
	own, other := newNetNS(t, "own"), newNetNS(t, "other")
	if err := enforce.Apply(other, enforce.Spec{DenyAll: true}); err != nil {
		t.Fatal(err)
	}

	// The path still names the sandbox's namespace: its rules go.
	link := newNSLink(t, own)
	stateDir, s := recordOn(t, link)
	if !s.NetNSCurrent() {
		t.Fatal("NetNSCurrent: false for the namespace the sandbox was recorded in")
	}
	if err := Teardown(stateDir, s.Key); err != nil {
		t.Fatal(err)
	}
	if ok, err := enforce.Present(own); ok || err != nil {
		t.Errorf("the sandbox's own ruleset after Teardown: present %v, %v", ok, err)
	}

	// The path is moved to another namespace holding a doorman ruleset.
	stateDir, s = recordOn(t, link)
	link.point(other)
	if s.NetNSCurrent() {
		t.Error("NetNSCurrent: true after the path moved to another namespace")
	}
	want := "no longer is the sandbox's network namespace"
	_, err := EditPolicy(stateDir, s.Key, func(*conf.Policy) (*conf.Policy, error) {
		return conf.NewPolicy(conf.ModeAllowlist, []string{"api.example.test"})
	})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("leaving mode none through a moved path: %v, want an error saying %q", err, want)
	}
	if st, err := Load(stateDir, s.Key); err != nil || st.Mode != "none" {
		t.Errorf("state after the refused change: %+v, %v", st, err)
	}
	if err := Check(stateDir, s.Key); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Check: %v, want an error saying %q", err, want)
	}
	if _, err := Find(stateDir, other); err == nil {
		t.Errorf("Find(%s) found the sandbox, whose namespace it is not", other)
	}
	if err := Teardown(stateDir, s.Key); err != nil {
		t.Fatal(err)
	}
	if err := enforce.Check(other, enforce.Spec{DenyAll: true}); err != nil {
		t.Errorf("the other namespace's ruleset after Teardown of a sandbox whose path moved there: %v", err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("state left after Teardown: %v", err)
	}
}
