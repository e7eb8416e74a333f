// Command doorman-demo is what `make demo` runs: a self-contained tour of
// doorman on a machine with no network. It builds a fake internet in
// throwaway network namespaces — two HTTPS sites, allowed.demo.test and
// blocked.demo.test, and a DNS server, all on documentation addresses — and
// a namespace playing this machine. There it runs
//
//	doorman run --allow allowed.demo.test -- curl https://allowed.demo.test/
//	doorman run --allow allowed.demo.test -- curl https://blocked.demo.test/
//	doorman run --allow allowed.demo.test -- curl --resolve blocked.demo.test:443:203.0.113.20 https://blocked.demo.test/
//
// The second fails at DNS: doorman's DNS filter answers REFUSED for a name
// the policy cannot admit. The third skips DNS and connects to the blocked
// site's address with its name as SNI: doorman's proxy reads the name and
// refuses the connection with a TLS access_denied alert. The demo prints
// what the client saw, what the sites and the resolver saw, the decision
// log, and proof that nothing was left behind, then deletes everything. The root network namespace is never
// changed and the fake internet has no route out, so no packet leaves the
// machine. curl is used if installed, else the demo's own client
// (`doorman-demo fetch`). Needs root.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The demo's policy allows this one site.
const (
	allowedName = "allowed.demo.test"
	blockedName = "blocked.demo.test"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fetch" {
		os.Exit(fetch(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(demo(os.Args[1:], os.Stdout, os.Stderr))
}

func demo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	self, _ := os.Executable()
	doorman := fs.String("doorman", filepath.Join(filepath.Dir(self), "doorman"), "the doorman binary (its CNI plugins next to it)")
	client := fs.String("client", "auto", "HTTPS client inside the sandbox: curl, builtin, or auto (curl if installed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "doorman-demo: needs root (it makes network namespaces): sudo make demo")
		return 1
	}
	if _, err := exec.LookPath("ip"); err != nil {
		fmt.Fprintln(stderr, "doorman-demo: needs iproute2's ip command (apt-get install iproute2)")
		return 1
	}
	bin, err := filepath.Abs(*doorman)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "doorman-demo: doorman binary: %v (run `make build` first)\n", err)
		return 1
	}
	d := &tour{out: stdout, doorman: bin, self: self, client: *client}
	// The world is torn down whatever happens, Ctrl-C included.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	done := make(chan int, 1)
	go func() { done <- d.run() }()
	select {
	case code := <-done:
		return code
	case s := <-sigs:
		fmt.Fprintf(stderr, "\ndoorman-demo: %v: cleaning up\n", s)
		d.cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
		d.cleanup()
		return 130
	}
}

// tour is one run of the demo.
type tour struct {
	out     io.Writer
	doorman string
	self    string
	client  string

	ctx    context.Context
	cancel context.CancelFunc
	dir    string
	world  *internet
	name   string // the sandbox's name, demo-<id>: its log is <name>-eth0.log
}

func (d *tour) say(format string, a ...any) { fmt.Fprintf(d.out, format+"\n", a...) }

