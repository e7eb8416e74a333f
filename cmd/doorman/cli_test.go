package main

import (
	"bytes"
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
	"github.com/doorman-net/doorman/kube/agentclient"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// These tests run the operator commands against recorded sandboxes whose
// proxies are not running, which needs no privileges: edits within the
// proxy modes only rewrite files. The end-to-end tests with real
// sandboxes are in integration/cli_test.go.

// fakeSandbox records sandbox key (container id, name) in stateDir, with
// policy entries, the DNS filter on or off, and decision log lines.
func fakeSandbox(t *testing.T, stateDir, key, id, name string, mode conf.Mode, dnsFilter bool, entries []string, logLines ...string) *sandbox.State {
	t.Helper()
	dir := filepath.Join(stateDir, key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(stateDir, "..", "log-"+key)
	s := &sandbox.State{
		Key: key, ID: id, Name: name, Runtime: "cni", Network: "net", IfName: "eth0", NetNS: "/run/netns/" + key,
		Mode: mode, Label: "full", LogFile: logFile, Created: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC),
		Spec: spec.Spec{DNSFilter: dnsFilter},
	}
	data, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(dir, "state.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := conf.NewPolicy(mode, entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := conf.WriteFileAtomic(filepath.Join(dir, sandbox.PolicyFile), p); err != nil {
		t.Fatal(err)
	}
	if len(logLines) > 0 {
		os.WriteFile(logFile, []byte(strings.Join(logLines, "\n")+"\n"), 0o600)
	}
	st, err := sandbox.Load(stateDir, key)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// decisionLine is a decision line as the proxy writes it.
func decisionLine(at string, verdict, name, dst, reason string) string {
	level := "INFO"
	if verdict == "deny" {
		level = "WARN"
	}
	rule, up, down := "", 0, 0
	if reason == "name allowed" {
		rule, up, down = name, 10, 20
	}
	return fmt.Sprintf(`{"time":%q,"level":%q,"msg":"connection","sandbox":"x","client":"127.0.0.1:1","dst":%q,"proto":"tls","name":%q,"rule":%q,"verdict":%q,"reason":%q,"bytes_up":%d,"bytes_down":%d,"duration_ms":5}`,
		at, level, dst, name, rule, verdict, reason, up, down)
}

// dnsLine is a DNS filter's line as dnsfilter writes it (see
// dnsfilter.Filter.log).
func dnsLine(at, verdict, name, qtype, rcode, reason string) string {
	level, rule, upstream := "INFO", "", ""
	switch verdict {
	case "deny":
		level = "WARN"
	case "allow":
		rule, upstream = name, "192.0.2.53:53"
	}
	return fmt.Sprintf(`{"time":%q,"level":%q,"msg":"dns","sandbox":"x","proto":"udp","client":"127.0.0.1:5353","name":%q,"qtype":%q,"verdict":%q,"rule":%q,"reason":%q,"rcode":%q,"upstream":%q,"ech_removed":false,"duration_ms":0.25}`,
		at, level, name, qtype, verdict, rule, reason, rcode, upstream)
}

type result struct {
	code           int
	stdout, stderr string
}

func doorman(stateDir string, args ...string) result {
	var out, errb bytes.Buffer
	full := append([]string{args[0], "--state-dir", stateDir}, args[1:]...)
	code := run(full, &out, &errb)
	return result{code, out.String(), errb.String()}
}

func policyHosts(t *testing.T, s *sandbox.State) string {
	t.Helper()
	p, err := s.Policy()
	if err != nil {
		t.Fatal(err)
	}
	return string(p.Mode) + " " + strings.Join(p.Hosts(), " ")
}

func newState(t *testing.T) (string, *sandbox.State, *sandbox.State) {
	stateDir := filepath.Join(t.TempDir(), "state")
	a := fakeSandbox(t, stateDir, "aaa111-eth0", "aaa111", "web", conf.ModeAllowlist, true,
		[]string{"api.example.test", "*.example.org:443"},
		decisionLine("2024-01-01T00:00:00Z", "allow", "old.example.test", "203.0.113.9:443", "name allowed"), // before Created
		decisionLine("2025-06-01T10:00:00Z", "allow", "api.example.test", "203.0.113.10:443", "name allowed"),
		`{"time":"2025-06-01T10:00:01Z","level":"INFO","msg":"policy loaded","mode":"allowlist","entries":2}`,
		decisionLine("2025-06-01T10:00:02Z", "deny", "evil.example.test", "203.0.113.20:443", "name not allowed"),
		decisionLine("2025-06-01T10:00:03Z", "deny", "evil.example.test", "203.0.113.20:80", "name not allowed"),
		dnsLine("2025-06-01T10:00:04Z", "allow", "api.example.test", "A", "NOERROR", "name allowed"),
		dnsLine("2025-06-01T10:00:05Z", "deny", "evil.example.test", "AAAA", "REFUSED", "name not allowed"),
		dnsLine("2025-06-01T10:00:06Z", "deny", "api.example.test.svc.cluster.local", "A", "NXDOMAIN",
			"name not allowed: api.example.test with a search-list suffix (answered NXDOMAIN)"),
		dnsLine("2025-06-01T10:00:07Z", "deny", "blocked.example.test", "HTTPS", "REFUSED", "name not allowed"),
		dnsLine("2025-06-01T10:00:08Z", "deny", "9.113.0.203.in-addr.arpa", "PTR", "REFUSED", "reverse name of an address not allowed"),
	)
	// The proxy of web resolves with its sandbox's resolvers; db's,
	// recorded without any, with the host's resolv.conf.
	a.ProxyResolvers = []netip.AddrPort{netip.MustParseAddrPort("203.0.113.53:53"), netip.MustParseAddrPort("[2001:db8::53]:53")}
	if data, err := json.Marshal(a); err != nil || os.WriteFile(filepath.Join(a.Dir, "state.json"), data, 0o600) != nil {
		t.Fatalf("state of %s: %v", a.Key, err)
	}
	b := fakeSandbox(t, stateDir, "aab222-eth0", "aab222", "db", conf.ModeOpen, false, nil)
	return stateDir, a, b
}

func TestCLIListAndShow(t *testing.T) {
	stateDir, _, _ := newState(t)
	r := doorman(stateDir, "ls")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 {
		t.Fatalf("ls: %+v", r)
	}
	// No supervisor ("-" restarts), connections allowed and denied,
	// then the queries the DNS filter refused, "-" without the filter.
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "aaa111 web cni unknown allowlist 2 down - 1 2 4 full" {
		t.Errorf("ls row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); strings.Join(f, " ") != "aab222 db cni unknown open 0 down - 0 0 - n/a" {
		t.Errorf("ls row %q", lines[2])
	}

	r = doorman(stateDir, "ls", "-o", "json")
	var infos []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil || len(infos) != 2 {
		t.Fatalf("ls -o json: %v\n%s", err, r.stdout)
	}
	if a := infos[0]; a["key"] != "aaa111-eth0" || a["allowed"] != 1.0 || a["denied"] != 2.0 || a["entries"] != 2.0 ||
		a["proxy"].(map[string]any)["health"] != "down" || a["mode"] != "allowlist" {
		t.Errorf("ls -o json: %v", a)
	}
	if dns, _ := infos[0]["dnsQueries"].(map[string]any); dns["allowed"] != 1.0 || dns["denied"] != 4.0 || dns["errors"] != 0.0 {
		t.Errorf("ls -o json dnsQueries: %v", infos[0]["dnsQueries"])
	}
	if r := doorman(stateDir, "ls", "-o", "yaml"); r.code != 2 {
		t.Errorf("ls -o yaml: %+v", r)
	}

	r = doorman(stateDir, "show", "web", "-n", "7")
	for _, want := range []string{
		"sandbox      aaa111-eth0", "runtime      cni (network net, interface eth0)", "policy       api.example.test",
		"             *.example.org:443", "proxy        NOT RUNNING", "connections  1 allowed, 2 denied, 0 failed upstream",
		"dns queries  1 allowed, 4 denied, 0 failed upstream", "proxy dns    203.0.113.53:53, [2001:db8::53]:53\n",
		"icmp         errors of admitted flows and IPv6 neighbour discovery only (allowICMP off)",
		"recent decisions:\n  2025-06-01 10:00:02.000 deny  tls     evil.example.test 203.0.113.20:443 name not allowed\n  2025-06-01 10:00:03.000 deny ",
		"\n  2025-06-01 10:00:07.000 deny  dns/udp blocked.example.test HTTPS answered REFUSED, name not allowed\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show: no %q in\n%s", want, r.stdout)
		}
	}
	if r := doorman(stateDir, "show", "db"); strings.Contains(r.stdout, "dns queries") || !strings.Contains(r.stdout, "proxy dns    this host's /etc/resolv.conf\n") {
		t.Errorf("show of a sandbox without the DNS filter counts DNS queries, or does not say its proxy resolves with the host's resolv.conf:\n%s", r.stdout)
	}
	r = doorman(stateDir, "show", "aab", "-o", "json")
	var show map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &show); err != nil || show["key"] != "aab222-eth0" || show["label"] != "n/a" {
		t.Errorf("show -o json: %v %v", err, r.stdout)
	}
	if got, ok := show["proxyResolvers"].([]any); !ok || len(got) != 0 {
		t.Errorf("show -o json: proxyResolvers %v, want [] (the host's resolv.conf)", show["proxyResolvers"])
	}
	r = doorman(stateDir, "show", "web", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &show); err != nil || fmt.Sprint(show["proxyResolvers"]) != "[203.0.113.53:53 [2001:db8::53]:53]" {
		t.Errorf("show -o json: proxyResolvers %v, %v", show["proxyResolvers"], err)
	}
}

