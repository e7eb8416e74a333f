package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/testnet"
)

// The model API hosts of the rule set tests: the providers' real names,
// which resolve only inside the test's fake internet.
const (
	anthropicName = "api.anthropic.com"
	openAIName    = "api.openai.com"
	geminiName    = "generativelanguage.googleapis.com"
	storageName   = "storage.googleapis.com"
)

var (
	anthropicAddr = netip.MustParseAddr("203.0.113.160")
	openAIAddr    = netip.MustParseAddr("203.0.113.161")
	geminiAddr    = netip.MustParseAddr("203.0.113.162")
	storageAddr   = netip.MustParseAddr("203.0.113.163")
)

// providers adds the fake model APIs to n.
type providers struct {
	anthropic, openai, gemini, storage *testnet.Host
}

func addProviders(n *testnet.Net) providers {
	return providers{
		anthropic: n.AddHost(anthropicName, anthropicAddr),
		openai:    n.AddHost(openAIName, openAIAddr),
		gemini:    n.AddHost(geminiName, geminiAddr),
		storage:   n.AddHost(storageName, storageAddr),
	}
}

func (p providers) reset() {
	for _, h := range []*testnet.Host{p.anthropic, p.openai, p.gemini, p.storage} {
		h.ResetProviderRequests()
	}
}

// host returns the fake provider a SENT line's host names.
func (p providers) host(name string) *testnet.Host {
	switch name {
	case anthropicName:
		return p.anthropic
	case openAIName:
		return p.openai
	case geminiName:
		return p.gemini
	}
	return nil
}

// sdksDir is where .ci/run installed the SDK fixture (npm ci of
// integration/testdata/sdks), named by its lock file's hash;
// DOORMAN_SDKS overrides it. The clients are the point of the tests:
// without them the tests fail, saying how to install them.
func sdksDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("DOORMAN_SDKS"); d != "" {
		return d
	}
	lock, err := os.ReadFile("testdata/sdks/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	dir := "/opt/doorman-ci/sdks-" + hex.EncodeToString(sum[:])[:12]
	for _, m := range []string{"@anthropic-ai/sdk", "openai", "@google/genai"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", m, "package.json")); err != nil {
			t.Fatalf("the vendors' clients are not installed in %s (%v): copy integration/testdata/sdks/package{,-lock}.json there and run npm ci in it, as .ci/run does", dir, err)
		}
	}
	return dir
}

// sdkCall is one call of drive.cjs: its result, and the bodies the
// client sent for it.
type sdkCall struct {
	Text   string `json:"text"`
	Error  string `json:"error"`
	Status int    `json:"status"`
	Type   string `json:"type"`
	Tool   string `json:"tool"`
	Rule   string `json:"rule"`
	sent   []sentBody
}

type sentBody struct{ host, path, body string }

// parseDrive reads drive.cjs's output: each R line with the SENT lines
// before it.
func parseDrive(t *testing.T, out string) map[string]*sdkCall {
	t.Helper()
	calls := map[string]*sdkCall{}
	var pending []sentBody
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		switch {
		case len(f) == 3 && f[0] == "SENT":
			body, err := base64.StdEncoding.DecodeString(f[2])
			if err != nil {
				t.Fatal(err)
			}
			host, path, _ := strings.Cut(f[1], "/")
			pending = append(pending, sentBody{host, "/" + path, string(body)})
		case len(f) == 3 && f[0] == "R":
			c := &sdkCall{sent: pending}
			if err := json.Unmarshal([]byte(f[2]), c); err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			calls[f[1]] = c
			pending = nil
		}
	}
	return calls
}

