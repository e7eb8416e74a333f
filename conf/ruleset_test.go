package conf

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
)

// closedBook returns the policy "ruleset closed-book ACTION" admitting
// every provider host the tests use.
func closedBook(t testing.TB, action string) *Policy {
	t.Helper()
	p, err := ParseFile([]byte("mode: open\nruleset closed-book " + action + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// judge runs every set in force for host on one request.
func judge(t *testing.T, p *Policy, host, method, path, body string, hdr ...string) SetJudgement {
	t.Helper()
	sets := p.RuleSetsFor(host)
	if len(sets) != 1 {
		t.Fatalf("%s: %d rule sets in force", host, len(sets))
	}
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Add(hdr[i], hdr[i+1])
	}
	r := &Request{Method: method, Path: path, Header: h}
	if sets[0].NeedsBody(r) {
		r.Body = []byte(body)
	}
	return sets[0].Judge(r)
}

func ids(fs []SetFinding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.ID)
	}
	return out
}

// Every request shape of every provider in the issue, in each action:
// what deny refuses, what strip removes (the bytes forwarded), what
// probe records.
func TestClosedBookRequests(t *testing.T) {
	const (
		anth   = "api.anthropic.com"
		oai    = "api.openai.com"
		gem    = "generativelanguage.googleapis.com"
		vertex = "us-central1-aiplatform.googleapis.com"
		xai    = "api.x.ai"
		mis    = "api.mistral.ai"
		ppx    = "api.perplexity.ai"
		or     = "openrouter.ai"
	)
	for _, c := range []struct {
		name, host, method, path, body string
		hdr                            []string
		tools                          []string // IDs found
		deny                           bool     // deny refuses
		strip                          string   // strip forwards this ("" refuses; "=" forwards unchanged)
	}{
		{name: "anthropic plain", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"model":"m","max_tokens":5,"tools":[{"type":"bash_20250124","name":"bash"}],"messages":[{"role":"user","content":"hi"}]}`,
			strip: "="},
		{name: "anthropic web search", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"model":"m","tools":[{"type":"bash_20250124","name":"bash"}, {"type":"web_search_20250305","name":"web_search","max_uses":5} ,{"name":"f","input_schema":{}}]}`,
			tools: []string{"anthropic.web_search"}, deny: true,
			strip: `{"model":"m","tools":[{"type":"bash_20250124","name":"bash"}, {"name":"f","input_schema":{}}]}`},
		{name: "anthropic every server tool", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"tools":[{"type":"web_fetch_20260318","name":"web_fetch"},{"type":"code_execution_20260521","name":"code_execution"},{"type":"mcp_toolset","mcp_server_name":"x"}],"mcp_servers":[{"type":"url","url":"https://mcp.example/sse","name":"x"}],"model":"m"}`,
			tools: []string{"anthropic.web_fetch", "anthropic.code_execution", "anthropic.mcp", "anthropic.mcp"}, deny: true,
			strip: `{"tools":[],"model":"m"}`},
		{name: "anthropic escapes in keys and values", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"t\u006fols":[{"t\u0079pe":"web\u005fsearch_20250305","name":"w"}]}`,
			tools: []string{"anthropic.web_search"}, deny: true, strip: `{"t\u006fols":[]}`},
		{name: "anthropic key in another case", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"TOOLS":[{"Type":"WEB_SEARCH_20250305"}]}`,
			tools: []string{"anthropic.web_search"}, deny: true, strip: `{"TOOLS":[]}`},
		{name: "anthropic duplicate key", host: anth, method: "POST", path: "/v1/messages",
			body: `{"tools":[],"tools":[{"type":"web_search_20250305"}]}`, deny: true},
		{name: "anthropic duplicate key in a tool", host: anth, method: "POST", path: "/v1/messages",
			body: `{"tools":[{"type":"bash_20250124","type":"web_search_20250305"}]}`, deny: true},
		{name: "anthropic tool_choice names the removed tool", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"tools":[{"type":"web_search_20250305","name":"web_search"},{"name":"f"}],"tool_choice":{"type":"tool","name":"web_search"}}`,
			tools: []string{"anthropic.web_search"}, deny: true},
		{name: "anthropic tool_choice any, no tool left", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"tools":[{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"any"}}`,
			tools: []string{"anthropic.web_search"}, deny: true},
		{name: "anthropic tool_choice auto", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"tools":[{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"auto"}}`,
			tools: []string{"anthropic.web_search"}, deny: true, strip: `{"tools":[],"tool_choice":{"type":"auto"}}`},
		{name: "anthropic path spellings", host: anth, method: "post", path: "//V1/Messages/;x",
			body:  `{"tools":[{"type":"web_search_20250305"}]}`,
			tools: []string{"anthropic.web_search"}, deny: true, strip: `{"tools":[]}`},
		{name: "anthropic batch", host: anth, method: "POST", path: "/v1/messages/batches",
			body:  `{"requests":[{"custom_id":"a","params":{"model":"m","mcp_servers":[{"type":"url","url":"u"}],"tools":[{"type":"web_search_20250305"},{"name":"f"}]}},{"custom_id":"b","params":{"model":"m"}}]}`,
			tools: []string{"anthropic.web_search", "anthropic.mcp"}, deny: true,
			strip: `{"requests":[{"custom_id":"a","params":{"model":"m","tools":[{"name":"f"}]}},{"custom_id":"b","params":{"model":"m"}}]}`},
		{name: "anthropic URL image", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x.example/a.png"}}]}]}`,
			tools: []string{"anthropic.url_source"}, deny: true},
		{name: "anthropic URL document in a tool result", host: anth, method: "POST", path: "/v1/messages",
			body:  `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"document","source":{"type":"URL","url":"https://x"}}]}]}]}`,
			tools: []string{"anthropic.url_source"}, deny: true},
		{name: "anthropic not JSON", host: anth, method: "POST", path: "/v1/messages", body: "\xff\xfe{\x00}\x00", deny: true},
		{name: "anthropic no body", host: anth, method: "POST", path: "/v1/messages", body: "", strip: "="},
		{name: "anthropic managed agents", host: anth, method: "GET", path: "/v1/sessions/abc", tools: []string{"anthropic.managed_agents"}, deny: true},
		{name: "anthropic websocket", host: anth, method: "GET", path: "/v1/x", hdr: []string{"Upgrade", "websocket"}, tools: []string{"anthropic.websocket"}, deny: true},
		{name: "anthropic files API", host: anth, method: "POST", path: "/v1/files", body: "--b\r\n...", strip: "="},

		{name: "openai responses web search", host: oai, method: "POST", path: "/v1/responses",
			body:  `{"model":"gpt-5","tools":[{"type":"web_search_preview"},{"type":"function","name":"f"}],"include":["web_search_call.action.sources","reasoning.encrypted_content"]}`,
			tools: []string{"openai.web_search"}, deny: true,
			strip: `{"model":"gpt-5","tools":[{"type":"function","name":"f"}],"include":["reasoning.encrypted_content"]}`},
		{name: "openai include alone", host: oai, method: "POST", path: "/v1/responses",
			body: `{"model":"gpt-5","include":["web_search_call.action.sources"]}`, strip: "="},
		{name: "openai tool_choice hosted tool", host: oai, method: "POST", path: "/v1/responses",
			body:  `{"tools":[{"type":"web_search"},{"type":"function","name":"f"}],"tool_choice":{"type":"web_search"}}`,
			tools: []string{"openai.web_search"}, deny: true},
		{name: "openai tool_choice required, nothing left", host: oai, method: "POST", path: "/v1/responses",
			body: `{"tools":[{"type":"mcp","server_label":"s","server_url":"https://m"}],"tool_choice":"required"}`, tools: []string{"openai.mcp"}, deny: true},
		{name: "openai shell local", host: oai, method: "POST", path: "/v1/responses",
			body: `{"tools":[{"type":"shell","environment":{"type":"local"}}]}`, strip: "="},
		{name: "openai shell hosted, code interpreter", host: oai, method: "POST", path: "/v1/responses",
			body:  `{"tools":[{"type":"shell","environment":{"type":"container_auto"}},{"type":"code_interpreter","container":{"type":"auto"}},{"type":"shell"}]}`,
			tools: []string{"openai.shell", "openai.code_interpreter", "openai.shell"}, deny: true, strip: `{"tools":[]}`},
		{name: "openai stored prompt", host: oai, method: "POST", path: "/v1/responses", body: `{"prompt":{"id":"pmpt_1"}}`, tools: []string{"openai.stored_prompt"}, deny: true},
		{name: "openai chat web_search_options", host: oai, method: "POST", path: "/v1/chat/completions",
			body:  `{"model":"gpt-5","web_search_options":{},"messages":[]}`,
			tools: []string{"openai.web_search"}, deny: true, strip: `{"model":"gpt-5","messages":[]}`},
		{name: "openai search model", host: oai, method: "POST", path: "/v1/chat/completions",
			body: `{"model":"gpt-4o-mini-search-preview","messages":[]}`, tools: []string{"openai.search_model"}, deny: true},
		{name: "openai image URL", host: oai, method: "POST", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}]}`, tools: []string{"openai.url_input"}, deny: true},
		{name: "openai image data URL", host: oai, method: "POST", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]}]}`, strip: "="},
		{name: "openai batch", host: oai, method: "POST", path: "/v1/batches", body: `{"input_file_id":"f"}`, tools: []string{"openai.batch"}, deny: true},
		{name: "openai batch read", host: oai, method: "GET", path: "/v1/batches/b", strip: "="},

		{name: "gemini both spellings, function declarations kept", host: gem, method: "POST", path: "/v1beta/models/gemini-2.5-flash:generateContent",
			body:  `{"contents":[],"tools":[{"functionDeclarations":[{"name":"f"}],"googleSearch":{}},{"url_context":{}},{"codeExecution":{}}]}`,
			tools: []string{"google.google_search", "google.url_context", "google.code_execution"}, deny: true,
			strip: `{"contents":[],"tools":[{"functionDeclarations":[{"name":"f"}]}]}`},
		{name: "gemini stream, retrieval", host: gem, method: "POST", path: "/v1beta/models/m:streamGenerateContent",
			body: `{"tools":[{"google_search_retrieval":{"dynamic_retrieval_config":{}}}]}`, tools: []string{"google.google_search"}, deny: true, strip: `{"tools":[]}`},
		{name: "gemini plain", host: gem, method: "POST", path: "/v1beta/models/m:generateContent",
			body: `{"contents":[{"parts":[{"text":"hi"},{"fileData":{"fileUri":"https://generativelanguage.googleapis.com/v1beta/files/abc"}}]}]}`, strip: "="},
		{name: "gemini YouTube URL", host: gem, method: "POST", path: "/v1beta/models/m:generateContent",
			body: `{"contents":[{"parts":[{"file_data":{"file_uri":"https://www.youtube.com/watch?v=x"}}]}]}`, tools: []string{"google.url_input"}, deny: true},
		{name: "gemini cached content", host: gem, method: "POST", path: "/v1beta/models/m:generateContent",
			body: `{"cachedContent":"cachedContents/x"}`, tools: []string{"google.cached_content"}, deny: true},
		{name: "gemini batch inline", host: gem, method: "POST", path: "/v1beta/models/m:batchGenerateContent",
			body:  `{"batch":{"inputConfig":{"requests":{"requests":[{"request":{"tools":[{"googleSearch":{}}]}}]}}}}`,
			tools: []string{"google.google_search"}, deny: true, strip: `{"batch":{"inputConfig":{"requests":{"requests":[{"request":{"tools":[]}}]}}}}`},
		{name: "gemini batch file", host: gem, method: "POST", path: "/v1beta/models/m:batchGenerateContent",
			body: `{"batch":{"input_config":{"file_name":"files/x"}}}`, tools: []string{"google.batch_file"}, deny: true},
		{name: "gemini interactions agent", host: gem, method: "POST", path: "/v1beta/interactions",
			body: `{"agent":"deep-research-pro-preview-12-2025","input":"x"}`, tools: []string{"google.agent"}, deny: true},
		{name: "gemini live", host: gem, method: "GET", path: "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
			hdr: []string{"Upgrade", "websocket"}, tools: []string{"google.live"}, deny: true},
		{name: "vertex", host: vertex, method: "POST", path: "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
			body: `{"tools":[{"googleSearch":{}}]}`, tools: []string{"google.google_search"}, deny: true, strip: `{"tools":[]}`},
		{name: "vertex anthropic", host: vertex, method: "POST", path: "/v1/projects/p/locations/l/publishers/anthropic/models/claude:streamRawPredict",
			body: `{"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, tools: []string{"anthropic.web_search"}, deny: true, strip: `{"tools":[]}`},

		{name: "xai responses", host: xai, method: "POST", path: "/v1/responses",
			body:  `{"tools":[{"type":"x_search"},{"type":"web_search"},{"type":"code_interpreter"},{"type":"function","name":"f"}]}`,
			tools: []string{"xai.x_search", "xai.web_search", "xai.code_execution"}, deny: true, strip: `{"tools":[{"type":"function","name":"f"}]}`},
		{name: "xai live search", host: xai, method: "POST", path: "/v1/chat/completions",
			body: `{"search_parameters":{"mode":"on"},"messages":[]}`, tools: []string{"xai.web_search"}, deny: true, strip: `{"messages":[]}`},

		{name: "mistral conversations", host: mis, method: "POST", path: "/v1/conversations",
			body:  `{"inputs":"x","tools":[{"type":"web_search_premium"},{"type":"connector","connector_id":"c"},{"type":"function","function":{}}]}`,
			tools: []string{"mistral.web_search", "mistral.connector"}, deny: true, strip: `{"inputs":"x","tools":[{"type":"function","function":{}}]}`},
		{name: "mistral stored agent", host: mis, method: "POST", path: "/v1/conversations", body: `{"agent_id":"ag_1","inputs":"x"}`,
			tools: []string{"mistral.stored_agent"}, deny: true},
		{name: "mistral append to a conversation", host: mis, method: "POST", path: "/v1/conversations/c1", body: `{"inputs":"x"}`,
			tools: []string{"mistral.stored_conversation"}, deny: true},

		{name: "perplexity sonar", host: ppx, method: "POST", path: "/chat/completions", body: `{"model":"sonar-pro","messages":[]}`,
			tools: []string{"perplexity.search"}, deny: true},
		{name: "perplexity search off", host: ppx, method: "POST", path: "/chat/completions", body: `{"model":"sonar","disable_search":true,"messages":[]}`, strip: "="},
		{name: "perplexity search off as 1", host: ppx, method: "POST", path: "/chat/completions", body: `{"model":"sonar","disable_search":1}`,
			tools: []string{"perplexity.search"}, deny: true},
		{name: "perplexity search API", host: ppx, method: "POST", path: "/search", body: `{"query":"x"}`, tools: []string{"perplexity.search_api"}, deny: true},

		{name: "openrouter online model", host: or, method: "POST", path: "/api/v1/chat/completions", body: `{"model":"openai/gpt-5:online"}`,
			tools: []string{"openrouter.online_model"}, deny: true},
		{name: "openrouter fallback models", host: or, method: "POST", path: "/api/v1/chat/completions", body: `{"model":"a/b","models":["c/d","perplexity/sonar"]}`,
			tools: []string{"openrouter.search_model"}, deny: true},
		{name: "openrouter plugins and server tools", host: or, method: "POST", path: "/api/v1/chat/completions",
			body:  `{"model":"a/b","plugins":[{"id":"web","max_results":3},{"id":"file-parser"}],"tools":[{"type":"openrouter:web_search"},{"type":"function","function":{}}]}`,
			tools: []string{"openrouter.server_tool", "openrouter.web_plugin"}, deny: true,
			strip: `{"model":"a/b","plugins":[{"id":"file-parser"}],"tools":[{"type":"function","function":{}}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, action := range []string{SetDeny, SetStrip, SetProbe} {
				j := judge(t, closedBook(t, action), c.host, c.method, c.path, c.body, c.hdr...)
				got, want := ids(j.Findings), slices.Clone(c.tools)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("%s: found %q, want %q", action, got, c.tools)
				}
				switch action {
				case SetProbe:
					if j.Verdict != VerdictAllow || j.Body != nil {
						t.Errorf("probe: %s, body %q", j.Verdict, j.Body)
					}
				case SetDeny:
					if (j.Verdict == VerdictDeny) != c.deny || j.Body != nil {
						t.Errorf("deny: %s (%s %s), want deny %v", j.Verdict, j.Rule, j.Reason, c.deny)
					}
				case SetStrip:
					switch {
					case c.strip == "" && j.Verdict != VerdictDeny:
						t.Errorf("strip: %s, body %s; want a refusal", j.Verdict, j.Body)
					case c.strip == "=" && (j.Verdict != VerdictAllow || j.Body != nil):
						t.Errorf("strip: %s (%s), body %s; want it unchanged", j.Verdict, j.Reason, j.Body)
					case c.strip != "" && c.strip != "=" && (j.Verdict != VerdictAllow || string(j.Body) != c.strip):
						t.Errorf("strip: %s (%s %s)\n got %s\nwant %s", j.Verdict, j.Rule, j.Reason, j.Body, c.strip)
					}
					if j.Body != nil {
						// What strip forwards, judged again, has
						// nothing left to remove.
						again := judge(t, closedBook(t, SetDeny), c.host, c.method, c.path, string(j.Body), c.hdr...)
						if again.Verdict != VerdictAllow {
							t.Errorf("strip forwards %s, which deny refuses: %s", j.Body, again.Rule)
						}
					}
				}
			}
		})
	}
}