func TestICMPSummary(t *testing.T) {
	direct := []conf.Direct{{Prefix: netip.MustParsePrefix("203.0.113.7/32")}}
	for _, tc := range []struct {
		s    sandbox.State
		want string
	}{
		{sandbox.State{Mode: "allowlist"}, "errors of admitted flows and IPv6 neighbour discovery only (allowICMP off)"},
		{sandbox.State{Mode: "allowlist", Spec: spec.Spec{AllowICMP: true}}, "only (allowICMP on, but no allowDirect destination to ping)"},
		{sandbox.State{Mode: "none", Spec: spec.Spec{AllowICMP: true, Proxy: spec.Proxy{AllowDirect: direct}}}, "only (mode none)"},
		{sandbox.State{Mode: "open", Spec: spec.Spec{AllowICMP: true, Proxy: spec.Proxy{AllowDirect: direct}}},
			"echo requests of at most 64 data bytes to allowDirect destinations; errors of admitted flows"},
	} {
		if got := icmpSummary(&tc.s); !strings.Contains(got, tc.want) {
			t.Errorf("icmpSummary(%+v) = %q, want %q in it", tc.s, got, tc.want)
		}
	}
}

func TestCLILookupErrors(t *testing.T) {
	stateDir, _, _ := newState(t)
	if r := doorman(stateDir, "show", "zzz"); r.code != exitNoMatch || r.stderr != "doorman show: no sandbox matches zzz\n" {
		t.Errorf("no match: %+v", r)
	}
	r := doorman(stateDir, "allow", "aa", "x.example.test")
	if r.code != exitAmbiguous || r.stderr != "doorman allow: 2 sandboxes match aa: aaa111-eth0 (web), aab222-eth0 (db)\n" {
		t.Errorf("ambiguous: %+v", r)
	}
	if r := doorman(stateDir, "show"); r.code != exitUsage || !strings.Contains(r.stderr, "missing arguments") {
		t.Errorf("no argument: %+v", r)
	}
	if r := doorman(stateDir, "show", "-h"); r.code != 0 || !strings.Contains(r.stderr, "usage: doorman show SANDBOX") {
		t.Errorf("-h: %+v", r)
	}
	// The environment names the state dir when the flag does not.
	t.Setenv(envStateDir, stateDir)
	var out, errb bytes.Buffer
	if code := run([]string{"show", "web"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "aaa111-eth0") {
		t.Errorf("state dir from %s: %d %s", envStateDir, code, errb.String())
	}
}

func TestCLIAllowDeny(t *testing.T) {
	stateDir, a, _ := newState(t)

	// Invalid entries: each reported, nothing changed.
	r := doorman(stateDir, "allow", "web", "ok.example.test", "bad entry", "*")
	if r.code != exitUsage || !strings.Contains(r.stderr, `invalid entry "bad entry"`) || !strings.Contains(r.stderr, `invalid entry "*"`) {
		t.Errorf("invalid entries: %+v", r)
	}
	if got := policyHosts(t, a); got != "allowlist api.example.test *.example.org:443" {
		t.Fatalf("invalid entries changed the policy: %s", got)
	}

	// Flags after the arguments, a duplicate, a canonical form.
	r = doorman(stateDir, "allow", "web", "NEW.Example.Test.", "api.example.test", "[2001:db8::1]:443", "--no-wait")
	if r.code != 0 || r.stdout != "aaa111-eth0: added new.example.test, [2001:db8::1]:443 (allowlist, 4 entries)\n" {
		t.Errorf("allow: %+v", r)
	}
	if !strings.Contains(r.stderr, "api.example.test was already allowed") || !strings.Contains(r.stderr, "proxy of aaa111-eth0 is not running") {
		t.Errorf("allow notes: %q", r.stderr)
	}
	if got := policyHosts(t, a); got != "allowlist api.example.test *.example.org:443 new.example.test [2001:db8::1]:443" {
		t.Fatalf("after allow: %s", got)
	}

	// "--" ends the flags: an entry may start with '-'.
	if r := doorman(stateDir, "allow", "web", "--", "-dash.example.test"); r.code != 0 {
		t.Errorf("allow -- -dash: %+v", r)
	}
	doorman(stateDir, "allow", "web", "new.example.test:8443")

	// Without a port: every port of the host goes.
	r = doorman(stateDir, "deny", "web", "new.example.test", "gone.example.test", "--", "-dash.example.test")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "aaa111-eth0: removed new.example.test, new.example.test:8443, -dash.example.test (") {
		t.Errorf("deny: %+v", r)
	}
	if !strings.Contains(r.stderr, "gone.example.test was not allowed") {
		t.Errorf("deny notes: %q", r.stderr)
	}
	// A name only a wildcard admits: refused, nothing changes.
	before := policyHosts(t, a)
	r = doorman(stateDir, "deny", "web", "www.example.org:443")
	if r.code != exitUsage || !strings.Contains(r.stderr, "www.example.org:443 is not an entry, but *.example.org:443 admits it") {
		t.Errorf("deny below a wildcard: %+v", r)
	}
	if got := policyHosts(t, a); got != before {
		t.Errorf("refused deny changed the policy: %s", got)
	}
	// With a port: only that entry; and say what still admits it.
	doorman(stateDir, "allow", "web", "www.example.org:443")
	r = doorman(stateDir, "deny", "web", "www.example.org:443")
	if r.code != 0 || !strings.Contains(r.stderr, "www.example.org:443 is still admitted by *.example.org:443") {
		t.Errorf("deny with a wildcard left: %+v", r)
	}
	if got := policyHosts(t, a); got != "allowlist api.example.test *.example.org:443 [2001:db8::1]:443" {
		t.Errorf("after deny: %s", got)
	}
	// One port of an entry for every port cannot be taken out.
	if r := doorman(stateDir, "deny", "web", "api.example.test:80"); r.code != exitUsage || !strings.Contains(r.stderr, "api.example.test:80 is not an entry, but api.example.test admits it") {
		t.Errorf("deny of one port of a portless entry: %+v", r)
	}
}