// received returns the bodies a fake provider got on path.
func received(h *testnet.Host, path string) []string {
	var out []string
	for _, r := range h.ProviderRequests() {
		if r.Path == path {
			out = append(out, r.Body)
		}
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// isSubsequence reports whether out is in with bytes deleted.
func isSubsequence(out, in string) bool {
	i := 0
	for k := 0; k < len(out); k++ {
		for i < len(in) && in[i] != out[k] {
			i++
		}
		if i == len(in) {
			return false
		}
		i++
	}
	return true
}

// TestRuleSetSDKs drives the vendors' own clients (@anthropic-ai/sdk,
// openai, @google/genai, from npm, pinned) inside `doorman run` against
// fake model APIs under the providers' real names, with the closed-book
// rule set in each action: plain requests, JSON and streamed, pass with
// their bodies unchanged; each web tool is refused (deny: a 403 naming
// the tool, nothing reaching the provider), removed (strip: the provider
// gets the body without it and answers) or recorded (probe); a streamed
// answer that shows provider-side tool use is cut before the evidence.
func TestRuleSetSDKs(t *testing.T) {
	requireInspectClients(t)
	sdks := sdksDir(t)
	script, err := filepath.Abs("testdata/sdks/drive.cjs")
	if err != nil {
		t.Fatal(err)
	}
	e := newRunEnv(t)
	p := addProviders(e.net)
	plain := []string{"anthropic.plain", "anthropic.plain-stream", "openai.plain", "openai.plain-stream", "openai.responses-plain",
		"gemini.plain", "gemini.plain-stream"}
	// Each web tool, the ID it is refused by, and what of it must not
	// reach the provider.
	tools := []struct{ call, id, mark string }{
		{"anthropic.web_search", "anthropic.web_search", "web_search_20250305"},
		{"anthropic.web_fetch", "anthropic.web_fetch", "web_fetch_20250910"},
		{"openai.web_search_options", "openai.web_search", "web_search_options"},
		{"openai.web_search", "openai.web_search", `"type":"web_search"`},
		{"openai.mcp", "openai.mcp", "mcp.example.org"},
		{"gemini.google_search", "google.google_search", "googleSearch"},
		{"gemini.url_context", "google.url_context", "urlContext"},
	}
	streams := []string{"anthropic.tool-use-stream", "openai.tool-use-stream", "openai.chat-tool-use-stream", "gemini.tool-use-stream"}
	for _, action := range []string{"deny", "strip", "probe"} {
		t.Run(action, func(t *testing.T) {
			p.reset()
			dir := t.TempDir()
			policy := filepath.Join(dir, "policy")
			os.WriteFile(policy, []byte(anthropicName+"\n"+openAIName+"\n"+geminiName+"\nruleset closed-book "+action+"\n"), 0o644)
			name := runName()
			r := e.run(name, []string{"--policy", policy, "--ca-dir", filepath.Join(dir, "ca"), "--upstream-ca-file", e.caFile},
				"env", "SDKS="+sdks, "node", script)
			calls := parseDrive(t, r.stdout)
			if len(calls) == 0 {
				t.Fatalf("drive.cjs: %v", r)
			}
			call := func(n string) *sdkCall {
				c := calls[n]
				if c == nil {
					t.Fatalf("no result for %s: %v", n, r)
				}
				return c
			}
			// Plain requests: answered, and the provider got exactly
			// what the client sent.
			for _, n := range plain {
				c := call(n)
				if c.Text != testnet.PlainText || c.Error != "" {
					t.Errorf("%s: %+v", n, c)
				}
				for _, s := range c.sent {
					if got := received(p.host(s.host), s.path); !containsString(got, s.body) {
						t.Errorf("%s: the provider did not get the body the client sent, unchanged: sent %q, got %q", n, s.body, got)
					}
				}
			}
			for _, tc := range tools {
				c := call(tc.call)
				if len(c.sent) != 1 || !strings.Contains(c.sent[0].body, tc.mark) {
					t.Fatalf("%s: the client did not send %s: %+v", tc.call, tc.mark, c.sent)
				}
				s := c.sent[0]
				got := received(p.host(s.host), s.path)
				switch action {
				case "deny":
					if c.Status != 403 || c.Type != "doorman_policy" || c.Tool != tc.id {
						t.Errorf("%s: want a 403 naming %s, got %+v", tc.call, tc.id, c)
					}
					for _, b := range got {
						if strings.Contains(b, tc.mark) {
							t.Errorf("%s: the refused tool reached the provider: %q", tc.call, b)
						}
					}
				case "strip":
					if c.Text != testnet.PlainText || c.Error != "" {
						t.Errorf("%s: %+v", tc.call, c)
					}
					var fwd string
					for _, b := range got {
						if b != s.body && isSubsequence(b, s.body) && json.Valid([]byte(b)) {
							fwd = b
						}
					}
					if fwd == "" || strings.Contains(fwd, tc.mark) {
						t.Errorf("%s: the provider did not get the body without the tool: sent %q, got %q", tc.call, s.body, got)
					}
				case "probe":
					if c.Text != testnet.PlainText || !containsString(got, s.body) {
						t.Errorf("%s: %+v; the provider got %q", tc.call, c, got)
					}
				}
			}
			// Streamed answers that show tool use: cut before it,
			// except in probe mode.
			for _, n := range streams {
				c := call(n)
				cut := action != "probe"
				if cut && (c.Text != testnet.PlainText || c.Error == "" || strings.Contains(c.Text, testnet.ToolUseText)) {
					t.Errorf("%s: want the first part, then an error: %+v", n, c)
				}
				if !cut && (!strings.Contains(c.Text, testnet.ToolUseText) || c.Error != "") {
					t.Errorf("%s: probe passes the whole stream: %+v", n, c)
				}
			}
			// A JSON answer that shows tool use is refused whole.
			if c := call("anthropic.tool-use-json"); (action != "probe") != (c.Status == 403 && c.Type == "doorman_policy" && !strings.Contains(c.Error, testnet.ToolUseText)) {
				t.Errorf("anthropic.tool-use-json: %+v", c)
			}
			log, _ := os.ReadFile(filepath.Join(e.logDir, name+"-eth0.log"))
			for _, want := range []string{`"ruleset":"closed-book@1 ` + action + `"`, `"tools":["anthropic.web_search at tools[0] (web_search_20250305)"]`,
				`"evidence":["anthropic.server_tool"`, `"evidence":["openai.web_search"`, `"evidence":["google.google_search"`} {
				if !bytes.Contains(log, []byte(want)) {
					t.Errorf("the decision log lacks %s", want)
				}
			}
			if action == "probe" && !bytes.Contains(log, []byte(`"declared":["web_search_20250305"]`)) {
				t.Errorf("probe mode does not log the declared tool types")
			}
			if action == "strip" && !bytes.Contains(log, []byte(`"removed":["google.url_context at tools[0] (urlContext)","google.code_execution at tools[1] (codeExecution)"]`)) {
				t.Errorf("the decision log does not say what strip removed:\n%s", log)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			e.assertNothingLeft(name)
		})
	}
}

// adversarialScript sends, with curl inside the sandbox, the shapes a
// workload might use to slip a tool past a rule set. Each call prints
// "C TAG STATUS".
const adversarialScript = `
a=https://` + anthropicName + `
g=https://` + geminiName + `
o=https://` + openAIName + `
post() { tag=$1; url=$2; body=$3; shift 3
  echo "C $tag $(printf '%s' "$body" | curl -sS -o /dev/null -w '%{http_code}' -H 'content-type: application/json' --data-binary @- "$@" "$url")"; }
post ESC $a/v1/messages '{"model":"m","t\u006fols":[{"t\u0079pe":"web\u005fsearch_20250305","name":"w"}],"messages":[]}'
post CASE $a/v1/messages '{"TOOLS":[{"Type":"WEB_SEARCH_20250305"}],"model":"case"}'
post DUP $a/v1/messages '{"tools":[],"tools":[{"type":"web_search_20250305"}],"model":"dup"}'
post BATCH $a/v1/messages/batches '{"requests":[{"custom_id":"a","params":{"model":"m","mcp_servers":[{"type":"url","url":"https://mcp.example.org"}],"tools":[{"type":"mcp_toolset","mcp_server_name":"x"},{"type":"web_search_20250305"}]}}]}'
post H2 $a/v1/messages '{"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}],"model":"h2"}' --http2
post H1 $a/v1/messages '{"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}],"model":"h1"}' --http1.1
echo "C GZIP $(printf '%s' '{"tools":[{"type":"code_execution_20250825","name":"code_execution"}],"model":"gzip"}' | gzip | curl -sS -o /dev/null -w '%{http_code}' -H 'content-type: application/json' -H 'content-encoding: gzip' --data-binary @- $a/v1/messages)"
echo "C CHUNKED $(printf '%s' '{"tools":[{"type":"web_search_20260209","name":"web_search"}],"model":"chunked"}' | curl -sS -o /dev/null -w '%{http_code}' -H 'content-type: application/json' -H 'transfer-encoding: chunked' -X POST -T - --http1.1 $a/v1/messages)"
echo "C BR $(printf 'xx' | curl -sS -o /dev/null -w '%{http_code}' -H 'content-type: application/json' -H 'content-encoding: br' --data-binary @- $a/v1/messages)"
post URL $a/v1/messages '{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.org/a.png"}}]}],"model":"url"}'
post CHOICE $a/v1/messages '{"tools":[{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"tool","name":"web_search"},"model":"choice"}'
post SNAKE $g/v1beta/models/m:generateContent '{"tools":[{"google_search":{}}],"contents":[]}'
post CAMEL $g/v1beta/models/m:streamGenerateContent?alt=sse '{"tools":[{"functionDeclarations":[{"name":"f"}],"googleSearch":{}},{"urlContext":{}}],"contents":[]}' --http2
post OAIINC $o/v1/responses '{"model":"gpt","tools":[{"type":"web_search_preview"}],"include":["web_search_call.action.sources"],"input":"x"}'
post FRONT https://` + storageName + `/v1beta/models/m:generateContent '{"tools":[{"googleSearch":{}}],"contents":[]}' -H 'host: ` + geminiName + `'
`

// TestRuleSetAdversarial: the shapes that might slip a tool past a rule
// set (escapes in keys and values, a key in another case or given twice,
// the tool in a batch, a gzip or chunked body, HTTP/1.1 and HTTP/2, both
// key spellings, a request for the API inside a sibling's TLS session)
// are refused (deny) or rewritten (strip), and what reaches the provider
// never carries the tool.
func TestRuleSetAdversarial(t *testing.T) {
	requireInspectClients(t)
	e := newRunEnv(t)
	p := addProviders(e.net)
	// What each request must be forwarded as under strip ("" refused
	// in both actions, the provider getting nothing).
	strip := map[string]string{
		"ESC":     `{"model":"m","t\u006fols":[],"messages":[]}`,
		"CASE":    `{"TOOLS":[],"model":"case"}`,
		"DUP":     "",
		"BATCH":   `{"requests":[{"custom_id":"a","params":{"model":"m","tools":[]}}]}`,
		"H2":      `{"tools":[],"model":"h2"}`,
		"H1":      `{"tools":[],"model":"h1"}`,
		"GZIP":    `{"tools":[],"model":"gzip"}`,
		"CHUNKED": `{"tools":[],"model":"chunked"}`,
		"URL":     "",
		"CHOICE":  "",
		"SNAKE":   `{"tools":[],"contents":[]}`,
		"CAMEL":   `{"tools":[{"functionDeclarations":[{"name":"f"}]}],"contents":[]}`,
		"OAIINC":  `{"model":"gpt","tools":[],"include":[],"input":"x"}`,
		"FRONT":   "",
	}
	for _, action := range []string{"deny", "strip"} {
		t.Run(action, func(t *testing.T) {
			p.reset()
			dir := t.TempDir()
			policy := filepath.Join(dir, "policy")
			os.WriteFile(policy, []byte(strings.Join([]string{anthropicName, openAIName, geminiName, storageName, "ruleset closed-book " + action, ""}, "\n")), 0o644)
			name := runName()
			r := e.run(name, []string{"--policy", policy, "--ca-dir", filepath.Join(dir, "ca"), "--upstream-ca-file", e.caFile},
				"sh", "-c", adversarialScript)
			codes := map[string]string{}
			for _, l := range strings.Split(r.stdout, "\n") {
				if f := strings.Fields(l); len(f) == 3 && f[0] == "C" {
					codes[f[1]] = f[2]
				}
			}
			var got []string
			for _, h := range []*testnet.Host{p.anthropic, p.openai, p.gemini, p.storage} {
				for _, req := range h.ProviderRequests() {
					got = append(got, req.Body)
					if req.Header.Get("Content-Encoding") != "" {
						t.Errorf("a body reached the provider with Content-Encoding %q", req.Header.Get("Content-Encoding"))
					}
				}
			}
			for tag, fwd := range strip {
				want := "403"
				if action == "strip" && fwd != "" {
					want = "200"
				}
				if codes[tag] != want {
					t.Errorf("%s: status %q, want %s", tag, codes[tag], want)
				}
				if action == "strip" && fwd != "" && !containsString(got, fwd) {
					t.Errorf("%s: the provider did not get %s", tag, fwd)
				}
			}
			if codes["BR"] != "415" {
				t.Errorf("a br body: %q", codes["BR"])
			}
			for _, b := range got {
				for _, mark := range []string{"web_search", "web_fetch", "code_execution", "mcp", "google", "Search", "urlContext", "example.org"} {
					if strings.Contains(strings.ReplaceAll(b, `\u005f`, "_"), mark) {
						t.Errorf("the provider got %s, with %s", b, mark)
					}
				}
			}
			if action == "deny" && len(got) != 0 {
				t.Errorf("deny: the provider got %q", got)
			}
			log, _ := os.ReadFile(filepath.Join(e.logDir, name+"-eth0.log"))
			if !bytes.Contains(log, []byte(`"proto":"h2"`)) || !bytes.Contains(log, []byte("request for another host inside the session: "+geminiName)) {
				t.Errorf("the log lacks the HTTP/2 requests or the sibling's refusal")
			}
			if t.Failed() {
				t.Logf("%v\nprovider got %q\n%s", r, got, log)
			}
			e.assertNothingLeft(name)
		})
	}
}

// TestRuleSetProbeReport: a CNI sandbox whose conflist names closed-book
// in probe mode (in its inspect key) runs the vendors' clients with a
// few tools; `doorman tools` then lists exactly the tools they sent, the
// rule set that stops each, the declared tool types no set knows, and
// the responses that showed tool use; `doorman show` names the set and
// warns about an allowed name that shares an inspected host's domain.
func TestRuleSetProbeReport(t *testing.T) {
	requireInspectClients(t)
	sdks := sdksDir(t)
	script, _ := filepath.Abs("testdata/sdks/drive.cjs")
	e := newCNIEnv(t)
	addProviders(e.net)
	caRoot := filepath.Join(t.TempDir(), "ca")
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{
		"allowedHosts":   []string{apiName, otherName, anthropicName, openAIName, geminiName},
		"caDir":          caRoot,
		"upstreamCAFile": e.caFile,
		"inspect": map[string]any{
			"rulesets": []any{map[string]any{"name": "closed-book", "action": "probe"}},
			apiName:    map[string]any{"deny": []any{map[string]any{"method": "DELETE"}}},
		},
	}))
	id := c.rt.ContainerID
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := c.ns.Command(ctx, "env", "SDKS="+sdks, "NODE_EXTRA_CA_CERTS="+filepath.Join(caRoot, "dmnet", "ca.crt"),
		"CASES=anthropic.plain,anthropic.web_search,openai.mcp,gemini.google_search,gemini.tool-use-stream", "node", script)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(out), "\nR ")+strings.Count(string(out[:min(2, len(out))]), "R ") < 5 {
		t.Fatalf("drive.cjs: %v\n%s", err, out)
	}
	calls := parseDrive(t, string(out))
	for _, n := range []string{"anthropic.plain", "anthropic.web_search", "openai.mcp", "gemini.google_search"} {
		if calls[n] == nil || calls[n].Text != testnet.PlainText {
			t.Fatalf("%s: probe mode passes everything: %+v\n%s", n, calls[n], out)
		}
	}
	var report struct {
		Hosts []struct {
			Host  string
			Tools []struct {
				ID        string
				Requests  int
				StoppedBy string
			}
			Declared []struct {
				Type string
				Tool string
			}
			Evidence []struct {
				ID      string
				Unasked int
			}
		}
	}
	r := e.mustCLI("tools", id, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &report); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	tools := map[string][]string{}
	declared := map[string]string{}
	evidence := map[string]int{}
	for _, h := range report.Hosts {
		for _, tl := range h.Tools {
			tools[h.Host] = append(tools[h.Host], tl.ID)
			if tl.Requests != 1 || !strings.HasPrefix(tl.StoppedBy, "closed-book@1 (deny refuses it, strip removes it") {
				t.Errorf("%s %s: %+v", h.Host, tl.ID, tl)
			}
		}
		for _, d := range h.Declared {
			declared[d.Type] = d.Tool
		}
		for _, ev := range h.Evidence {
			evidence[ev.ID] = ev.Unasked
		}
	}
	want := map[string][]string{anthropicName: {"anthropic.web_search"}, openAIName: {"openai.mcp"}, geminiName: {"google.google_search"}}
	for h, ids := range want {
		if strings.Join(tools[h], ",") != strings.Join(ids, ",") {
			t.Errorf("%s: tools %q, want exactly %q", h, tools[h], ids)
		}
	}
	if len(tools) != 3 {
		t.Errorf("tools on other hosts: %q", tools)
	}
	if declared["web_search_20250305"] != "anthropic.web_search" || declared["mcp"] != "openai.mcp" || declared["googleSearch"] != "google.google_search" {
		t.Errorf("declared: %q", declared)
	}
	if tool, ok := declared["functionDeclarations"]; !ok || tool != "" {
		t.Errorf("function declarations are not reported as outside every set: %q", declared)
	}
	if unasked, ok := evidence["google.google_search"]; !ok || unasked != 1 {
		// The stream that showed grounding asked for no tool: a tool
		// ran that no request rule found.
		t.Errorf("evidence: %v", evidence)
	}
	text := e.mustCLI("tools", id).stdout
	for _, s := range []string{"anthropic.web_search", "closed-book@1", "not in any rule set", "functionDeclarations", "NOT COVERED"} {
		if !strings.Contains(text, s) {
			t.Errorf("doorman tools does not say %q:\n%s", s, text)
		}
	}
	show := e.mustCLI("show", id).stdout
	if !strings.Contains(show, "closed-book@1 probe") || !strings.Contains(show, otherName+" is allowed but not inspected") {
		t.Errorf("doorman show:\n%s", show)
	}
	if err := e.del(c); err != nil {
		t.Fatal(err)
	}
}