// The rewrite deletes the bytes of what it removes and keeps every
// other byte: whitespace, escapes, number spellings, key order.
func TestStripKeepsOtherBytes(t *testing.T) {
	body := "{ \"a\" : 1.0e2 ,\n\t\"tools\" : [ {\"type\":\"web_search_20250305\"} ,\r\n {\"name\":\"\\u00e9\"} , [1,[2]] ] , \"z\":\"\\/\" }"
	want := "{ \"a\" : 1.0e2 ,\n\t\"tools\" : [ {\"name\":\"\\u00e9\"} , [1,[2]] ] , \"z\":\"\\/\" }"
	j := judge(t, closedBook(t, SetStrip), "api.anthropic.com", "POST", "/v1/messages", body)
	if string(j.Body) != want {
		t.Errorf("got  %q\nwant %q", j.Body, want)
	}
	// The last element, and a run of elements, and all of them.
	for _, c := range []struct{ in, out string }{
		{`{"tools":[{"name":"f"},{"type":"web_search_1"}]}`, `{"tools":[{"name":"f"}]}`},
		{`{"tools":[{"type":"web_search_1"},{"type":"web_fetch_1"},{"name":"f"},{"type":"code_execution_1"}]}`, `{"tools":[{"name":"f"}]}`},
		{`{"tools":[ {"type":"web_search_1"} , {"type":"web_fetch_1"} ]}`, `{"tools":[  ]}`},
	} {
		j := judge(t, closedBook(t, SetStrip), "api.anthropic.com", "POST", "/v1/messages", c.in)
		if string(j.Body) != c.out {
			t.Errorf("%s: got %s, want %s", c.in, j.Body, c.out)
		}
	}
}

