package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/runner"
	"github.com/doorman-net/doorman/sandbox"
)

// runEnv is a fake internet whose host namespace runs `doorman run`, with
// doorman's directories of its own. The run network is the default one
// (bridge doorman-run0, a documentation /27, masqueraded out of host), so DNS
// by name from inside the sandbox also proves the masquerading.
type runEnv struct {
	t                        *testing.T
	net                      *testnet.Net
	api, evil                *testnet.Host
	stateDir, logDir, runDir string
	caFile                   string
	names                    []string // every sandbox name run, for cleanUp
	// bin is the doorman binary run; "" for the one under test.
	bin string
}

func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	skipUnlessRoot(t)
	n := testnet.New(t)
	dir := t.TempDir()
	e := &runEnv{
		t:        t,
		net:      n,
		api:      n.AddHost(apiName, apiAddr4, apiAddr6),
		evil:     n.AddHost(evilName, evilAddr4, evilAddr6),
		stateDir: filepath.Join(dir, "state"),
		logDir:   filepath.Join(dir, "log"),
		runDir:   filepath.Join(dir, "run"),
	}
	e.caFile = n.WriteCA(dir)
	t.Cleanup(e.cleanUp)
	return e
}

// runName is a unique sandbox name for one `doorman run`.
func runName() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// cleanUp removes, after a failed test, what a run may have left: the
// sandboxes (their proxies) and the namespace mount points of names. The
// test's own checks report leftovers; this only keeps the machine clean.
func (e *runEnv) cleanUp() {
	states, _ := sandbox.List(e.stateDir)
	for _, s := range states {
		sandbox.Teardown(e.stateDir, s.Key)
	}
	for _, name := range e.names {
		path := "/run/netns/doorman-" + name
		syscall.Unmount(path, syscall.MNT_DETACH)
		os.Remove(path)
	}
}

// command is `doorman run --name name <dirs> flags... -- argv...` in host.
func (e *runEnv) command(ctx context.Context, name string, flags []string, argv ...string) *exec.Cmd {
	e.names = append(e.names, name)
	args := append([]string{"run", "--name", name,
		"--state-dir", e.stateDir, "--log-dir", e.logDir, "--run-dir", e.runDir}, flags...)
	if !slices.Contains(flags, "--subnet") {
		// Documentation addresses only (testnet keeps 198.51.100.128/25
		// free for the caller), never the private default.
		args = append(args, "--subnet", runTestSubnet)
	}
	args = append(append(args, "--"), argv...)
	bin := e.bin
	if bin == "" {
		bin = doormanBin()
	}
	return e.net.HostCommand(ctx, bin, args...)
}

// runResult is what one `doorman run` did.
type runResult struct {
	exit           int
	stdout, stderr string
}

func (r runResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.exit, r.stdout, r.stderr)
}

// run runs `doorman run` to its end.
func (e *runEnv) run(name string, flags []string, argv ...string) runResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, name, flags, argv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := runResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		r.exit = ee.ExitCode()
	default:
		e.t.Fatalf("doorman run: %v (stderr %q)", err, r.stderr)
	}
	return r
}

// started is a `doorman run` still running, whose command has said
// "ready" on its stdout.
type started struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr *bytes.Buffer
	ready  []string // the words after "ready" on the command's first line
}

// start starts `doorman run` and waits until the command prints "ready".
func (e *runEnv) start(name string, flags []string, argv ...string) *started {
	e.t.Helper()
	cmd := e.command(context.Background(), name, flags, argv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	s := &started{cmd: cmd, stdout: bufio.NewReader(out), stderr: new(bytes.Buffer)}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line := make(chan string, 1)
	go func() {
		l, _ := s.stdout.ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			e.t.Fatalf("doorman run: want \"ready\" from the command, got %q; stderr %q", l, s.stderr)
		}
		s.ready = f[1:]
	case <-time.After(30 * time.Second):
		e.t.Fatalf("doorman run: command not ready after 30s; stderr %q", s.stderr)
	}
	return s
}

