package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
)

// cliResult is what one run of the operator CLI did.
type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// cli runs `doorman COMMAND --state-dir STATE ARGS...` in the host
// namespace (where the runtime, and so the proxies, run), with stdin.
func (e *cniEnv) cli(stdin string, command string, args ...string) cliResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := e.net.HostCommand(ctx, doormanBin(), append([]string{command, "--state-dir", e.stateDir}, args...)...)
	var out, errb strings.Builder
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		e.t.Fatalf("run doorman %s: %v", command, err)
	}
	return r
}

// mustCLI is cli that fails the test unless the command succeeds.
func (e *cniEnv) mustCLI(command string, args ...string) cliResult {
	e.t.Helper()
	r := e.cli("", command, args...)
	if r.code != 0 {
		e.t.Fatalf("doorman %s %v: %v", command, args, r)
	}
	return r
}

// lsEntry is the part of `ls -o json` the tests look at.
type lsEntry struct {
	Key, ID, Runtime, Mode, Label string
	Entries                       int
	Proxy                         struct {
		Health string
		PID    int
	}
	Allowed, Denied int
}

func (e *cniEnv) ls(c *container) lsEntry {
	e.t.Helper()
	r := e.mustCLI("ls", "-o", "json")
	var all []lsEntry
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil {
		e.t.Fatalf("ls -o json: %v\n%s", err, r.stdout)
	}
	for _, s := range all {
		if s.Key == c.key {
			return s
		}
	}
	e.t.Fatalf("ls -o json does not list %s:\n%s", c.key, r.stdout)
	return lsEntry{}
}

// heldConn is an HTTPS keep-alive connection from inside a container,
// kept open through the proxy.
type heldConn struct {
	t    *testing.T
	conn *tls.Conn
	br   *bufio.Reader
}

func (e *cniEnv) holdConn(c *container, name string) *heldConn {
	e.t.Helper()
	raw, err := c.ns.DialTCP(name + ":443")
	if err != nil {
		e.t.Fatalf("dial %s: %v", name, err)
	}
	conn := tls.Client(raw, &tls.Config{RootCAs: e.net.CertPool(), ServerName: name})
	e.t.Cleanup(func() { conn.Close() })
	h := &heldConn{t: e.t, conn: conn, br: bufio.NewReader(conn)}
	if err := h.get(name); err != nil {
		e.t.Fatalf("held connection to %s: %v", name, err)
	}
	return h
}

// get sends one request on the connection and reads the answer.
func (h *heldConn) get(name string) error {
	h.conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer h.conn.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(h.conn, "GET /held HTTP/1.1\r\nHost: %s\r\n\r\n", name); err != nil {
		return err
	}
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(body), name+" ") {
		return fmt.Errorf("answered by %q", body)
	}
	return nil
}