// A deeply nested body is refused, not read halfway.
func TestRuleSetDepth(t *testing.T) {
	body := `{"tools":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`
	j := judge(t, closedBook(t, SetStrip), "api.anthropic.com", "POST", "/v1/messages", body)
	if j.Verdict != VerdictDeny || !strings.Contains(j.Reason, "nested") {
		t.Errorf("%s %q", j.Verdict, j.Reason)
	}
}

func TestRuleSetPolicyForms(t *testing.T) {
	p, err := ParseFile([]byte("api.anthropic.com\nruleset closed-book strip # comment\ninspect api.anthropic.com allow POST\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.RuleSets, []RuleSetUse{{"closed-book", SetStrip}}) {
		t.Fatalf("%+v", p.RuleSets)
	}
	out := p.MarshalFile()
	if !bytes.Contains(out, []byte("\nruleset closed-book strip\n")) {
		t.Errorf("file form:\n%s", out)
	}
	q, err := ParseFile(out)
	if err != nil || !q.Equal(p) {
		t.Errorf("round trip: %v", err)
	}
	if q.Equal(p.WithEntries(p.Entries)) != true {
		t.Error("WithEntries drops the rule sets")
	}
	r, _ := p.WithRuleSets(nil)
	if r.Equal(p) {
		t.Error("Equal does not compare rule sets")
	}
	js, err := p.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(`"rulesets":[{"action":"strip","name":"closed-book"}]`)) {
		t.Errorf("JSON: %s", js)
	}
	back, err := ParseJSON(js)
	if err != nil || !back.Equal(p) {
		t.Errorf("JSON round trip: %v %s", err, js)
	}
	if u, err := ParseInspectRules([]byte(`{"rulesets":["closed-book"]}`)); err != nil || !slices.Equal(u.RuleSets, []RuleSetUse{{"closed-book", SetDeny}}) {
		t.Errorf("%+v %v", u, err)
	}
	for _, bad := range []string{
		"ruleset no-such-set", "ruleset closed-book allow", "ruleset", "ruleset closed-book deny extra",
		"ruleset closed-book\nruleset closed-book strip",
	} {
		if _, err := ParseFile([]byte(bad)); err == nil {
			t.Errorf("%q parses", bad)
		}
	}
	for _, bad := range []string{`{"rulesets":["nope"]}`, `{"rulesets":[{"name":"closed-book","action":"x"}]}`,
		`{"rulesets":[{"name":"closed-book","mode":"x"}]}`, `{"rulesets":"closed-book"}`} {
		if _, err := ParseInspectRules([]byte(bad)); err == nil {
			t.Errorf("%s parses", bad)
		}
	}
	// A front door that does not read rule sets yet refuses them, never
	// drops them.
	if _, err := ParseInspectJSON([]byte(`{"rulesets":["closed-book"]}`)); err == nil {
		t.Error("ParseInspectJSON drops rule sets")
	}
}