func (d *tour) run() int {
	start := time.Now()
	d.ctx, d.cancel = context.WithCancel(context.Background())
	defer d.cleanup()
	if err := d.setup(); err != nil {
		d.say("doorman-demo: %v", err)
		return 1
	}
	w := d.world
	d.say("doorman demo — a fake internet in throwaway network namespaces; nothing leaves this machine.\n")
	d.say("  %s (the internet)", w.inet.name)
	for _, s := range w.sites {
		d.say("      %-20s %-14s HTTPS", s.name, s.addr)
	}
	d.say("      %-20s %-14s DNS", "resolver", dnsAddr)
	d.say("  %s (plays this machine; uplink %s, default route to the internet)", w.host.name, hostUplink.Addr())
	d.say("")
	d.say("Each run below also gets --name %s and --state-dir, --log-dir, --run-dir in %s,", d.name, d.dir)
	d.say("and runs in %s via `ip netns exec`.\n", w.host.name)

	allowedSite, blockedSite := w.sites[0], w.sites[1]
	d.say("1. The allowed site, by name:")
	allowed := d.sandboxed("https://"+allowedName+"/", netip.Addr{})
	d.say("2. The blocked site, by name:")
	byName := d.sandboxed("https://"+blockedName+"/", netip.Addr{})
	if byName != 0 && blockedSite.queries.Load() == 0 {
		d.say("   The name did not resolve: the sandbox's DNS goes through doorman's filter, which answered")
		d.say("   REFUSED itself, the policy being unable to admit the name (the \"dns\" lines of the log below;")
		d.say("   curl reports REFUSED as \"Could not resolve host\", Go as \"server misbehaving\").\n")
	}
	d.say("3. The blocked site at its address, skipping DNS (its name still sent as the TLS server name):")
	byAddr := d.sandboxed("https://"+blockedName+"/", blockedSite.addr)
	if byAddr != 0 && blockedSite.requests.Load() == 0 {
		d.say("   The connection went to doorman's proxy all the same, which read the name in the TLS")
		d.say("   ClientHello and refused it with an access_denied alert (the last \"connection\" line below).\n")
	}

	ok := true
	d.say("What the sites saw: %s got %d request(s), %s got %d.",
		allowedName, allowedSite.requests.Load(), blockedName, blockedSite.requests.Load())
	d.say("What the resolver saw: %d query(ies) for %s, %d for %s.",
		allowedSite.queries.Load(), allowedName, blockedSite.queries.Load(), blockedName)
	if allowed != 0 || byName == 0 || byAddr == 0 || allowedSite.requests.Load() == 0 || blockedSite.requests.Load() != 0 ||
		blockedSite.queries.Load() != 0 {
		d.say("UNEXPECTED: the allowed fetch should succeed, and both blocked ones fail without reaching the site")
		d.say("(nor the resolver, for its name).")
		ok = false
	}
	d.say("\nThe decision log (%s), one JSON line per DNS query (\"dns\") and per connection:", filepath.Join("log", d.name+"-eth0.log"))
	lines, err := d.decisions()
	if err != nil {
		d.say("  (cannot read it: %v)", err)
		ok = false
	}
	for _, l := range lines {
		d.say("  %s", l.text)
	}
	if !hasRecord(lines, "dns", blockedName, "deny", "REFUSED") || !hasRecord(lines, "connection", blockedName, "deny", "") {
		d.say("UNEXPECTED: the log should hold the DNS filter's REFUSED and the proxy's denial for %s.", blockedName)
		ok = false
	}
	if left := d.leftovers(); len(left) > 0 {
		d.say("\nLEFT BEHIND after the runs: %s", strings.Join(left, "; "))
		ok = false
	} else {
		d.say("\nAfter each run doorman removed the sandbox's namespace, veth, bridge, proxy and state: none is left.")
	}
	d.say("Done in %.1fs; the fake internet is being deleted.", time.Since(start).Seconds())
	if !ok {
		return 1
	}
	return 0
}

