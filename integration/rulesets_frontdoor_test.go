package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/hook"
)

// frontDoorScript posts a plain Messages request and one with a web tool
// to the fake Anthropic API, printing "C TAG STATUS" for each and the
// web request's answer after "B WEB ".
const frontDoorScript = `
a=https://` + anthropicName + `
echo "C PLAIN $(printf '%s' '{"model":"plain","messages":[]}' | curl -sS -o /dev/null -w '%{http_code}' -H 'content-type: application/json' --data-binary @- $a/v1/messages)"
out=$(mktemp)
code=$(printf '%s' '{"model":"web","tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[]}' | curl -sS -o "$out" -w '%{http_code}' -H 'content-type: application/json' --data-binary @- $a/v1/messages)
echo "C WEB $code"
echo "B WEB $(tr -d '\n' < "$out")"
rm -f "$out"
`

// frontDoorResult reads what frontDoorScript printed: the statuses by
// tag, and the web request's answer.
func frontDoorResult(out string) (codes map[string]string, webBody string) {
	codes = map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "C" {
			codes[f[1]] = f[2]
		}
		if b, ok := strings.CutPrefix(l, "B WEB "); ok {
			webBody = b
		}
	}
	return codes, webBody
}

// TestRuleSetRunFlag: `doorman run --ruleset closed-book` (no policy
// file: --allow names the API host, the flag alone puts the set in
// force) refuses a request that asks for a web tool with a 403 naming
// it, nothing of it reaching the provider, and passes a plain request;
// `--ruleset closed-book:strip` forwards the request without the tool.
func TestRuleSetRunFlag(t *testing.T) {
	requireInspectClients(t)
	e := newRunEnv(t)
	p := addProviders(e.net)
	for _, c := range []struct {
		flag, web string
		fwd       string // what the provider gets of the web request ("" nothing)
	}{
		{"closed-book", "403", ""},
		{"closed-book:strip", "200", `{"model":"web","tools":[],"messages":[]}`},
	} {
		t.Run(c.flag, func(t *testing.T) {
			p.reset()
			dir := t.TempDir()
			name := runName()
			r := e.run(name, []string{"--allow", anthropicName, "--ruleset", c.flag, "--ca-dir", filepath.Join(dir, "ca"), "--upstream-ca-file", e.caFile},
				"sh", "-c", frontDoorScript)
			codes, body := frontDoorResult(r.stdout)
			got := received(p.anthropic, "/v1/messages")
			if codes["PLAIN"] != "200" || !containsString(got, `{"model":"plain","messages":[]}`) {
				t.Errorf("the plain request: status %q, provider got %q", codes["PLAIN"], got)
			}
			if codes["WEB"] != c.web {
				t.Errorf("the web tool request: status %q, want %s (answer %s)", codes["WEB"], c.web, body)
			}
			if c.fwd == "" {
				if !strings.Contains(body, "anthropic.web_search") || !strings.Contains(body, "closed-book@") {
					t.Errorf("the 403 does not name the tool and the set: %s", body)
				}
			} else if !containsString(got, c.fwd) {
				t.Errorf("the provider did not get %s: %q", c.fwd, got)
			}
			for _, b := range got {
				if strings.Contains(b, "web_search") {
					t.Errorf("the provider got the web tool: %s", b)
				}
			}
			if t.Failed() {
				log, _ := os.ReadFile(filepath.Join(e.logDir, name+"-eth0.log"))
				t.Logf("%v\n%s", r, log)
			}
			e.assertNothingLeft(name)
		})
	}
}

// dockerRuleSets: containers whose policy puts closed-book in force
// through Docker's front door, as a benchmark harness runs an agent: the
// doorman.io/rulesets label (deny), and the doorman.io/inspect label's
// rulesets key (strip), beside the allowlist labels. A plain Messages
// request passes; one that asks for the web search tool is refused with
// a 403 naming the tool, nothing of it reaching the provider (deny), or
// forwarded without the tool (strip). `doorman show` names the set, its
// version and its action.
func dockerRuleSets(t *testing.T, d *dockerEnv) {
	cfg := d.runtime
	cfg.CADir = t.TempDir()
	cfg.UpstreamCAFile = d.net.WriteCA(t.TempDir())
	d.writeRuntimeConfig(t, cfg)
	t.Cleanup(func() { d.writeRuntimeConfig(t, d.runtime) })
	p := addProviders(d.net)
	base := []string{"--label", hook.AnnotationMode + "=allowlist", "--label", hook.AnnotationAllowedHosts + "=" + anthropicName}
	for _, c := range []struct {
		name  string
		label string
		web   string
		fwd   string // what the provider gets of the web request ("" nothing)
		shown string // in doorman show
	}{
		{"rulesets label", hook.AnnotationRuleSets + "=closed-book", "403", "", "closed-book@1 deny"},
		{"inspect label", hook.AnnotationInspect + `={"rulesets":[{"name":"closed-book","action":"strip"}]}`, "200", `{"model":"web","tools":[],"messages":[]}`, "closed-book@1 strip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p.reset()
			id := d.startProbe("dm-rulesets-"+strings.Fields(c.name)[0]+"-"+d.id, append(slices.Clone(base), "--label", c.label)...)
			defer d.mustDocker("rm", "-f", id)
			// No --ca: the container trusts the bundle doorman mounted,
			// with the network's CA.
			api := "https://" + anthropicName + "/v1/messages"
			if r := d.probe(id, "get", api, "--data", `{"model":"plain","messages":[]}`); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n") {
				t.Errorf("the plain request: %v", r)
			}
			r := d.probe(id, "get", api, "--data", `{"model":"web","tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[]}`)
			if r.exit != 0 || !strings.HasPrefix(r.stdout, "status: "+c.web+"\n") {
				t.Errorf("the web tool request: %v, want status %s", r, c.web)
			}
			got := received(p.anthropic, "/v1/messages")
			if !containsString(got, `{"model":"plain","messages":[]}`) {
				t.Errorf("the provider did not get the plain request: %q", got)
			}
			if c.fwd == "" {
				if !strings.Contains(r.stdout, "anthropic.web_search") || !strings.Contains(r.stdout, "closed-book@1") {
					t.Errorf("the 403 does not name the tool and the set: %s", r.stdout)
				}
			} else if !containsString(got, c.fwd) {
				t.Errorf("the provider did not get %s: %q", c.fwd, got)
			}
			for _, b := range got {
				if strings.Contains(b, "web_search") {
					t.Errorf("the provider got the web tool: %s", b)
				}
			}
			out, err := exec.Command(doormanBin(), "show", "--state-dir", d.stateDir, id).CombinedOutput()
			if err != nil || !strings.Contains(string(out), c.shown) {
				t.Errorf("doorman show %s: %v, want %q in:\n%s", id, err, c.shown, out)
			}
			if t.Failed() {
				log, _ := os.ReadFile(d.state(id).LogFile)
				t.Logf("decision log:\n%s", log)
			}
		})
	}
}