// open reports whether the connection is still open: a read waits (and
// times out) instead of failing.
func (h *heldConn) open(wait time.Duration) bool {
	h.conn.SetReadDeadline(time.Now().Add(wait))
	defer h.conn.SetReadDeadline(time.Time{})
	_, err := h.br.ReadByte()
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// reaches reports whether curl gets an answer from name's own server.
func (e *cniEnv) reaches(c *container, url, name string, curlArgs ...string) bool {
	e.t.Helper()
	r := curl(e.t, c.ns, e.caFile, append(curlArgs, url)...)
	return r.exit == 0 && strings.HasPrefix(r.stdout, name+" ")
}

// refusedTLS reports whether HTTPS to name, connecting to addr whatever DNS
// says of the name, gets doorman's TLS access_denied alert (curl's exit 35).
func (e *cniEnv) refusedTLS(c *container, name string, addr netip.Addr) bool {
	e.t.Helper()
	r := curl(e.t, c.ns, e.caFile, "--resolve", name+":443:"+addr.String(), "https://"+name+"/")
	return r.exit == 35 && strings.Contains(strings.ToLower(r.stderr), "access denied")
}

// unresolved reports whether curl fails to resolve name (exit 6): the DNS
// filter refused it.
func (e *cniEnv) unresolved(c *container, name string) bool {
	e.t.Helper()
	r := curl(e.t, c.ns, e.caFile, "https://"+name+"/")
	return r.exit == 6 && strings.Contains(r.stderr, "Could not resolve host")
}

// dnsDenials returns the names of the DNS filter's denials in c's log.
func (e *cniEnv) dnsDenials(c *container) []string {
	data, _ := os.ReadFile(filepath.Join(e.logDir, c.key+".log"))
	var out []string
	for _, l := range bytes.Split(data, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil && m["msg"] == "dns" && m["verdict"] == "deny" {
			out = append(out, fmt.Sprint(m["name"]))
		}
	}
	return out
}

// hasDNSDenial reports whether `doorman logs` output has a line for an
// address lookup of name that the DNS filter refused for want of an entry.
func hasDNSDenial(logs, name string) bool {
	return slices.ContainsFunc(strings.Split(logs, "\n"), func(l string) bool {
		return strings.Contains(l, " deny  dns/") && strings.Contains(l, " "+name+" A") &&
			strings.HasSuffix(l, " answered REFUSED, name not allowed")
	})
}

func TestCLILiveEdits(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	id := c.rt.ContainerID

	s := e.ls(c)
	if s.ID != id || s.Runtime != "cni" || s.Mode != "allowlist" || s.Entries != 1 || s.Proxy.Health != "up" || s.Label == "" {
		t.Fatalf("ls: %+v", s)
	}
	apiURL, evilURL, otherURL := "https://"+apiName+"/", "https://"+evilName+"/", "https://"+otherName+"/"
	// A denied name does not resolve (the DNS filter refuses it); at its
	// address it gets the TLS alert.
	if !e.reaches(c, apiURL, apiName) || !e.unresolved(c, evilName) || !e.refusedTLS(c, evilName, evilAddr4) {
		t.Fatal("initial policy not in force")
	}
	e.waitDNSDecision(c, evilName, "deny")
	held := e.holdConn(c, apiName)

	// allow: in force when the command returns.
	r := e.mustCLI("allow", id, evilName)
	if !strings.Contains(r.stdout, "added "+evilName) || !strings.Contains(r.stdout, "in force") {
		t.Errorf("allow: %v", r)
	}
	if !e.reaches(c, evilURL, evilName) {
		t.Fatal("allowed name refused after allow")
	}
	if !held.open(100*time.Millisecond) || held.get(apiName) != nil {
		t.Fatal("a connection that kept its permission was disturbed")
	}

	// deny: new connections refused, the established one closed.
	start := time.Now()
	e.mustCLI("deny", id, apiName)
	if held.open(time.Second) {
		t.Fatal("established connection to a denied name still open a second after deny")
	}
	t.Logf("deny: held connection closed %v after the command started", time.Since(start).Round(time.Millisecond))
	if !e.unresolved(c, apiName) || !e.refusedTLS(c, apiName, apiAddr4) {
		t.Fatal("denied name resolves, or is not refused at its address, after deny")
	}
	e.waitDNSDecision(c, apiName, "deny")
	if p, err := conf.LoadFile(e.state(c).PolicyPath()); err != nil || strings.Join(p.Hosts(), " ") != evilName {
		t.Fatalf("policy file after allow and deny: %v, %v", p, err)
	}

	// A bad entry changes nothing.
	before, _ := os.ReadFile(e.state(c).PolicyPath())
	r = e.cli("", "allow", id, "ok.example.test", "https://bad.example.test/")
	if r.code != 2 || !strings.Contains(r.stderr, `"https://bad.example.test/"`) || !strings.Contains(r.stderr, "nothing changed") {
		t.Errorf("bad entry: %v", r)
	}
	if after, _ := os.ReadFile(e.state(c).PolicyPath()); string(after) != string(before) {
		t.Errorf("bad entry changed the policy file:\n%s", after)
	}
	if r := e.cli("", "mode", id, "permissive"); r.code != 2 || !strings.Contains(r.stderr, "permissive") {
		t.Errorf("bad mode: %v", r)
	}

	// open: everything goes.
	e.mustCLI("mode", id, "open")
	if !e.reaches(c, otherURL, otherName) {
		t.Fatal("mode open: refused")
	}
	heldOther := e.holdConn(c, otherName)
	if s := e.ls(c); s.Mode != "open" || s.Label != "n/a" {
		t.Errorf("ls in mode open: %+v", s)
	}

	// none: the proxy goes, and with it the connection it relayed.
	pid := e.state(c).PID
	r = e.mustCLI("mode", id, "none")
	if !strings.Contains(r.stdout, "open -> none") || !strings.Contains(r.stdout, "proxy stopped") {
		t.Errorf("mode none: %v", r)
	}
	if heldOther.open(time.Second) {
		t.Fatal("connection still open a second after mode none")
	}
	waitGone(t, pid)
	if s := e.ls(c); s.Mode != "none" || s.Proxy.Health != "none" {
		t.Errorf("ls in mode none: %+v", s)
	}
	if e.reaches(c, evilURL, evilName) || e.reaches(c, evilURL, evilName, "--resolve", evilName+":443:"+evilAddr4.String()) {
		t.Fatal("mode none: allowed name reachable")
	}
	if err := e.check(c); err != nil {
		t.Errorf("CNI CHECK in mode none: %v", err)
	}

	// And back: a new proxy, the entries kept, names resolved as before.
	r = e.mustCLI("mode", id, "allowlist")
	if !strings.Contains(r.stdout, "proxy started") || strings.Contains(r.stderr, "resolv.conf") {
		t.Errorf("mode allowlist: %v", r)
	}
	if !e.reaches(c, evilURL, evilName) {
		t.Fatal("back in allowlist: allowed name refused")
	}
	if !e.refusedTLS(c, apiName, apiAddr4) {
		t.Fatal("back in allowlist: denied name not refused")
	}
	if s := e.ls(c); s.Mode != "allowlist" || s.Proxy.Health != "up" || s.Entries != 1 {
		t.Errorf("ls back in allowlist: %+v", s)
	}
	if err := e.check(c); err != nil {
		t.Errorf("CNI CHECK after the round trip: %v", err)
	}

	// Counts come from the log: one line per connection, written when
	// it ends (so wait until ls and the log agree).
	e.waitDecision(c, decided(apiName, "deny"))
	var want lsEntry
	deadline := time.Now().Add(5 * time.Second)
	for {
		want = lsEntry{}
		for _, d := range e.decisions(c) {
			switch d["verdict"] {
			case "allow":
				want.Allowed++
			case "deny":
				want.Denied++
			}
		}
		s := e.ls(c)
		if s.Allowed == want.Allowed && s.Denied == want.Denied && s.Allowed >= 4 && s.Denied >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ls counts allowed %d, denied %d; the log has %d, %d", s.Allowed, s.Denied, want.Allowed, want.Denied)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// logs: readable, JSON, denials only (of connections and of DNS
	// queries, and the lines that count their repeats: see
	// decisionlog.Aggregator).
	r = e.mustCLI("logs", id, "--denied", "-o", "json")
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
	if dnsDenied := e.dnsDenials(c); len(dnsDenied) == 0 || len(lines) != want.Denied+len(dnsDenied)+summaries {
		t.Errorf("logs --denied: %d lines, want %d connections, %d DNS queries %v and %d summaries", len(lines), want.Denied, len(dnsDenied), dnsDenied, summaries)
	}
	r = e.mustCLI("logs", c.ns.Path(), "--since", "1h")
	if !strings.Contains(r.stdout, " deny  tls     "+apiName+" ") || !strings.Contains(r.stdout, "name not allowed") ||
		!strings.Contains(r.stdout, " allow tls     "+evilName+" ") || !hasDNSDenial(r.stdout, evilName) {
		t.Errorf("logs by netns path:\n%s", r.stdout)
	}
	r = e.mustCLI("show", id)
	for _, want := range []string{"policy       " + evilName, "mode         allowlist", "proxy        pid ", "recent decisions:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show: no %q in\n%s", want, r.stdout)
		}
	}
}