func (d *tour) setup() error {
	id := randomHex(4)
	d.name = "demo-" + id
	dir, err := os.MkdirTemp("", "doorman-demo-")
	if err != nil {
		return err
	}
	d.dir = dir
	for _, sub := range []string{"state", "log", "run"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	sites := []*site{
		{name: allowedName, addr: netip.MustParseAddr("203.0.113.10")},
		{name: blockedName, addr: netip.MustParseAddr("203.0.113.20")},
	}
	if d.world, err = newInternet(id, sites); err != nil {
		return fmt.Errorf("fake internet: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "ca.pem"), d.world.caPEM, 0o644)
}

// clientArgv is the command that fetches url (an https:// URL) inside the
// sandbox; with at valid, it connects to that address instead of the one
// DNS would give the URL's host.
func (d *tour) clientArgv(url string, at netip.Addr) []string {
	ca := filepath.Join(d.dir, "ca.pem")
	host := strings.TrimSuffix(strings.TrimPrefix(url, "https://"), "/")
	if d.client == "curl" || d.client == "auto" {
		if curl, err := exec.LookPath("curl"); err == nil {
			argv := []string{curl, "-sS", "--max-time", "10", "--cacert", ca}
			if at.IsValid() {
				argv = append(argv, "--resolve", host+":443:"+at.String())
			}
			return append(argv, url)
		}
	}
	argv := []string{d.self, "fetch", "--ca", ca}
	if at.IsValid() {
		argv = append(argv, "--resolve", host+":"+at.String())
	}
	return append(argv, url)
}

// sandboxed runs the client for url (connecting to at, if valid) under
// `doorman run` in the host namespace, prints the command and its output,
// and returns its exit status.
func (d *tour) sandboxed(url string, at netip.Addr) int {
	client := d.clientArgv(url, at)
	shown := slices.Clone(client)
	shown[0] = filepath.Base(shown[0])
	if shown[0] == filepath.Base(d.self) {
		shown[0] = "doorman-demo"
	}
	for i, a := range shown {
		if strings.HasPrefix(a, d.dir) {
			shown[i] = filepath.Base(a)
		}
	}
	d.say("$ doorman run --allow %s --subnet %s -- %s", allowedName, demoSubnet, strings.Join(shown, " "))
	argv := []string{"netns", "exec", d.world.host.name, d.doorman, "run",
		"--name", d.name, "--allow", allowedName,
		"--state-dir", filepath.Join(d.dir, "state"), "--log-dir", filepath.Join(d.dir, "log"),
		"--run-dir", filepath.Join(d.dir, "run"),
		// A documentation range: the fake internet's, never a real one.
		"--subnet", demoSubnet, "--"}
	ctx, cancel := context.WithTimeout(d.ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append(argv, client...)...)
	cmd.Env = withoutProxyEnv(os.Environ())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		fmt.Fprintf(&out, "(%v)\n", err)
	}
	for _, l := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		d.say("  %s", l)
	}
	verdict := "allowed"
	if code != 0 {
		verdict = "refused"
	}
	d.say("  → exit status %d: %s (%.2fs, sandbox made and removed included)\n", code, verdict, time.Since(t0).Seconds())
	return code
}

// logLine is one record of the decision log: its text and the fields the
// demo checks.
type logLine struct {
	text                        string
	msg, name, verdict, dnsCode string
}

// decisions returns the decision log's records: the DNS filter's ("dns")
// and the proxy's ("connection").
func (d *tour) decisions() ([]logLine, error) {
	f, err := os.Open(filepath.Join(d.dir, "log", d.name+"-eth0.log"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m struct{ Msg, Name, Verdict, Rcode string }
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Msg != "connection" && m.Msg != "dns" {
			continue
		}
		out = append(out, logLine{text: sc.Text(), msg: m.Msg, name: strings.TrimSuffix(m.Name, "."), verdict: m.Verdict, dnsCode: m.Rcode})
	}
	return out, sc.Err()
}

// hasRecord reports whether lines hold a record msg for name with verdict
// and, if rcode is not "", that DNS response code.
func hasRecord(lines []logLine, msg, name, verdict, rcode string) bool {
	return slices.ContainsFunc(lines, func(l logLine) bool {
		return l.msg == msg && l.name == name && l.verdict == verdict && (rcode == "" || l.dnsCode == rcode)
	})
}

// leftovers lists what the runs left behind that doorman run should have
// removed: sandbox state, run records, the namespace, links in the host
// namespace besides lo and the uplink, a proxy still running.
func (d *tour) leftovers() []string {
	var left []string
	for _, sub := range []string{"state", "run"} {
		ents, _ := os.ReadDir(filepath.Join(d.dir, sub))
		for _, e := range ents {
			if e.Name() != "lock" && e.Name() != "ipam" {
				left = append(left, filepath.Join(sub, e.Name()))
			}
		}
	}
	if _, err := os.Stat("/run/netns/doorman-" + d.name); err == nil {
		left = append(left, "/run/netns/doorman-"+d.name)
	}
	links, err := d.world.hostLinks()
	if err != nil {
		left = append(left, "(cannot list links: "+err.Error()+")")
	}
	for _, l := range links {
		if l != "lo" && l != "eth0" {
			left = append(left, "link "+l)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, _ := os.ReadFile(p)
		if bytes.Contains(data, []byte("proxy\x00")) && bytes.Contains(data, []byte(d.dir)) {
			left = append(left, "proxy process "+filepath.Base(filepath.Dir(p)))
		}
	}
	return left
}

// cleanup deletes the world and the temporary directory; it may run twice.
func (d *tour) cleanup() {
	if d.world != nil {
		d.world.close()
		d.world = nil
	}
	if d.dir != "" {
		os.RemoveAll(d.dir)
		d.dir = ""
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// withoutProxyEnv drops *_proxy variables: the fake internet has no proxy.
func withoutProxyEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasSuffix(strings.ToLower(k), "_proxy") {
			out = append(out, kv)
		}
	}
	return out
}

// demoSubnet is the run network of the demo, on documentation addresses.
const demoSubnet = "198.51.100.224/27"