// TestRuleSetPodAnnotation: a CNI sandbox whose pod annotations (the
// runtimeConfig capability containerd and CRI-O fill) carry
// doorman.io/rulesets=closed-book, on a network whose own policy has no
// rule set: a plain Messages request passes, one that asks for the web
// search tool is refused with a 403 naming it, nothing of it reaching the
// provider; `doorman show` names the set.
func TestRuleSetPodAnnotation(t *testing.T) {
	requireInspectClients(t)
	e := newCNIEnv(t)
	p := addProviders(e.net)
	caRoot := filepath.Join(t.TempDir(), "ca")
	c := e.newContainer()
	c.rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "ns"}, {"K8S_POD_NAME", "agent"}}
	c.rt.CapabilityArgs = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"doorman.io/rulesets": "closed-book"}}
	e.mustAdd(c, e.conflist(map[string]any{
		"allowedHosts":   []string{anthropicName},
		"caDir":          caRoot,
		"upstreamCAFile": e.caFile,
		"capabilities":   map[string]bool{"io.kubernetes.cri.pod-annotations": true},
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := c.ns.Command(ctx, "env", "CURL_CA_BUNDLE="+filepath.Join(caRoot, "dmnet", "ca.crt"), "sh", "-c", frontDoorScript).CombinedOutput()
	codes, body := frontDoorResult(string(out))
	got := received(p.anthropic, "/v1/messages")
	if codes["PLAIN"] != "200" || !containsString(got, `{"model":"plain","messages":[]}`) {
		t.Errorf("the plain request: status %q, provider got %q (%v: %s)", codes["PLAIN"], got, err, out)
	}
	if codes["WEB"] != "403" || !strings.Contains(body, "anthropic.web_search") || !strings.Contains(body, "closed-book@1") {
		t.Errorf("the web tool request: status %q, answer %s; want a 403 naming the tool and the set", codes["WEB"], body)
	}
	for _, b := range got {
		if strings.Contains(b, "web_search") {
			t.Errorf("the provider got the web tool: %s", b)
		}
	}
	if r := e.mustCLI("show", c.rt.ContainerID); !strings.Contains(r.stdout, "closed-book@1 deny") {
		t.Errorf("doorman show does not name the set:\n%s", r.stdout)
	}
}

// TestRuleSetSet: `doorman set` puts a policy file with a ruleset line in
// force on a running CNI sandbox that inspected nothing: the web search
// request that passed before is then refused, the plain one still passes,
// and `doorman show` names the set.
func TestRuleSetSet(t *testing.T) {
	requireInspectClients(t)
	e := newCNIEnv(t)
	p := addProviders(e.net)
	caRoot := filepath.Join(t.TempDir(), "ca")
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"allowedHosts": []string{anthropicName}, "caDir": caRoot, "upstreamCAFile": e.caFile}))
	policy := filepath.Join(t.TempDir(), "closed.policy")
	if err := os.WriteFile(policy, []byte(anthropicName+"\nruleset closed-book\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.cli("", "set", c.rt.ContainerID, "--file", policy); r.code != 0 {
		t.Fatalf("doorman set: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := c.ns.Command(ctx, "env", "CURL_CA_BUNDLE="+filepath.Join(caRoot, "dmnet", "ca.crt"), "sh", "-c", frontDoorScript).CombinedOutput()
	codes, body := frontDoorResult(string(out))
	got := received(p.anthropic, "/v1/messages")
	if codes["PLAIN"] != "200" || !containsString(got, `{"model":"plain","messages":[]}`) {
		t.Errorf("the plain request: status %q, provider got %q (%v: %s)", codes["PLAIN"], got, err, out)
	}
	if codes["WEB"] != "403" || !strings.Contains(body, "anthropic.web_search") {
		t.Errorf("the web tool request: status %q, answer %s; want a 403 naming the tool", codes["WEB"], body)
	}
	if r := e.mustCLI("show", c.rt.ContainerID); !strings.Contains(r.stdout, "closed-book@1 deny") {
		t.Errorf("doorman show does not name the set:\n%s", r.stdout)
	}
}