func TestCLIErrors(t *testing.T) {
	e := newCNIEnv(t)
	c1, c2 := e.newContainer(), e.newContainer()
	e.mustAdd(c1, e.conflist(nil))
	e.mustAdd(c2, e.conflist(nil))

	r := e.cli("", "show", "nosuch")
	if r.code != 3 || strings.TrimSpace(r.stderr) != "doorman show: no sandbox matches nosuch" {
		t.Errorf("no match: %v", r)
	}
	// Both ids start with "ctr".
	r = e.cli("", "allow", "ctr", apiName)
	if r.code != 4 || !strings.Contains(r.stderr, "2 sandboxes match ctr: ") ||
		!strings.Contains(r.stderr, c1.key) || !strings.Contains(r.stderr, c2.key) {
		t.Errorf("ambiguous: %v", r)
	}
	// A unique prefix is enough.
	r = e.mustCLI("deny", c2.rt.ContainerID[:len(c2.rt.ContainerID)-3], apiName)
	if !strings.HasPrefix(r.stdout, c2.key+": removed "+apiName) {
		t.Errorf("deny by prefix: %v", r)
	}
	if e.ls(c1).Entries != 1 || e.ls(c2).Entries != 0 {
		t.Error("deny by prefix changed the wrong sandbox")
	}
	if r := e.cli("", "set", c1.rt.ContainerID, "--file", "-"); r.code != 2 || !strings.Contains(r.stderr, "empty") {
		t.Errorf("set from empty stdin: %v", r)
	}
	if r := e.cli("mode: allowlist\nfine.example.test\n*\n", "set", c1.rt.ContainerID, "--file", "-"); r.code != 2 || !strings.Contains(r.stderr, "line 3") {
		t.Errorf("set with a bad line: %v", r)
	}
	if e.ls(c1).Entries != 1 {
		t.Error("a refused set changed the policy")
	}
	if r := e.cli("", "ls", "extra"); r.code != 2 {
		t.Errorf("ls with an argument: %v", r)
	}
}