func TestCLIModeAndSet(t *testing.T) {
	stateDir, a, _ := newState(t)
	if r := doorman(stateDir, "mode", "web", "wide-open"); r.code != exitUsage || !strings.Contains(r.stderr, `invalid mode "wide-open"`) {
		t.Errorf("bad mode: %+v", r)
	}
	r := doorman(stateDir, "mode", "web", "OPEN")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "aaa111-eth0: mode allowlist -> open (open, 2 entries") {
		t.Errorf("mode open: %+v", r)
	}
	if got := policyHosts(t, a); got != "open api.example.test *.example.org:443" {
		t.Errorf("mode open kept the entries? %s", got)
	}
	if st, _ := sandbox.Load(stateDir, a.Key); st.Mode != "open" {
		t.Errorf("state mode %s", st.Mode)
	}
	if r := doorman(stateDir, "mode", "web", "open"); !strings.Contains(r.stdout, "nothing to change") {
		t.Errorf("same mode: %+v", r)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "p")
	for _, bad := range []struct{ content, want string }{
		{"", "is empty"},
		{"  \n# just a comment\n", ""}, // a comment is not emptiness: allowlist, no entries
		{"mode: allowlist\nok.example.test\nhttps://x.example/\nmode: open\n", "line 3"},
	} {
		os.WriteFile(file, []byte(bad.content), 0o600)
		before := policyHosts(t, a)
		r := doorman(stateDir, "set", "web", "--file", file)
		if bad.want == "" {
			continue
		}
		if r.code != exitUsage || !strings.Contains(r.stderr, bad.want) || !strings.Contains(r.stderr, "nothing changed") {
			t.Errorf("set %q: %+v", bad.content, r)
		}
		if got := policyHosts(t, a); got != before {
			t.Errorf("refused set changed the policy: %s", got)
		}
	}
	os.WriteFile(file, []byte("mode: allowlist\n# phase 2\nonly.example.test:443\n"), 0o600)
	if r := doorman(stateDir, "set", "--file", file, "aaa111"); r.code != 0 || r.stdout != "aaa111-eth0: policy replaced (allowlist, 1 entry)\n" {
		t.Errorf("set: %+v", r)
	}
	if got := policyHosts(t, a); got != "allowlist only.example.test:443" {
		t.Errorf("after set: %s", got)
	}
	if r := doorman(stateDir, "set", "web"); r.code != exitUsage || !strings.Contains(r.stderr, "--file is required") {
		t.Errorf("set without --file: %+v", r)
	}
	// A policy file broken by hand: edits refuse, set repairs.
	os.WriteFile(a.PolicyPath(), []byte("what is this\n"), 0o644)
	if r := doorman(stateDir, "allow", "web", "x.example.test"); r.code != exitFailed || !strings.Contains(r.stderr, "does not load") {
		t.Errorf("allow on a broken file: %+v", r)
	}
	if r := doorman(stateDir, "ls"); !strings.Contains(r.stdout, " invalid ") {
		t.Errorf("ls of a broken file:\n%s", r.stdout)
	}
	if r := doorman(stateDir, "set", "web", "--file", file); r.code != 0 {
		t.Errorf("set over a broken file: %+v", r)
	}
}