// wait waits for a started run and returns its exit status and the rest
// of its stdout.
func (s *started) wait(t *testing.T) (int, string) {
	t.Helper()
	rest, _ := io.ReadAll(s.stdout)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("doorman run: %v", err)
		}
		return s.cmd.ProcessState.ExitCode(), string(rest)
	case <-time.After(30 * time.Second):
		t.Fatalf("doorman run did not end within 30s; stderr %q", s.stderr)
		return 0, ""
	}
}

// readyPID is the pid the command printed after "ready".
func readyPID(t *testing.T, s *started) int {
	t.Helper()
	var pid int
	if len(s.ready) == 0 {
		t.Fatal("the command printed no pid after ready")
	}
	if _, err := fmtSscan(s.ready[0], &pid); err != nil {
		t.Fatalf("pid %q: %v", s.ready[0], err)
	}
	return pid
}

// assertNothingLeft checks that no run left anything behind: no namespace
// for name, no link in host but lo and the uplink, no masquerade table, no
// sandbox state, no run record, no proxy process of this env.
func (e *runEnv) assertNothingLeft(names ...string) {
	e.t.Helper()
	for _, name := range names {
		if _, err := os.Stat("/run/netns/doorman-" + name); err == nil {
			e.t.Errorf("namespace /run/netns/doorman-%s left behind", name)
		}
	}
	err := e.net.InHost(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if n := l.Attrs().Name; n != "lo" && n != testnet.HostUplink {
				e.t.Errorf("link %s (%s) left behind in the host namespace", n, l.Type())
			}
		}
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err := c.ListTables()
		if err != nil {
			return err
		}
		for _, t := range tables {
			e.t.Errorf("nftables table %s left behind in the host namespace", t.Name)
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("inspect the host namespace: %v", err)
	}
	if states, _ := sandbox.List(e.stateDir); len(states) > 0 {
		for _, s := range states {
			e.t.Errorf("sandbox state left behind: %s (proxy %d)", s.Key, s.PID)
			sandbox.Teardown(e.stateDir, s.Key)
		}
	}
	if ents, _ := os.ReadDir(e.stateDir); len(ents) > 0 {
		e.t.Errorf("state directory not empty: %v", ents)
	}
	ents, _ := os.ReadDir(e.runDir)
	for _, ent := range ents {
		if ent.Name() != "lock" {
			e.t.Errorf("run directory holds %s after the runs", ent.Name())
		}
	}
	if pids := proxiesOf(e.stateDir); len(pids) > 0 {
		e.t.Errorf("proxy processes left running: %v", pids)
	}
}