func TestCLILearn(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"mode": "open"}))
	id := c.rt.ContainerID

	// What the workload does while it is being watched.
	seen := []struct{ url, name string }{
		{"https://" + apiName + "/", apiName},
		{"https://" + evilName + "/", evilName},
		{"http://" + otherName + "/", otherName},
		{"https://" + otherAddr.String() + "/", otherName}, // no SNI: by address
	}
	for _, s := range seen {
		if r := curl(t, c.ns, e.caFile, "-k", s.url); r.exit != 0 || !strings.HasPrefix(r.stdout, s.name+" ") {
			t.Fatalf("mode open: %s: %v", s.url, r)
		}
	}
	e.waitDecision(c, decided(apiName, "allow"))
	e.waitDecision(c, decided(evilName, "allow"))
	e.waitDecision(c, func(d map[string]any) bool { return d["dst"] == otherAddr.String()+":80" })
	e.waitDecision(c, func(d map[string]any) bool { return d["dst"] == otherAddr.String()+":443" })

	r := e.mustCLI("learn", id)
	p, err := conf.ParseFile([]byte(r.stdout))
	if err != nil {
		t.Fatalf("learn output does not parse: %v\n%s", err, r.stdout)
	}
	want := []string{evilName + ":443", apiName + ":443", otherName + ":80", otherAddr.String() + ":443"}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(p.Hosts()))
	if p.Mode != conf.ModeAllowlist || !slices.Equal(got, want) {
		t.Fatalf("learned %s %v, want allowlist %v:\n%s", p.Mode, got, want, r.stdout)
	}
	r = e.mustCLI("learn", id, "--wildcards")
	if wp, err := conf.ParseFile([]byte(r.stdout)); err != nil || !slices.Contains(wp.Hosts(), "*.example.test:443") || len(wp.Entries) != 3 {
		t.Fatalf("learn --wildcards: %v, %v\n%s", wp, err, r.stdout)
	}

	// Fed back: what was seen goes through, nothing else does.
	learned := e.mustCLI("learn", id).stdout
	if r := e.cli(learned, "set", id, "--file", "-"); r.code != 0 || !strings.Contains(r.stdout, "in force") {
		t.Fatalf("set learned policy: %v", r)
	}
	for _, s := range seen {
		if r := curl(t, c.ns, e.caFile, "-k", s.url); r.exit != 0 || !strings.HasPrefix(r.stdout, s.name+" ") {
			t.Errorf("learned policy refuses %s: %v", s.url, r)
		}
	}
	for _, u := range []struct{ url, server string }{
		{"http://" + apiName + "/", apiName},              // seen on 443 only
		{"https://" + otherName + ":8443/", otherName},    // seen on 80 (its address on 443) only
		{"https://" + evilName + ":8443/", evilName},      // another port
		{"http://" + otherAddr.String() + "/", otherName}, // the address, on another port
		{"https://" + apiAddr4.String() + "/", apiName},   // the address of a name
	} {
		// Refusals are a TLS alert or a 403 from doorman: either way the
		// server never answers.
		// The names are the policy's, so they resolve: the refusal is
		// the proxy's, not the DNS filter's.
		if r := curl(t, c.ns, e.caFile, "-k", u.url); r.exit == 0 && strings.HasPrefix(r.stdout, u.server+" ") || r.exit == 6 {
			t.Errorf("learned policy admits %s (or its name does not resolve): %v", u.url, r)
		}
	}
	if s := e.ls(c); s.Mode != "allowlist" || s.Entries != 4 {
		t.Errorf("ls after set: %+v", s)
	}
}