func TestCLILogsAndLearn(t *testing.T) {
	stateDir, _, _ := newState(t)
	r := doorman(stateDir, "logs", "web")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 9 || !strings.HasPrefix(lines[0], "2024-01-01 00:00:00.000 allow tls     old.example.test 203.0.113.9:443 rule old.example.test (up 10 B, down 20 B, 5ms)") ||
		lines[4] != "2025-06-01 10:00:04.000 allow dns/udp api.example.test A answered NOERROR, rule api.example.test (resolver 192.0.2.53:53, 250µs)" {
		t.Errorf("logs:\n%s", r.stdout)
	}
	// Denials of connections and of DNS queries, nothing else.
	r = doorman(stateDir, "logs", "web", "--denied")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 6 || strings.Contains(r.stdout, " allow ") ||
		lines[2] != "2025-06-01 10:00:05.000 deny  dns/udp evil.example.test AAAA answered REFUSED, name not allowed" {
		t.Errorf("logs --denied:\n%s", r.stdout)
	}
	r = doorman(stateDir, "logs", "web", "--denied", "-o", "json", "-n", "1")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, `"msg":"dns"`) || !strings.Contains(r.stdout, `"name":"9.113.0.203.in-addr.arpa"`) {
		t.Errorf("logs --denied -o json -n 1: %+v", r)
	}
	r = doorman(stateDir, "logs", "web", "--since", "2025-06-01T10:00:02Z")
	if strings.Count(r.stdout, "\n") != 7 {
		t.Errorf("logs --since: %+v", r)
	}
	if r := doorman(stateDir, "logs", "web", "--since", "yesterday"); r.code != exitUsage || !strings.Contains(r.stderr, `--since "yesterday"`) {
		t.Errorf("logs --since yesterday: %+v", r)
	}
	if r := doorman(stateDir, "logs", "db"); r.code != 0 || r.stdout != "" {
		t.Errorf("logs of a sandbox without a log: %+v", r)
	}

	// Since the sandbox was created: the 2024 line is not learned. The
	// name refused at the lookup, never connected to, has no port; the
	// one also seen connecting has only its ports; the search-list
	// expansion and the reverse name are not learned.
	r = doorman(stateDir, "learn", "web")
	p, err := conf.ParseFile([]byte(r.stdout))
	if r.code != 0 || err != nil || strings.Join(p.Hosts(), " ") != "api.example.test:443 blocked.example.test evil.example.test:80 evil.example.test:443" {
		t.Fatalf("learn: %v %+v", err, r)
	}
	if !strings.HasPrefix(r.stdout, "# learned by doorman from 3 connections and 2 refused DNS lookups of sandbox aaa111-eth0 (web) since ") ||
		!strings.Contains(r.stdout, "\n# (1 name only looked up, never connected to: listed without a port") {
		t.Errorf("learn header:\n%s", r.stdout)
	}
	r = doorman(stateDir, "learn", "web", "--denied", "--any-port")
	if p, _ := conf.ParseFile([]byte(r.stdout)); p == nil || strings.Join(p.Hosts(), " ") != "blocked.example.test evil.example.test" {
		t.Errorf("learn --denied --any-port: %+v", r)
	}
	r = doorman(stateDir, "learn", "web", "--wildcards")
	if p, _ := conf.ParseFile([]byte(r.stdout)); p == nil || strings.Join(p.Hosts(), " ") != "*.example.test:443 blocked.example.test evil.example.test:80" {
		t.Errorf("learn --wildcards: %+v", r)
	}
	if r := doorman(stateDir, "learn", "db"); r.code != exitFailed || r.stdout != "" || !strings.Contains(r.stderr, "nothing to learn from") {
		t.Errorf("learn without decisions: %+v", r)
	}
}