// A set inspects its providers' hosts and front ends wherever the policy
// admits them, and grows the CA's names.
func TestRuleSetInspects(t *testing.T) {
	p := closedBook(t, SetDeny)
	for name, want := range map[string]bool{
		"api.anthropic.com": true, "console.anthropic.com": true, "storage.googleapis.com": true,
		"us-central1-aiplatform.googleapis.com": true, "example.com": false, "anthropic.com.example": false,
	} {
		if got := p.InspectFor(name) != nil; got != want {
			t.Errorf("InspectFor(%s): %v", name, got)
		}
	}
	if len(p.RuleSetsFor("storage.googleapis.com")[0].Providers) != 1 {
		t.Error("storage.googleapis.com: the Google rules do not hold")
	}
	if len(p.RuleSetsFor("console.anthropic.com")[0].Providers) != 0 {
		t.Error("a front end name has rules")
	}
	hosts := p.InspectedHosts()
	for _, h := range []string{"api.anthropic.com", "*.googleapis.com", "openrouter.ai"} {
		if !slices.Contains(hosts, h) {
			t.Errorf("InspectedHosts lacks %s: %v", h, hosts)
		}
	}
	if !p.HasInspection() {
		t.Error("HasInspection")
	}
}

func TestSiblingWarnings(t *testing.T) {
	p, err := ParseFile([]byte("api.example.com\nstatic.example.com\n*.cdn.example.com\nother.test\ninspect api.example.com deny POST\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := p.SiblingWarnings()
	if len(w) != 2 || !strings.HasPrefix(w[0], "static.example.com is allowed but not inspected") || !strings.HasPrefix(w[1], "*.cdn.example.com") {
		t.Errorf("%q", w)
	}
	q, _ := ParseFile([]byte("storage.googleapis.com\ngenerativelanguage.googleapis.com\nruleset closed-book\n"))
	if w := q.SiblingWarnings(); len(w) != 0 {
		t.Errorf("the rule set inspects Google's siblings itself: %q", w)
	}
}

// Every shipped set compiles, and docs/rulesets.md explains every one of
// its lines.
func TestShippedSetsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/rulesets.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range RuleSetNames() {
		s, err := LookupRuleSet(n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(doc, []byte("`"+s.Ref()+"`")) {
			t.Errorf("docs/rulesets.md does not name %s", s.Ref())
		}
		for _, id := range s.ToolIDs() {
			if !bytes.Contains(doc, []byte(id+" ")) && !bytes.Contains(doc, []byte(id+"`")) {
				t.Errorf("docs/rulesets.md does not explain %s of %s", id, n)
			}
		}
	}
}

func TestParseRuleSetErrors(t *testing.T) {
	for _, bad := range []string{
		"", "version 1", "ruleset x\nprovider p api.x.test\n", "ruleset Bad\nversion 1",
		"ruleset x\nversion 1\ntool a POST /x in:tools[] type=y",
		"ruleset x\nversion 1\nprovider p h.test\ntool a POST /x type=y",
		"ruleset x\nversion 1\nprovider p h.test\ntool a in:tools[] type=y",
		"ruleset x\nversion 1\nprovider p h.test\ntool a POST /X in:tools[] type=y",
		"ruleset x\nversion 1\nprovider p h.test\nevidence e !type=y",
		"ruleset x\nversion 1\nprovider p h.test\nevidence e a.b=y",
		"ruleset x\nversion 1\nprovider p 10.0.0.1\n",
		"ruleset x\nversion 1\nprovider p h.test\nfrob",
	} {
		if _, err := ParseRuleSet([]byte(bad)); err == nil {
			t.Errorf("%q compiles", bad)
		}
	}
	s, err := ParseRuleSet([]byte("ruleset x\nversion 2\nprovider p h.test\ntool a.b POST /v1/* in:tools[] type=t*\nwith a.b POST /v1/* in:include[] @=t.*\n"))
	if err != nil || s.Ref() != "x@2" {
		t.Fatal(s, err)
	}
}

func TestLooseKey(t *testing.T) {
	for a, b := range map[string]string{"google_search": "googleSearch", "TOOLS": "tools", "toolſ": "tools", "\u212aey": "key", "mcp-servers": "mcpServers"} {
		if looseKey(a) != looseKey(b) {
			t.Errorf("%q and %q differ: %q %q", a, b, looseKey(a), looseKey(b))
		}
	}
	if looseKey("tools") == looseKey("tool") {
		t.Error("tools is tool")
	}
}

func TestEvidenceMatcher(t *testing.T) {
	s, _ := LookupRuleSet("closed-book")
	m := NewEvidenceMatcher(s.Evidence)
	f := func(kv ...string) []EvidenceField {
		var out []EvidenceField
		for i := 0; i < len(kv); i += 2 {
			out = append(out, EvidenceField{Key: FoldKey(kv[i]), Text: kv[i+1], Present: kv[i+1] != ""})
		}
		return out
	}
	if e, ok := m.Match(f("type", "web_search_tool_result"), false); !ok || e.ID != "anthropic.web_search" {
		t.Errorf("%v %v", e, ok)
	}
	if _, ok := m.Match(f("type", "server_tool_use", "name", "tool_search_tool_regex"), true); ok {
		t.Error("tool search trips")
	}
	if _, ok := m.Match(f("type", "server_tool_use", "name", "web_search"), false); ok {
		t.Error("a negated line decided before the object closed")
	}
	if _, ok := m.Match(f("type", "server_tool_use", "name", "web_search"), true); !ok {
		t.Error("server_tool_use web_search does not trip")
	}
	js, _ := json.Marshal(m.keys)
	if !m.Wants("type") || m.Wants("text") {
		t.Errorf("keys %s", js)
	}
}