// proxiesOf lists the `doorman proxy` processes whose command line names dir.
func proxiesOf(dir string) []int {
	var pids []int
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		data, _ := os.ReadFile(p)
		args := strings.Split(string(data), "\x00")
		if len(args) > 1 && args[1] == "proxy" && strings.Contains(string(data), dir) {
			var pid int
			fmtSscan(filepath.Base(filepath.Dir(p)), &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestRunAllowedAndDenied(t *testing.T) {
	e := newRunEnv(t)
	name := runName()
	allow := []string{"--allow", apiName}

	r := e.run(name, allow, "curl", "-sS", "--max-time", "8", "--cacert", e.caFile, "https://"+apiName+"/")
	if r.exit != 0 || !strings.HasPrefix(r.stdout, apiName+" ") {
		t.Fatalf("allowed HTTPS from inside doorman run: %v", r)
	}
	// The denied name does not resolve: the DNS filter (on by default)
	// refuses it. At its address, it gets the TLS alert.
	r = e.run(name, allow, "curl", "-sS", "--max-time", "8", "--cacert", e.caFile, "https://"+evilName+"/")
	if r.exit != 6 || !strings.Contains(r.stderr, "Could not resolve host: "+evilName) {
		t.Fatalf("denied name from inside doorman run: want curl's exit 6 (not resolved), got %v", r)
	}
	evilAt := evilName + ":443:" + evilAddr4.String()
	r = e.run(name, allow, "curl", "-sS", "--max-time", "8", "--cacert", e.caFile, "--resolve", evilAt, "https://"+evilName+"/")
	if r.exit != 35 || !strings.Contains(strings.ToLower(r.stderr), "access denied") {
		t.Fatalf("denied HTTPS from inside doorman run: want curl's exit 35 and a TLS access_denied alert, got %v", r)
	}
	if n := e.evil.Connections(testnet.PortHTTPS); n != 0 {
		t.Fatalf("the denied host accepted %d connections", n)
	}
	// The runs logged to the sandbox's decision log, under its name: the
	// connections, and the DNS filter's refusal.
	log, err := os.ReadFile(filepath.Join(e.logDir, name+"-eth0.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"` + apiName + `"`, `"verdict":"allow"`, `"name":"` + evilName + `"`, `"verdict":"deny"`} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("decision log lacks %s:\n%s", want, log)
		}
	}
	if !logHas(log, "dns", evilName, "deny") || !logHas(log, "connection", evilName, "deny") || !logHas(log, "dns", apiName, "allow") {
		t.Errorf("decision log lacks the dns deny, the connection deny of %s, or the dns allow of %s:\n%s", evilName, apiName, log)
	}

	// The same policy from a policy file; the command's resolv.conf
	// names only the resolvers doorman allows.
	policy := filepath.Join(t.TempDir(), "policy")
	os.WriteFile(policy, []byte("mode: allowlist\n"+apiName+":443\n"), 0o644)
	r = e.run(runName(), []string{"--policy", policy}, "sh", "-c",
		"cat /etc/resolv.conf && curl -sS --max-time 8 --cacert "+e.caFile+" https://"+apiName+"/")
	if r.exit != 0 || !strings.Contains(r.stdout, "nameserver "+e.net.DNS.String()+"\n") ||
		strings.Contains(r.stdout, e.net.DNS6.String()) || !strings.Contains(r.stdout, apiName+" ") {
		t.Fatalf("--policy: want resolv.conf naming only %s and the allowed fetch, got %v", e.net.DNS, r)
	}
	// Dual stack, DNS over IPv6 only: the IPv6 subnet is masqueraded too.
	r = e.run(runName(), []string{"--allow", apiName, "--subnet", runTestSubnet, "--subnet", "2001:db8:4::/64",
		"--dns", e.net.DNS6.String()}, "curl", "-6", "-sS", "--max-time", "8", "--cacert", e.caFile, "https://"+apiName+"/")
	if r.exit != 0 || !strings.HasPrefix(r.stdout, apiName+" ") {
		t.Fatalf("dual-stack run, IPv6 DNS and HTTPS: %v", r)
	}
	// --user: the command runs unprivileged, and is still under the policy.
	public, err := os.MkdirTemp("", "dm-run-ca-") // t.TempDir's parent is not world-readable
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(public)
	os.Chmod(public, 0o755)
	ca := e.net.WriteCA(public)
	r = e.run(runName(), []string{"--allow", apiName, "--user", "nobody"}, "sh", "-c",
		"id -u; curl -sS --max-time 8 --cacert "+ca+" https://"+apiName+"/ && curl -sS --max-time 8 --cacert "+ca+" --resolve "+evilAt+" https://"+evilName+"/")
	if r.exit != 35 || !strings.HasPrefix(r.stdout, "65534\n"+apiName+" ") || !strings.Contains(r.stderr, "access denied") {
		t.Fatalf("--user nobody: want uid 65534, the allowed fetch, then the denied one, got %v", r)
	}
	// Mode none: nothing leaves (at the address, so that the fetch is
	// tried whatever DNS does).
	r = e.run(runName(), []string{"--mode", "none", "--allow", apiName}, "curl", "-sS", "--max-time", "8", "--cacert", e.caFile,
		"--resolve", apiName+":443:"+apiAddr4.String(), "https://"+apiName+"/")
	if r.exit == 0 || r.exit == 6 {
		t.Fatalf("--mode none: the fetch succeeded (or was never tried): %v", r)
	}
	e.assertNothingLeft(name)
}

func TestRunExitStatus(t *testing.T) {
	e := newRunEnv(t)
	for _, tc := range []struct {
		argv []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM)},
		{[]string{"no-such-command-doorman"}, 127},
		{[]string{"/etc/hostname"}, 126},
	} {
		if r := e.run(runName(), []string{"--allow", apiName}, tc.argv...); r.exit != tc.want {
			t.Errorf("doorman run -- %s: want exit %d, got %v", strings.Join(tc.argv, " "), tc.want, r)
		}
	}
	// Bad input is refused before anything is made, naming the value.
	r := e.run(runName(), []string{"--allow", "https://" + apiName + "/"}, "true")
	if r.exit != 125 || !strings.Contains(r.stderr, "https://"+apiName+"/") {
		t.Errorf("bad --allow: want exit 125 naming the entry, got %v", r)
	}
	r = e.run(runName(), []string{"--subnet", "10.1.2.3/24"}, "true")
	if r.exit != 125 || !strings.Contains(r.stderr, "10.1.2.0/24") {
		t.Errorf("bad --subnet: want exit 125 suggesting 10.1.2.0/24, got %v", r)
	}
	e.assertNothingLeft()
}

func TestRunSignals(t *testing.T) {
	e := newRunEnv(t)
	allow := []string{"--allow", apiName}

	// SIGTERM: passed on; the command dies of it; doorman tears down and
	// exits 128+15.
	name := runName()
	s := e.start(name, allow, "sh", "-c", "echo ready; exec sleep 60")
	if _, err := os.Stat("/run/netns/doorman-" + name); err != nil {
		t.Fatalf("sandbox namespace while running: %v", err)
	}
	if len(proxiesOf(e.stateDir)) != 1 {
		t.Fatalf("want one proxy while running, have %v", proxiesOf(e.stateDir))
	}
	// doorman run takes the plugin's defaults: the DNS filter and the
	// host-side layer on the run network's veth.
	if states, err := sandbox.List(e.stateDir); err != nil || len(states) != 1 ||
		!states[0].DNSFilter || !states[0].HostLayer || states[0].Label != "full" {
		var got []string
		for _, s := range states {
			got = append(got, fmt.Sprintf("%s: dnsFilter %v hostLayer %v label %q", s.Key, s.DNSFilter, s.HostLayer, s.Label))
		}
		t.Errorf("sandbox while running: want one, with both layers and label full; got %q (%v)", got, err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := s.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("SIGTERM: want exit %d, got %d; stderr %q", 128+int(syscall.SIGTERM), code, s.stderr)
	}
	e.assertNothingLeft(name)

	// SIGINT: the command handles it and chooses its exit status; what it
	// left running in the sandbox goes with the sandbox.
	name = runName()
	s = e.start(name, allow, "sh", "-c", `trap 'echo got-INT; exit 5' INT; sleep 60 >/dev/null 2>&1 & echo ready $!; wait`)
	s.cmd.Process.Signal(syscall.SIGINT)
	code, out := s.wait(t)
	if code != 5 || !strings.Contains(out, "got-INT") {
		t.Errorf("SIGINT: want the command's trap to run and exit 5, got exit %d, stdout %q, stderr %q", code, out, s.stderr)
	}
	waitGone(t, readyPID(t, s)) // the command's background sleep went with the sandbox
	e.assertNothingLeft(name)
}

// TestRunKilled: a `doorman run` killed with SIGKILL cannot clean up; its
// command dies with it, and the next run reaps what it left.
func TestRunKilled(t *testing.T) {
	e := newRunEnv(t)
	name := runName()
	s := e.start(name, nil, "sh", "-c", "echo ready $$; exec sleep 60")
	s.cmd.Process.Kill()
	s.cmd.Wait()
	waitGone(t, readyPID(t, s)) // the command died with its `doorman run`
	if len(proxiesOf(e.stateDir)) != 1 {
		t.Fatalf("want the killed run's proxy still there, have %v", proxiesOf(e.stateDir))
	}
	r := e.run(runName(), nil, "true")
	if r.exit != 0 || !strings.Contains(r.stderr, "reaped run "+name) {
		t.Fatalf("the next run: want it to reap %s, got %v", name, r)
	}
	e.assertNothingLeft(name)
}

// TestRunConcurrent: runs share the bridge; one ending does not take it
// from another, and the last removes it.
func TestRunConcurrent(t *testing.T) {
	e := newRunEnv(t)
	gate := filepath.Join(t.TempDir(), "go")
	first := runName()
	s := e.start(first, []string{"--allow", apiName}, "sh", "-c",
		"echo ready; while [ ! -e "+gate+" ]; do sleep 0.05; done; curl -sS --max-time 8 --cacert "+e.caFile+" https://"+apiName+"/")
	if r := e.run(runName(), nil, "true"); r.exit != 0 {
		t.Fatalf("second run: %v", r)
	}
	err := e.net.InHost(func() error {
		_, err := netlink.LinkByName(runner.DefaultBridge)
		return err
	})
	if err != nil {
		t.Fatalf("the second run's end removed the bridge the first still uses: %v", err)
	}
	os.WriteFile(gate, nil, 0o644)
	if code, out := s.wait(t); code != 0 || !strings.HasPrefix(out, apiName+" ") {
		t.Fatalf("first run after the second ended: exit %d, stdout %q, stderr %q", code, out, s.stderr)
	}
	e.assertNothingLeft(first)
}

// TestDemo runs what `make demo` runs.
func TestDemo(t *testing.T) {
	skipUnlessRoot(t)
	demo := filepath.Join(t.TempDir(), "doorman-demo")
	build := exec.Command("go", "build", "-o", demo, "github.com/doorman-net/doorman/integration/demo")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	for _, client := range []string{"curl", "builtin"} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, demo, "--doorman", doormanBin(), "--client", client).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("demo (--client %s): %v\n%s", client, err, out)
		}
		if bytes.Contains(out, []byte("UNEXPECTED")) {
			t.Errorf("demo (--client %s) saw something unexpected:\n%s", client, out)
		}
		// The blocked name is refused at DNS, and by the proxy when
		// reached at its address.
		for _, want := range []string{"hello from allowed.demo.test", "access denied", `"verdict":"allow"`, `"verdict":"deny"`,
			`"msg":"dns"`, `"rcode":"REFUSED"`,
			"--resolve blocked.demo.test:", "none is left"} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("demo (--client %s) output lacks %q:\n%s", client, want, out)
			}
		}
		// The demo's own namespaces are gone once it has ended.
		for _, ns := range regexp.MustCompile(`dm-demo-(inet|host)-[0-9a-f]+`).FindAll(out, -1) {
			if _, err := os.Stat(filepath.Join("/run/netns", string(ns))); err == nil {
				t.Errorf("demo (--client %s) left namespace %s", client, ns)
			}
		}
	}
}

// logHas reports whether the JSON-lines log has a record with message msg
// (connection, dns) for name (a trailing dot ignored) with verdict.
func logHas(log []byte, msg, name, verdict string) bool {
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg && m["verdict"] == verdict &&
			strings.TrimSuffix(fmt.Sprint(m["name"]), ".") == name {
			return true
		}
	}
	return false
}

// runTestSubnet is the run network in these tests: documentation addresses.
const runTestSubnet = "198.51.100.224/27"