func TestOCIRuntimeFlag(t *testing.T) {
	if rt, err := ociRuntime("", nil); err != nil || rt != nil {
		t.Errorf("no --runtime: %v %v", rt, err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"", []string{"--platform=systrap"}, `--runtime-arg "--platform=systrap": given without --runtime`},
		{"runsc", []string{"systrap"}, `--runtime-arg "systrap": not a flag`},
		{"runc", nil, `--runtime "runc": doorman run runs gVisor's runsc`},
		{"/nonexistent/runsc", nil, `--runtime "/nonexistent/runsc"`},
	} {
		if _, err := ociRuntime(tc.name, tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--runtime %q %v: %v, want an error containing %q", tc.name, tc.args, err, tc.want)
		}
	}
	bin := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := ociRuntime(bin, []string{"--platform=systrap"})
	if err != nil || !slices.Equal(rt, []string{bin, "--network=sandbox", "--ignore-cgroups", "--overlay2=none", "--platform=systrap"}) {
		t.Errorf("--runtime %s: %v %v", bin, rt, err)
	}
}

// show of a pod the Kubernetes node agent computed says what shaped its
// policy and what doorman could not express exactly (from the agent's
// file on the node); a file for another pod of the same name is not its.
func TestCLIShowClusterNotes(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	s := fakeSandbox(t, stateDir, "ccc333-eth0", "team-a/web-0", "web-0", conf.ModeAllowlist, false, []string{"api.example.test:443"})
	s.PodUID = "uid-1"
	if data, err := json.Marshal(s); err != nil || os.WriteFile(filepath.Join(s.Dir, "state.json"), data, 0o600) != nil {
		t.Fatalf("state: %v", err)
	}
	agentDir := t.TempDir()
	write := func(uid string) {
		p, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"api.example.test:443"})
		data, _ := json.Marshal(agentclient.Answer{Namespace: "team-a", Name: "web-0", UID: uid, Policy: p,
			Sources: []string{"ClusterNetworkPolicy/grant", "annotations (narrow)"},
			Notes:   []string{"Pod team-a/web-0: annotation doorman.io/allowed-hosts asks for more than the cluster grants; not granted: evil.example.test"}})
		os.MkdirAll(filepath.Join(agentDir, "pods", "team-a"), 0o755)
		if err := os.WriteFile(agentclient.PodFile(agentDir, "team-a", "web-0"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("uid-1")
	r := doorman(stateDir, "show", "web-0", "--agent-dir", agentDir)
	for _, want := range []string{
		"cluster      ClusterNetworkPolicy/grant, annotations (narrow) (node agent, computed ",
		"not exact    Pod team-a/web-0: annotation doorman.io/allowed-hosts asks for more than the cluster grants; not granted: evil.example.test\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show: no %q in\n%s%s", want, r.stdout, r.stderr)
		}
	}
	r = doorman(stateDir, "show", "web-0", "--agent-dir", agentDir, "-o", "json")
	var show struct {
		Cluster *struct{ Notes []string } `json:"cluster"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &show); err != nil || show.Cluster == nil || len(show.Cluster.Notes) != 1 {
		t.Errorf("show -o json: %v %s", err, r.stdout)
	}
	write("uid-0")
	if r := doorman(stateDir, "show", "web-0", "--agent-dir", agentDir); strings.Contains(r.stdout, "not exact") || strings.Contains(r.stdout, "cluster ") {
		t.Errorf("show took another pod's file:\n%s", r.stdout)
	}
}
