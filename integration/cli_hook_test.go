package integration

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/hook"
)

// TestCLIHookSandbox runs the operator CLI (ls, show, allow, deny, mode,
// set, logs, learn) against sandboxes the OCI hook made for real runc
// containers, as TestCLILiveEdits and TestCLILearn do for CNI ones: every
// change is checked from inside the container (runc exec of the probe),
// established connections (one held by busybox nc inside the container,
// one held from the container's namespace) are closed by deny, and runc
// delete leaves nothing the CLI could still find. The first container has
// the default layers (the DNS filter follows the live policy: a name denied
// stops resolving); the learner opts out of both.
func TestCLIHookSandbox(t *testing.T) {
	begin := time.Now()
	e := newRuncEnv(t)
	sbx, sbx2 := e.net.NewSandbox(t), e.net.NewSandbox(t)
	c := e.newContainer("cli", withNetNS(sbx.Path()), allowAPI())
	// The learner starts in mode open; its id shares only "dm-" with c's.
	learner := e.newContainer("learn", withNetNS(sbx2.Path()), withAnnotations(hook.AnnotationMode, "open"),
		withHookFlags("--dns-filter=false", "--host-layer=false"))
	e.runDetached(c)
	e.runDetached(learner)
	ctr, lctr := c.ctr(), learner.ctr()
	ctr.ns = sbx.Netns
	id := c.id
	t.Logf("setup, two containers: %v", time.Since(begin).Round(time.Millisecond))

	get := func(c *runcContainer, url string, flags ...string) runcResult {
		t.Helper()
		return e.exec(c, slices.Concat([]string{"/probe", "get", url, "--ca", "/ca.pem", "--timeout", "3s"}, flags)...)
	}
	// at connects to name's address whatever DNS says of it.
	at := func(name string, addr netip.Addr) string { return "--resolve=" + name + ":" + addr.String() }
	// served: the named server itself answered.
	served := func(r runcResult, name string) bool {
		return r.exit == 0 && strings.HasPrefix(r.stdout, "status: 200\n"+name+" ")
	}
	apiURL, evilURL := "https://"+apiName+"/", "https://"+evilName+"/"

	// ls: both listed, as the hook recorded them.
	step := time.Now()
	s := e.state(c)
	if l := e.ls(ctr); l.ID != id || l.Runtime != "hook" || l.Mode != "allowlist" || l.Entries != 1 ||
		l.Proxy.Health != "up" || l.Label != "full" || l.Label != s.Label {
		t.Errorf("ls: %+v; want id %s, runtime hook, allowlist, 1 entry, proxy up, label %q", l, id, s.Label)
	}
	if l := e.ls(lctr); l.ID != learner.id || l.Runtime != "hook" || l.Mode != "open" || l.Entries != 0 ||
		l.Proxy.Health != "up" || l.Label != "n/a" {
		t.Errorf("ls of the learner: %+v; want runtime hook, open, no entries, proxy up, label n/a", l)
	}
	// The table shows a runc id whole (its first 12 characters are not
	// unique), with the runtime path and the kind of runtime found in the
	// namespace.
	r := e.mustCLI("ls")
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		f := strings.Fields(l)
		rows = append(rows, strings.Join(f[:5], " "))
	}
	if want := []string{id + " - hook runc allowlist", learner.id + " - hook runc open"}; !slices.Equal(rows, want) {
		t.Errorf("ls rows %q, want %q:\n%s", rows, want, r.stdout)
	}

	// show: by id, by a unique prefix, by the netns path the spec names,
	// and by another path to the same namespace (the container's init).
	initNS := fmt.Sprintf("/proc/%d/ns/net", e.initPID(c))
	for _, q := range []string{id, "dm-cli", sbx.Path(), initNS} {
		r := e.cli("", "show", q)
		if r.code != 0 {
			t.Errorf("show %s: %v", q, r)
			continue
		}
		for _, want := range []string{"sandbox      " + ctr.key + "\n", "id           " + id + "\n", "runtime      hook, runc\n",
			"netns        " + sbx.Path() + "\n", "label        " + s.Label + "\n", "mode         allowlist\n",
			"policy       " + apiName + "\n", fmt.Sprintf("proxy        pid %d, up", s.PID)} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("show %s: no %q in\n%s", q, want, r.stdout)
			}
		}
	}
	var shown showJSON
	if r := e.mustCLI("show", "dm-learn", "-o", "json"); json.Unmarshal([]byte(r.stdout), &shown) != nil ||
		shown.Key != lctr.key || shown.Runtime != "hook" || shown.NetNS != sbx2.Path() {
		t.Errorf("show -o json of the learner by prefix: %+v from\n%s", shown, r.stdout)
	}
	t.Logf("ls, show: %v", time.Since(step).Round(time.Millisecond))

	// Names that match nothing, or both: exit 3 or 4, nothing changed.
	step = time.Now()
	policyBefore, _ := os.ReadFile(s.PolicyPath())
	nosuch := "dm-nosuch-" + e.suffix
	for _, args := range [][]string{
		{"show", nosuch}, {"allow", nosuch, evilName}, {"deny", nosuch, apiName}, {"mode", nosuch, "none"},
		{"set", nosuch, "--file", "-"}, {"logs", nosuch}, {"learn", nosuch},
		{"show", e.net.HostPath()}, // a namespace, but no sandbox's
	} {
		r := e.cli("mode: none\n", args[0], args[1:]...)
		if want := "doorman " + args[0] + ": no sandbox matches " + args[1]; r.code != 3 || strings.TrimSpace(r.stderr) != want {
			t.Errorf("%s: want exit 3 and %q, got %v", strings.Join(args, " "), want, r)
		}
	}
	r = e.cli("", "deny", "dm-", apiName)
	if r.code != 4 || !strings.Contains(r.stderr, "2 sandboxes match dm-: ") ||
		!strings.Contains(r.stderr, ctr.key) || !strings.Contains(r.stderr, lctr.key) {
		t.Errorf("deny dm-: want exit 4 naming both sandboxes, got %v", r)
	}
	if after, _ := os.ReadFile(s.PolicyPath()); string(after) != string(policyBefore) {
		t.Errorf("a refused command changed the policy file:\n%s", after)
	}
	if r := get(c, apiURL); !served(r, apiName) {
		t.Fatalf("allowed HTTPS before any edit: %v", r)
	}
	t.Logf("errors: %v", time.Since(step).Round(time.Millisecond))

	// deny: held connections to api closed, new ones refused.
	step = time.Now()
	inside := e.holdHTTP(c, apiAddr4, apiName)
	held := e.holdConn(ctr, apiName)
	if !held.open(100*time.Millisecond) || strings.Contains(inside.output(), "closed") {
		t.Fatalf("a held connection closed before deny:\n%s", inside.output())
	}
	start := time.Now()
	r = e.mustCLI("deny", id, apiName)
	if !strings.HasPrefix(r.stdout, ctr.key+": removed "+apiName) || !strings.Contains(r.stdout, "in force") {
		t.Errorf("deny: %v", r)
	}
	if held.open(time.Second) {
		t.Error("TLS connection to a denied name still open a second after deny")
	}
	if out, ok := inside.waitClosed(2 * time.Second); !ok {
		t.Errorf("HTTP keep-alive connection held by nc in the container still open 2s after deny:\n%s", out)
	}
	t.Logf("deny: held connections closed %v after the command started", time.Since(start).Round(time.Millisecond))
	// The name no longer resolves; at its address, the alert or the 403.
	if r := get(c, apiURL); !probeRan(r, 1) || !strings.Contains(r.stderr, "lookup "+apiName) {
		t.Errorf("%s after deny: want it not to resolve, got %v", apiName, r)
	}
	e.waitDNSDecision(ctr, apiName, "deny")
	if r := get(c, apiURL, at(apiName, apiAddr4)); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
		t.Errorf("HTTPS to %s after deny: want exit 3 (access_denied), got %v", apiName, r)
	}
	if r := get(c, "http://"+apiName+"/", at(apiName, apiAddr4)); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") || !strings.Contains(r.stdout, id) {
		t.Errorf("HTTP to %s after deny: want a 403 naming %s, got %v", apiName, id, r)
	}
	if p, err := conf.LoadFile(s.PolicyPath()); err != nil || p.Mode != conf.ModeAllowlist || len(p.Entries) != 0 {
		t.Errorf("policy file after deny: %v, %v", p, err)
	}

	// allow: back, in force when the command returns.
	r = e.mustCLI("allow", id, apiName)
	if !strings.HasPrefix(r.stdout, ctr.key+": added "+apiName) || !strings.Contains(r.stdout, "in force") {
		t.Errorf("allow: %v", r)
	}
	if r := get(c, apiURL); !served(r, apiName) {
		t.Errorf("HTTPS to %s after allow: %v", apiName, r)
	}
	if r := get(c, evilURL, at(evilName, evilAddr4)); r.exit != 3 {
		t.Errorf("HTTPS to %s after allow of %s: want exit 3, got %v", evilName, apiName, r)
	}
	t.Logf("deny, allow: %v", time.Since(step).Round(time.Millisecond))

	// mode none: the proxy goes, nothing leaves, the table stays.
	step = time.Now()
	pid := e.state(c).PID
	r = e.mustCLI("mode", id, "none")
	if !strings.Contains(r.stdout, "allowlist -> none") || !strings.Contains(r.stdout, "proxy stopped") {
		t.Errorf("mode none: %v", r)
	}
	waitGone(t, pid)
	if pids := proxiesFor(id); len(pids) != 0 {
		t.Errorf("proxy processes in mode none: %v", pids)
	}
	if l := e.ls(ctr); l.Mode != "none" || l.Proxy.Health != "none" || l.Label != "full" {
		t.Errorf("ls in mode none: %+v", l)
	}
	if ok, err := enforce.Present(sbx.Path()); !ok || err != nil {
		t.Errorf("no doorman table in mode none (%v)", err)
	}
	// Refused, not dropped: even the DNS lookup is (EPERM).
	if r := get(c, apiURL); !probeRan(r, 1, 4) {
		t.Errorf("HTTPS to %s in mode none: want a refusal, got %v", apiName, r)
	}
	accepted := e.other.Connections(80)
	if r := e.exec(c, "/probe", "tcp", netip.AddrPortFrom(otherAddr, 80).String(), "--timeout", "2s"); !probeRan(r, 1, 4) {
		t.Errorf("TCP by address in mode none: want a refusal, got %v", r)
	}
	if n := e.other.Connections(80) - accepted; n != 0 {
		t.Errorf("%s accepted %d connections in mode none", otherName, n)
	}

	// mode allowlist: a new proxy (started by the CLI, with the resolver
	// the hook gave the first), the entry kept.
	r = e.mustCLI("mode", id, "allowlist")
	if !strings.Contains(r.stdout, "none -> allowlist") || !strings.Contains(r.stdout, "proxy started") || strings.Contains(r.stderr, "resolv.conf") {
		t.Errorf("mode allowlist: %v", r)
	}
	now := e.state(c)
	if pids := proxiesFor(id); !slices.Equal(pids, []int{now.PID}) || now.PID == pid {
		t.Errorf("proxy processes after mode allowlist: %v, recorded %d (the old one was %d)", pids, now.PID, pid)
	}
	if !slices.Equal(now.ProxyResolvers, s.ProxyResolvers) || now.Label != s.Label || now.Runtime != "hook" {
		t.Errorf("state after the round trip: resolvers %v label %q runtime %q; want %v %q hook", now.ProxyResolvers, now.Label, now.Runtime, s.ProxyResolvers, s.Label)
	}
	if r := get(c, apiURL); !served(r, apiName) {
		t.Errorf("HTTPS to %s back in allowlist: %v", apiName, r)
	}
	if r := get(c, evilURL, at(evilName, evilAddr4)); r.exit != 3 {
		t.Errorf("HTTPS to %s back in allowlist: want exit 3, got %v", evilName, r)
	}
	if l := e.ls(ctr); l.Mode != "allowlist" || l.Proxy.Health != "up" || l.Entries != 1 || l.Label != s.Label {
		t.Errorf("ls back in allowlist: %+v", l)
	}
	t.Logf("mode none and back: %v", time.Since(step).Round(time.Millisecond))

	// logs --denied: exactly the denials of the log, every one.
	step = time.Now()
	e.waitDecision(ctr, decided(evilName, "deny"))
	var denied []string
	var text string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		denied = denied[:0]
		for _, d := range e.decisions(ctr) {
			if d["verdict"] == "deny" {
				denied = append(denied, fmt.Sprint(d["name"]))
			}
		}
		denied = append(denied, e.dnsDenials(ctr)...) // the DNS filter's
		text = e.mustCLI("logs", id, "--denied").stdout
		// The repeats of a denial within an interval are one line more
		// that counts them (decisionlog.Aggregator).
		if n := strings.Count(text, "\n") - strings.Count(text, " more from "); n == len(denied) || time.Now().After(deadline) {
			break
		}
	}
	// The held connections deny closed are denials too.
	if n := strings.Count(text, " policy changed: name not allowed "); n != 2 {
		t.Errorf("logs --denied: %d closures by the policy change, want 2 (the held connections):\n%s", n, text)
	}
	for _, want := range []string{" deny  http    " + apiName + " " + apiAddr4.String() + ":80 policy changed: name not allowed",
		" deny  tls     " + apiName + " ", " deny  tls     " + evilName + " ", " name not allowed\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("logs --denied: no %q in\n%s", want, text)
		}
	}
	if !hasDNSDenial(text, apiName) {
		t.Errorf("logs --denied: no refused lookup of %s in\n%s", apiName, text)
	}
	if strings.Contains(text, " allow ") || strings.Count(text, "\n")-strings.Count(text, " more from ") != len(denied) {
		t.Errorf("logs --denied: want the %d denials of the log %v, got\n%s", len(denied), denied, text)
	}
	r = e.mustCLI("logs", sbx.Path(), "--denied", "-o", "json")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	summaries := 0
	for _, l := range lines {
		var d map[string]any
		if err := json.Unmarshal([]byte(l), &d); err != nil || d["verdict"] != "deny" || d["msg"] != "connection" && d["msg"] != "dns" && d["msg"] != "denials" {
			t.Errorf("logs --denied -o json line %q (%v)", l, err)
		}
		if d["msg"] == "denials" {
			summaries++
		}
	}
	if len(lines)-summaries != len(denied) {
		t.Errorf("logs --denied -o json by netns path: %d lines, want %d", len(lines), len(denied))
	}
	if r := e.mustCLI("logs", id); !strings.Contains(r.stdout, " allow tls     "+apiName+" ") {
		t.Errorf("logs: no allowed connection to %s in\n%s", apiName, r.stdout)
	}
	t.Logf("logs: %v", time.Since(step).Round(time.Millisecond))

	// learn, from the learner's traffic in mode open; set admits exactly it.
	step = time.Now()
	seen := []struct{ url, name string }{
		{"https://" + apiName + "/", apiName},
		{"https://" + evilName + "/", evilName},
		{"http://" + otherName + "/", otherName},
		{"https://" + otherAddr.String() + "/", otherName}, // no SNI: by address
	}
	for _, u := range seen {
		if r := get(learner, u.url); !served(r, u.name) {
			t.Fatalf("mode open: %s: %v", u.url, r)
		}
	}
	e.waitDecision(lctr, decided(apiName, "allow"))
	e.waitDecision(lctr, decided(evilName, "allow"))
	e.waitDecision(lctr, func(d map[string]any) bool { return d["dst"] == otherAddr.String()+":80" })
	e.waitDecision(lctr, func(d map[string]any) bool { return d["dst"] == otherAddr.String()+":443" })
	learned := e.mustCLI("learn", learner.id).stdout
	p, err := conf.ParseFile([]byte(learned))
	if err != nil {
		t.Fatalf("learn output does not parse: %v\n%s", err, learned)
	}
	want := []string{evilName + ":443", apiName + ":443", otherName + ":80", otherAddr.String() + ":443"}
	slices.Sort(want)
	if got := slices.Sorted(slices.Values(p.Hosts())); p.Mode != conf.ModeAllowlist || !slices.Equal(got, want) {
		t.Fatalf("learned %s %v, want allowlist %v:\n%s", p.Mode, got, want, learned)
	}
	if r := e.cli(learned, "set", learner.id, "--file", "-"); r.code != 0 || !strings.Contains(r.stdout, "policy replaced") || !strings.Contains(r.stdout, "in force") {
		t.Fatalf("set the learned policy: %v", r)
	}
	for _, u := range seen {
		if r := get(learner, u.url); !served(r, u.name) {
			t.Errorf("learned policy refuses %s: %v", u.url, r)
		}
	}
	for _, u := range []struct{ url, server string }{
		{"http://" + apiName + "/", apiName},              // seen on 443 only
		{"https://" + otherName + ":8443/", otherName},    // seen on 80 (its address on 443) only
		{"https://" + evilName + ":8443/", evilName},      // another port
		{"http://" + otherAddr.String() + "/", otherName}, // the address, on another port
		{"https://" + apiAddr4.String() + "/", apiName},   // the address of a name
	} {
		if r := get(learner, u.url); served(r, u.server) || r.exit == 0 && !strings.HasPrefix(r.stdout, "status: 403\n") || strings.Contains(r.stderr, "lookup ") {
			t.Errorf("learned policy admits %s (or its name does not resolve): %v", u.url, r)
		}
	}
	// Opted out of both layers: DNS is not filtered.
	if l := e.ls(lctr); l.Mode != "allowlist" || l.Entries != 4 || l.Label != withDNSGap("full") {
		t.Errorf("ls of the learner after set: %+v", l)
	}
	t.Logf("learn, set: %v", time.Since(step).Round(time.Millisecond))

	// runc delete: nothing left that the CLI could find.
	step = time.Now()
	lpid := e.state(learner).PID
	e.delete(c)
	e.delete(learner)
	waitGone(t, now.PID)
	waitGone(t, lpid)
	e.assertNoSandbox(c)
	e.assertNoSandbox(learner)
	r = e.mustCLI("ls", "-o", "json")
	var left []lsEntry
	if err := json.Unmarshal([]byte(r.stdout), &left); err != nil || len(left) != 0 {
		t.Errorf("ls -o json after runc delete: %v\n%s", err, r.stdout)
	}
	for _, q := range []string{id, sbx.Path()} {
		if r := e.cli("", "show", q); r.code != 3 {
			t.Errorf("show %s after runc delete: want exit 3, got %v", q, r)
		}
	}
	t.Logf("runc delete: %v; total %v", time.Since(step).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
}

