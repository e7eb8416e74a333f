package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIInspectEdits: request rules from a conflist's inspect key, then
// edited live with doorman allow/deny --inspect, shown by doorman show,
// bad edits refused with nothing changed, and the network's CA grown with
// the inspected hosts.
func TestCLIInspectEdits(t *testing.T) {
	e := newCNIEnv(t)
	caRoot := filepath.Join(t.TempDir(), "ca")
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{
		"allowedHosts":   []string{apiName, otherName},
		"caDir":          caRoot,
		"upstreamCAFile": e.caFile,
		"inspect":        map[string]any{apiName: map[string]any{"allow": []any{map[string]any{"method": "GET"}}, "default": "deny"}},
	}))
	id := c.rt.ContainerID
	caCert := filepath.Join(caRoot, "dmnet", "ca.crt")
	status := func(method, path string) string {
		t.Helper()
		r := curl(t, c.ns, caCert, "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "https://"+apiName+path)
		return r.stdout
	}
	if got := status("GET", "/"); got != "200" {
		t.Fatalf("GET under allow GET: %s", got)
	}
	if got := status("POST", "/"); got != "403" {
		t.Fatalf("POST under default deny: %s", got)
	}
	if r := e.mustCLI("show", id); !strings.Contains(r.stdout, apiName+" allow GET") || !strings.Contains(r.stdout, apiName+" default deny") {
		t.Fatalf("show does not print the rules:\n%s", r.stdout)
	}

	r := e.mustCLI("deny", id, "--inspect", apiName, "GET", "/private/*")
	if !strings.Contains(r.stdout, `added deny rule "GET /private/*"`) || !strings.Contains(r.stdout, "in force") {
		t.Fatalf("deny --inspect: %v", r)
	}
	if got := status("GET", "/private/x"); got != "403" {
		t.Fatalf("GET under the new deny rule: %s", got)
	}
	if got := status("GET", "/public"); got != "200" {
		t.Fatalf("GET elsewhere: %s", got)
	}
	// An edit of the allowlist keeps the rules.
	e.mustCLI("allow", id, evilName)
	if got := status("GET", "/private/x"); got != "403" {
		t.Fatalf("an allowlist edit dropped the rules: %s", got)
	}

	// Bad input changes nothing: a rule that does not parse, a secret
	// file that cannot be read.
	policyPath := e.state(c).PolicyPath()
	before, _ := os.ReadFile(policyPath)
	if r := e.cli("", "allow", id, "--inspect", apiName, "json:a..b"); r.code != 2 || !strings.Contains(r.stderr, "empty key") || !strings.Contains(r.stderr, "nothing changed") {
		t.Errorf("a bad rule: %v", r)
	}
	bad := string(before) + "inspect " + apiName + " inject x-api-key dm-ph /nonexistent/secret\n"
	if r := e.cli(bad, "set", id, "--file", "-"); r.code == 0 || !strings.Contains(r.stderr, "/nonexistent/secret") {
		t.Errorf("a missing secret file: %v", r)
	}
	if after, _ := os.ReadFile(policyPath); string(after) != string(before) {
		t.Errorf("a refused edit changed the policy file:\n%s", after)
	}

	// Inspecting another host re-issues the CA for it, in place.
	e.mustCLI("allow", id, "--inspect", otherName)
	if r := e.mustCLI("ca", "--ca-dir", caRoot, "show", "dmnet"); !strings.Contains(r.stdout, apiName) || !strings.Contains(r.stdout, otherName) {
		t.Fatalf("ca show after inspecting %s:\n%s", otherName, r.stdout)
	}
	if r := curl(t, c.ns, caCert, "https://"+otherName+"/"); r.exit != 0 || !strings.HasPrefix(r.stdout, otherName+" ") {
		t.Fatalf("the newly inspected host with the re-issued CA: %v", r)
	}

	// Stop inspecting: the host is spliced again and carries its own
	// certificate (the fake internet's CA verifies it, doorman's does not).
	e.mustCLI("allow", id, "--inspect", apiName, "--remove")
	if r := curl(t, c.ns, e.caFile, "-X", "POST", "https://"+apiName+"/"); r.exit != 0 || !strings.HasPrefix(r.stdout, apiName+" ") {
		t.Fatalf("after --remove, POST with the origin's CA: %v", r)
	}
	if r := e.mustCLI("ca", "--ca-dir", caRoot, "rotate", "dmnet"); !strings.Contains(r.stdout, "rotated") || strings.Contains(r.stdout, apiName) {
		t.Fatalf("rotate narrows to the inspected hosts: %v", r)
	}
	if err := e.del(c); err != nil {
		t.Fatal(err)
	}
}
