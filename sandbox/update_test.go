package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
)

// fakeSandbox records a sandbox in allowlist mode whose proxy is not
// running: edits within the proxy modes only touch files.
func fakeSandbox(t *testing.T, mode conf.Mode, entries ...string) (stateDir string, s *State) {
	t.Helper()
	stateDir = t.TempDir()
	s = &State{Key: "ctr1-eth0", ID: "ctr1", Runtime: "cni", NetNS: "/nonexistent/netns", Mode: mode, Label: "full"}
	s.Dir = filepath.Join(stateDir, s.Key)
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p, err := conf.NewPolicy(mode, entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := conf.WriteFileAtomic(s.PolicyPath(), p); err != nil {
		t.Fatal(err)
	}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	return stateDir, s
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestEditPolicy(t *testing.T) {
	stateDir, s := fakeSandbox(t, conf.ModeAllowlist, "api.example.test")
	before := readFile(t, s.PolicyPath())

	// A failing edit changes nothing.
	_, err := EditPolicy(stateDir, s.Key, func(*conf.Policy) (*conf.Policy, error) {
		return conf.NewPolicy(conf.ModeAllowlist, []string{"api.example.test", "bad entry"})
	})
	if err == nil || !strings.Contains(err.Error(), `"bad entry"`) {
		t.Fatalf("bad edit: err = %v, want one naming the entry", err)
	}
	if got := readFile(t, s.PolicyPath()); got != before {
		t.Fatalf("bad edit changed the file:\n%s", got)
	}

	// An edit sees the live policy and writes the new one.
	u, err := EditPolicy(stateDir, s.Key, func(cur *conf.Policy) (*conf.Policy, error) {
		if got := cur.Hosts(); len(got) != 1 || got[0] != "api.example.test" {
			t.Errorf("edit saw %v", got)
		}
		return conf.NewPolicy(conf.ModeOpen, append(cur.Hosts(), "*.example.org:443"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if !u.Changed || u.Reload || u.ProxyStarted || u.ProxyStopped {
		t.Errorf("update %+v: want changed, nothing else (no proxy runs)", u)
	}
	got, err := s.Policy()
	if err != nil || got.Mode != conf.ModeOpen || strings.Join(got.Hosts(), " ") != "api.example.test *.example.org:443" {
		t.Fatalf("policy after edit: %v, %v", got, err)
	}
	if st, _ := Load(stateDir, s.Key); st.Mode != "open" {
		t.Errorf("state mode %q after the edit, want open", st.Mode)
	}

	// The same policy again: nothing is written.
	mtime := func() int64 { fi, _ := os.Stat(s.PolicyPath()); return fi.ModTime().UnixNano() }
	m0 := mtime()
	u, err = UpdatePolicy(stateDir, s.Key, got)
	if err != nil || u.Changed {
		t.Fatalf("same policy: %+v, %v; want unchanged", u, err)
	}
	if mtime() != m0 {
		t.Error("same policy rewrote the file")
	}

	// Unknown sandbox.
	if _, err := UpdatePolicy(stateDir, "nope", got); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unknown sandbox: %v, want not exist", err)
	}
}

func TestEditPolicyBrokenFile(t *testing.T) {
	stateDir, s := fakeSandbox(t, conf.ModeAllowlist)
	os.WriteFile(s.PolicyPath(), []byte("mode: allowlist\nhttps://x.example/\n"), 0o644)
	_, err := EditPolicy(stateDir, s.Key, func(cur *conf.Policy) (*conf.Policy, error) {
		t.Error("edit called with a policy that does not load")
		return cur, nil
	})
	if err == nil || !strings.Contains(err.Error(), "does not load") {
		t.Fatalf("edit of a broken file: %v", err)
	}
	// Replacing it whole works.
	p, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"x.example"})
	if _, err := UpdatePolicy(stateDir, s.Key, p); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Policy(); err != nil || !got.Equal(p) {
		t.Fatalf("after replace: %v, %v", got, err)
	}
}

// Concurrent edits are serialized: none is lost.
func TestEditPolicyConcurrent(t *testing.T) {
	stateDir, s := fakeSandbox(t, conf.ModeAllowlist)
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := EditPolicy(stateDir, s.Key, func(cur *conf.Policy) (*conf.Policy, error) {
				return conf.NewPolicy(cur.Mode, append(cur.Hosts(), fmt.Sprintf("h%d.example.test", i)))
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := s.Policy()
	if err != nil || len(got.Entries) != n {
		t.Fatalf("after %d concurrent edits: %v, %v", n, got, err)
	}
}

// Leaving mode none needs a namespace; when it is gone nothing changes.
func TestLeaveNoneFailsClosed(t *testing.T) {
	stateDir, s := fakeSandbox(t, conf.ModeNone, "api.example.test")
	before := readFile(t, s.PolicyPath())
	_, err := EditPolicy(stateDir, s.Key, func(cur *conf.Policy) (*conf.Policy, error) {
		return &conf.Policy{Mode: conf.ModeAllowlist, Entries: cur.Entries}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/netns") {
		t.Fatalf("leave none without a netns: %v", err)
	}
	if got := readFile(t, s.PolicyPath()); got != before {
		t.Fatalf("failed switch changed the file:\n%s", got)
	}
	if st, _ := Load(stateDir, s.Key); st.Mode != "none" || st.PID != 0 {
		t.Fatalf("failed switch changed the state: %+v", st)
	}
}

func TestFlagValues(t *testing.T) {
	args := []string{"/usr/bin/doorman", "proxy", "--sandbox", "resolver", "--resolver", "192.0.2.53:53", "--log", "f", "-resolver=[2001:db8::53]:53"}
	if got := flagValues(args, "resolver"); !slices.Equal(got, []string{"192.0.2.53:53", "[2001:db8::53]:53"}) {
		t.Errorf("--resolver v and -resolver=v: %q", got)
	}
	if got := flagValues([]string{"proxy", "--sandbox", "x"}, "resolver"); got != nil {
		t.Errorf("absent: %q", got)
	}
}

// An older doorman's launch record says how the proxy of a state
// recorded before proxyBinary was started: Load reads its resolvers, in
// both of its forms (a list, or one "resolver"); the next proxy is this
// binary's, which takes a config file.
func TestLoadOlderLaunchRecord(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stateDir, s := fakeSandbox(t, conf.ModeNone)
	writeOlderState(t, s, nil)
	if got, err := Load(stateDir, s.Key); err != nil || got.ProxyBinary != "" || got.ProxyResolvers != nil {
		t.Fatalf("no launch record: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		record string
		want   []netip.AddrPort
	}{
		{`{"binary":"/usr/bin/doorman","resolvers":["203.0.113.53:53","[2001:db8::53]:53"]}`, addrPorts("203.0.113.53:53", "[2001:db8::53]:53")},
		{`{"binary":"/usr/bin/doorman","resolver":"203.0.113.53:53"}`, addrPorts("203.0.113.53:53")},
	} {
		os.WriteFile(filepath.Join(s.Dir, launchFile), []byte(tc.record), 0o600)
		got, err := Load(stateDir, s.Key)
		if err != nil || got.ProxyBinary != self || !slices.Equal(got.ProxyResolvers, tc.want) {
			t.Errorf("launch record %s: %+v, %v; want %v, started by this binary (%s)", tc.record, got, err, tc.want, self)
		}
	}
}

// A proxy started by an older doorman that recorded nothing of how says
// it on its command line: Load reads every --resolver of it while it runs.
func TestLoadOlderRunningProxy(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 60; :", "proxy", "--sandbox", "x", "--resolver", "203.0.113.53:53", "--resolver=[2001:db8::53]:5353")
	// The shell forks sleep: a group of their own lets the cleanup kill
	// both, so no sleep outlives the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	stateDir, s := fakeSandbox(t, conf.ModeAllowlist)
	start, err := processStart(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	writeOlderState(t, s, map[string]any{"pid": cmd.Process.Pid, "pidStart": start})
	// Start returns once the exec is under way; the new command line is
	// there a moment later.
	want := addrPorts("203.0.113.53:53", "[2001:db8::53]:5353")
	var got *State
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got, err = Load(stateDir, s.Key); err != nil {
			t.Fatal(err)
		}
		if slices.Equal(got.ProxyResolvers, want) {
			break
		}
	}
	if !slices.Equal(got.ProxyResolvers, want) || got.ProxyBinary == "" {
		t.Errorf("older running proxy: binary %q, resolvers %v; want the binary and %v", got.ProxyBinary, got.ProxyResolvers, want)
	}
}

func addrPorts(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, netip.MustParseAddrPort(s))
	}
	return out
}

func TestProxyStarted(t *testing.T) {
	s := &State{PID: os.Getpid()}
	var err error
	if s.PIDStart, err = processStart(s.PID); err != nil {
		t.Fatal(err)
	}
	started, err := s.ProxyStarted()
	if err != nil {
		t.Fatal(err)
	}
	// This test process started moments ago (btime has 1 s resolution).
	if d := time.Since(started); d < -time.Second || d > 10*time.Minute {
		t.Errorf("this process started %v ago?", d)
	}
	if _, err := (&State{}).ProxyStarted(); err == nil {
		t.Error("no proxy: want an error")
	}
}

// newNetNS makes a throwaway named netns, deleted when the test ends.
func newNetNS(t *testing.T, purpose string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var b [4]byte
	rand.Read(b[:])
	name := fmt.Sprintf("dm-%s-%s", purpose, hex.EncodeToString(b[:]))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return filepath.Join("/var/run/netns", name)
}

// A proxy that will not start leaves the sandbox as it was: deny-all
// ruleset, old policy file, state in mode none.
func TestLeaveNoneProxyFails(t *testing.T) {
	nsPath := newNetNS(t, "update")
	stateDir, s := fakeSandbox(t, conf.ModeNone, "api.example.test")
	s.NetNS, s.LogFile = nsPath, filepath.Join(t.TempDir(), "s.log")
	s.ProxyBinary = "/bin/false"
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	denyAll := enforce.Spec{DenyAll: true}
	if err := enforce.Apply(nsPath, denyAll); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, s.PolicyPath())
	_, err := EditPolicy(stateDir, s.Key, func(cur *conf.Policy) (*conf.Policy, error) {
		return &conf.Policy{Mode: conf.ModeAllowlist, Entries: cur.Entries}, nil
	})
	if err == nil || !(strings.Contains(err.Error(), "proxy exited before serving") || strings.Contains(err.Error(), "did not signal ready")) {
		t.Fatalf("start /bin/false as the proxy: %v", err)
	}
	if got := readFile(t, s.PolicyPath()); got != before {
		t.Errorf("policy file not restored:\n%s", got)
	}
	if st, _ := Load(stateDir, s.Key); st.Mode != "none" || st.PID != 0 || st.Port4 != 0 {
		t.Errorf("state changed: %+v", st)
	}
	if err := enforce.Check(nsPath, denyAll); err != nil {
		t.Errorf("deny-all ruleset not in place: %v", err)
	}
}

// Relabel changes the label and nothing else.
func TestRelabel(t *testing.T) {
	stateDir, s := fakeSandbox(t, conf.ModeAllowlist, "api.example.test")
	s.DNSFilter, s.AllowDirect = true, []conf.Direct{{Prefix: netip.MustParsePrefix("203.0.113.7/32")}}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	policy := readFile(t, s.PolicyPath())
	const raw = "partial (container holds CAP_NET_RAW)"
	if _, err := Relabel(stateDir, s.Key, raw); err != nil {
		t.Fatal(err)
	}
	got, err := Load(stateDir, s.Key)
	if err != nil || got.BaseLabel != raw || got.Label != raw || len(got.AllowDirect) != 1 || !got.DNSFilter {
		t.Errorf("after Relabel: %+v, %v", got, err)
	}
	if readFile(t, s.PolicyPath()) != policy {
		t.Error("Relabel rewrote the policy")
	}
	if _, err := Relabel(stateDir, "nope", raw); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unknown sandbox: %v", err)
	}
}