// TestRuleSetBodyMemory: a request whose body holds many objects on a
// rule set's paths (1.5 million "{}" under tools[], 4.5 MB) is refused
// at once, the proxy staying up and serving the next request. Judging
// such a body cost some hundreds of bytes an object (conf's
// TestRuleSetJudgeMemory: 320 MB of allocations for 1 MiB of them),
// gigabytes here, more than the 256 MiB a proxy's cgroup holds by
// default; before the bound this request was judged for seconds and
// passed (200).
func TestRuleSetBodyMemory(t *testing.T) {
	requireInspectClients(t)
	e := newRunEnv(t)
	p := addProviders(e.net)
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy")
	os.WriteFile(policy, []byte(anthropicName+"\nruleset closed-book\n"), 0o644)
	script := `a=https://` + anthropicName + `/v1/messages
echo "C BIG $({ printf '{"model":"m","messages":[],"tools":['; yes '{},' | head -n 1500000 | tr -d '\n'; printf '{}]}'; } | curl -sS -m 60 -o /dev/null -w '%{http_code}' -H 'content-type: application/json' --data-binary @- $a)"
echo "C NEXT $(curl -sS -m 30 -o /dev/null -w '%{http_code}' -H 'content-type: application/json' --data-binary '{"model":"m","max_tokens":1,"messages":[]}' $a)"
`
	name := runName()
	r := e.run(name, []string{"--policy", policy, "--ca-dir", filepath.Join(dir, "ca"), "--upstream-ca-file", e.caFile}, "sh", "-c", script)
	codes := map[string]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "C" {
			codes[f[1]] = f[2]
		}
	}
	if codes["BIG"] != "403" || codes["NEXT"] != "200" {
		log, _ := os.ReadFile(filepath.Join(e.logDir, name+"-eth0.log"))
		t.Fatalf("a body of 1.5 million objects: %q, the next request: %q (%v)\n%s", codes["BIG"], codes["NEXT"], r, log)
	}
	if got := p.anthropic.ProviderRequests(); len(got) != 1 {
		t.Errorf("the provider got %d requests, want 1", len(got))
	}
	e.assertNothingLeft(name)
}