// showJSON is the part of `show -o json` the test looks at.
type showJSON struct {
	Key, Runtime, NetNS string
}

// initPID is the host pid of c's init process.
func (r *runcEnv) initPID(c *runcContainer) int {
	r.t.Helper()
	var st struct{ Pid int }
	res := r.mustRunc("state", c.id)
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || st.Pid <= 0 {
		r.t.Fatalf("runc state %s: pid %d (%v)\n%s", c.id, st.Pid, err, res.stdout)
	}
	return st.Pid
}

// containerHold is a plaintext HTTP keep-alive connection held open by
// busybox nc inside a container: it sends one request, keeps its input
// open, and writes the answer and then "closed" to a file on the
// container's /dev/shm when the connection ends.
type containerHold struct {
	t    *testing.T
	file string // the output, seen from the host through the init's root
}

// holdHTTP starts the holder in c (runc exec --detach) towards addr:80
// with Host name, and waits for the server's answer.
func (r *runcEnv) holdHTTP(c *runcContainer, addr netip.Addr, name string) *containerHold {
	r.t.Helper()
	out := "/dev/shm/held-" + name
	script := fmt.Sprintf(`{ printf 'GET /held HTTP/1.1\r\nHost: %s\r\n\r\n'; exec sleep 600; } | { nc %s 80; echo "closed $?"; } >%s 2>&1`,
		name, addr, out)
	r.mustRunc("exec", "--detach", c.id, "/bin/sh", "-c", script)
	h := &containerHold{t: r.t, file: filepath.Join("/proc", fmt.Sprint(r.initPID(c)), "root", out)}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := h.output()
		if strings.Contains(s, "closed") {
			r.t.Fatalf("held HTTP connection to %s closed at once:\n%s", name, s)
		}
		if strings.Contains(s, name+" ") && strings.Contains(s, "GET /held") {
			return h
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no answer on the held HTTP connection to %s:\n%s", name, s)
		}
	}
}

func (h *containerHold) output() string {
	data, _ := os.ReadFile(h.file)
	return string(data)
}

// waitClosed waits up to d for the connection to end.
func (h *containerHold) waitClosed(d time.Duration) (string, bool) {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		s := h.output()
		if strings.Contains(s, "closed") {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
	}
}
