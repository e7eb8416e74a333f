package integration

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
				`"evidence":["anthropic.server_tool"`, `"evidence":["openai.web_search"`, `"evidence":["google.google_search"`, `"declared":["web_search_20250305"]`} {
				if !bytes.Contains(log, []byte(want)) {
					t.Errorf("the decision log lacks %s", want)
				}
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
