package conf

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// The seed corpus lives in testdata/fuzz/FuzzRuleSetOnePass.

// onePassHosts are hosts of every provider of closed-book.
var onePassHosts = []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com",
	"us-east5-aiplatform.googleapis.com", "api.x.ai", "api.mistral.ai", "api.perplexity.ai", "openrouter.ai"}

// sameAsRef judges one request by a set both ways, one walk of the body
// for all its rules (Judge) and a walk per rule (judgeRef), and fails t
// unless the judgements are the same in every field: verdict, rule,
// reason, spelling, findings, what strip removed and the body it made,
// the inventory.
func sameAsRef(t *testing.T, a ActiveRuleSet, method, path, body string) {
	t.Helper()
	mk := func() *Request {
		r := &Request{Method: method, Path: path, Header: http.Header{}}
		if a.NeedsBody(r) {
			r.Body = []byte(body)
		}
		return r
	}
	got, want := a.Judge(mk()), a.judgeRef(mk())
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %s %s by %s %s, body %q:\none walk: %+v\nper rule: %+v", a.Action, method, path,
			a.Set.Name, providerNames(a), body, got, want)
	}
}

func providerNames(a ActiveRuleSet) string {
	var n []string
	for _, p := range a.Providers {
		n = append(n, p.Name)
	}
	return strings.Join(n, ",")
}

// onePassCases are bodies that exercise what the walk must keep as a
// walk per rule did: keys in other spellings, keys given twice on and
// off a rule's path, tools beside what a with line removes, tool_choice,
// nesting, arrays where objects are looked for, bodies that are not
// JSON.
var onePassCases = []struct{ path, body string }{
	{"/v1/messages", `{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"},{"type":"bash_20250124"}]}`},
	{"/v1/messages", `{"tools":[{"type":"web_search_20250305"}],"tool_choice":{"type":"tool","name":"web_search"}}`},
	{"/v1/messages", `{"tools":[{"type":"web_search_20250305"}],"tool_choice":{"type":"any"}}`},
	{"/v1/messages", `{"TOOLS":[{"Type":"web_fetch_x"}],"to_ols":[{"type":"code_execution_1"}],"mcp_servers":[{"url":"u"}]}`},
	{"/v1/messages", `{"\u0074ools":[{"type":"mcp_toolset"}],"mcp-servers":null}`},
	{"/v1/messages", `{"tools":[{"type":"web_search_1","type":"x"}],"messages":[]}`},
	{"/v1/messages", `{"tools":[{"type":"bash"}],"tools":[{"type":"web_search_1"}]}`},
	{"/v1/messages", `{"model":"m","model":"n","tools":[]}`},
	{"/v1/messages", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]}]}`},
	{"/v1/messages", `{"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"image","source":{"type":"URL","type":"url"}}]}]}],"tools":[{"type":"web_search_1"}]}`},
	{"/v1/messages", `{"messages":[{"content":[{"source":{"type":"base64"},"source":{"type":"url"}}]}],"tools":[{"type":"code_execution_2"}]}`},
	{"/v1/messages", `{"messages":{"content":[]},"tools":{"type":"web_search_1"}}`},
	{"/v1/messages", `[{"tools":[{"type":"web_search_1"}]}]`},
	{"/v1/messages", `{"tools":[[{"type":"web_search_1"}],{"type":"web_fetch_2"},"web_search_3",null]}`},
	{"/v1/messages", `{"tools":[{"type":"web_search_1"},{"type":"web_search_2"},{"type":"bash"},{"type":"web_fetch_3"}],"tool_choice":"auto"}`},
	{"/v1/messages", `{"tools":[{"type":"web_search_1"}]`},
	{"/v1/messages", `not json`},
	{"/v1/messages", ``},
	{"/v1/messages", "{\"tools\":[{\"type\":\"web_search_\xff\"}]}"},
	{"/v1/messages", strings.Repeat(`{"a":`, 300) + `1` + strings.Repeat(`}`, 300)},
	{"/v1/messages", `{"tools":` + strings.Repeat(`[`, 250) + strings.Repeat(`]`, 250) + `}`},
	{"/v1/messages/batches", `{"requests":[{"params":{"tools":[{"type":"web_search_1"}],"mcp_servers":[1],"messages":[{"content":[{"source":{"type":"url"}}]}]}},{"params":{"tools":[{"type":"web_fetch_1"}]}}]}`},
	{"/v1/messages/batches", `{"requests":[{"params":{"tools":[{"type":"mcp_toolset"}]},"params":{}}]}`},
	{"/v1/responses", `{"tools":[{"type":"web_search_preview"},{"type":"shell","environment":{"type":"local"}},{"type":"shell"}],"include":["web_search_call.action.sources","file_search_call.results"]}`},
	{"/v1/responses", `{"tools":[{"type":"code_interpreter"}],"include":["code_interpreter_call.outputs","code_interpreter_call.outputs"],"tool_choice":{"type":"code_interpreter"}}`},
	{"/v1/responses", `{"include":["web_search_call.action.sources"],"tools":[{"type":"function","name":"f"}]}`},
	{"/v1/responses", `{"tools":[{"type":"mcp"}],"include":[{"a":1,"a":2}]}`},
	{"/v1/responses", `{"prompt":{"id":"p"},"model":"gpt-4o-search-preview"}`},
	{"/v1/responses", `{"input":[{"content":[{"image_url":"http://x"}],"output":[{"file_url":"https://y"}]}]}`},
	{"/v1/chat/completions", `{"web_search_options":{},"messages":[{"content":[{"image_url":{"url":"https://x"}}]}]}`},
	{"/v1beta/models/gemini:generateContent", `{"tools":[{"google_search":{}},{"url_context":{}},{"functionDeclarations":[]}],"contents":[{"parts":[{"file_data":{"file_uri":"https://example.com/a"}}]}]}`},
	{"/v1beta/models/gemini:generateContent", `{"tools":[{"googleSearch":{},"codeExecution":{}}],"cached_content":"c"}`},
	{"/v1beta/models/gemini:batchGenerateContent", `{"batch":{"input_config":{"requests":{"requests":[{"request":{"tools":[{"google_search":{}}]}}]}}}}`},
	{"/v1beta/interactions", `{"tools":[{"type":"google_search"},{"type":"mcp_server"}],"agent":"a"}`},
	{"/v1/projects/p/locations/l/publishers/anthropic/models/c:rawPredict", `{"tools":[{"type":"web_search_1"}]}`},
	{"/v1/chat/completions", `{"tools":[{"type":"web_search"}],"plugins":[{"id":"web"}],"search_parameters":{"mode":"on"},"model":"sonar"}`},
}

// TestRuleSetOnePass judges each case by closed-book in every action on
// every provider's host, one walk against a walk per rule.
func TestRuleSetOnePass(t *testing.T) {
	bodies := append([]struct{ path, body string }{}, onePassCases...)
	bodies = append(bodies, struct{ path, body string }{"/v1/messages", agentBody(64 << 10)},
		struct{ path, body string }{"/v1/messages", largeBody(300)})
	for _, c := range bodies {
		checkIndex(t, []byte(c.body), 8)
	}
	for _, action := range []string{SetDeny, SetStrip, SetProbe} {
		p := closedBook(t, action)
		for _, host := range onePassHosts {
			for _, a := range p.RuleSetsFor(host) {
				for _, c := range bodies {
					sameAsRef(t, a, "POST", c.path, c.body)
				}
			}
		}
	}
}

// FuzzRuleSetOnePass judges any body on any path by closed-book in any
// action, and by any rule set that compiles (rules): one walk of the body
// must judge as a walk per rule did, to the byte.
func FuzzRuleSetOnePass(f *testing.F) {
	pols := map[string]*Policy{}
	actions := []string{SetDeny, SetStrip, SetProbe}
	for _, a := range actions {
		pols[a] = closedBook(f, a)
	}
	f.Fuzz(func(t *testing.T, hostIndex, actionIndex uint8, path, body, rules string) {
		checkIndex(t, []byte(body), int(hostIndex%8))
		action := actions[int(actionIndex)%len(actions)]
		for _, a := range pols[action].RuleSetsFor(onePassHosts[int(hostIndex)%len(onePassHosts)]) {
			sameAsRef(t, a, "POST", path, body)
		}
		s, err := ParseRuleSet([]byte(rules))
		if err != nil {
			return
		}
		for _, p := range s.Providers {
			sameAsRef(t, ActiveRuleSet{Set: s, Action: action, Providers: []*SetProvider{p}}, "POST", path, body)
		}
		sameAsRef(t, ActiveRuleSet{Set: s, Action: action, Providers: s.Providers}, "POST", path, body)
	})
}

// BenchmarkRuleSetOnePass judges requests both ways in one binary, one
// walk of the body (Judge, impl=onepass) and a walk per rule (judgeRef,
// impl=perrule): a small Messages request by closed-book and by a set of
// one rule, and a 500 KB agent request (agentBody) by closed-book.
// cpu-ns/op is the process's user and system CPU time per request (the
// collector's included), which a loaded machine does not inflate as it
// does the wall-clock ns/op.
func BenchmarkRuleSetOnePass(b *testing.B) {
	one, err := ParseRuleSet([]byte("ruleset one\nversion 1\nprovider anthropic api.anthropic.com\n" +
		"tool anthropic.web_search POST /v1/messages* in:tools[] type=web_search_*\n"))
	if err != nil {
		b.Fatal(err)
	}
	cb := closedBook(b, SetStrip).RuleSetsFor("api.anthropic.com")[0]
	oneRule := ActiveRuleSet{Set: one, Action: SetStrip, Providers: one.Providers}
	small := `{"model":"claude-sonnet-4-5","max_tokens":1024,"tools":[{"type":"bash_20250124","name":"bash"}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}]}`
	cases := []struct {
		name string
		set  ActiveRuleSet
		body string
	}{
		{"small/one-rule", oneRule, small},
		{"small/closed-book", cb, small},
		{"agent-500KB/one-rule", oneRule, agentBody(500 << 10)},
		{"agent-500KB/closed-book", cb, agentBody(500 << 10)},
	}
	for _, c := range cases {
		for _, impl := range []string{"onepass", "perrule"} {
			b.Run(c.name+"/impl="+impl, func(b *testing.B) {
				judge := c.set.Judge
				if impl == "perrule" {
					judge = c.set.judgeRef
				}
				body := []byte(c.body)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for b.Loop() {
					r := &Request{Method: "POST", Path: "/v1/messages", Body: body}
					if j := judge(r); j.Verdict != VerdictAllow {
						b.Fatal(j.Verdict, j.Reason)
					}
				}
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// checkIndex fails t unless newJSONDoc accepts what newJSONDocRef does,
// with the same error, for every depth limit up to depth (and
// maxJSONDepth), and unless the index of a document that reads (see
// jsonDoc.index) holds every object and array, in order, each with the
// end a scan of its bytes finds.
func checkIndex(t *testing.T, body []byte, depth int) {
	t.Helper()
	for max := range depth + 1 {
		got := (&jsonDoc{b: body}).index(max)
		if want := json.Valid(body) && depthRef(body) <= max; got != want {
			t.Fatalf("%q: one pass at depth %d says %v, json.Valid and the depth %v", body, max, got, want)
		}
	}
	d, _, err := newJSONDoc(body)
	if _, _, want := newJSONDocRef(body); fmt.Sprint(err) != fmt.Sprint(want) {
		t.Fatalf("%q: newJSONDoc says %v, the two passes %v", body, err, want)
	}
	if err != nil {
		return
	}
	var starts []int
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			i = stringEnd(body, i) - 1
		case '{', '[':
			starts = append(starts, i)
		}
	}
	if len(starts) != len(d.conts) {
		t.Fatalf("%q: %d containers indexed, %d in the document", body, len(d.conts), len(starts))
	}
	for k, s := range starts {
		depth, end := 0, -1
		for j := s; j < len(body) && end < 0; j++ {
			switch body[j] {
			case '"':
				j = stringEnd(body, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					end = j + 1
				}
			}
		}
		if c := d.conts[k]; int(c.s) != s || int(c.e) != end {
			t.Fatalf("%q: container %d indexed as [%d,%d), is [%d,%d)", body, k, c.s, c.e, s, end)
		}
	}
}

// processCPU is the user and system CPU time the process has used, in
// nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// newJSONDocRef is newJSONDoc's check as it was before the document was
// checked and indexed in one pass (jsonDoc.index): UTF-8, json.Valid
// (and Unmarshal's error), then the depth. Kept as the reference
// (checkIndex).
func newJSONDocRef(data []byte) (*jsonDoc, jval, error) {
	if !utf8.Valid(data) {
		return nil, jval{}, errors.New("not valid UTF-8")
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		if err == nil {
			err = errors.New("not valid JSON")
		}
		return nil, jval{}, err
	}
	if depthRef(data) > maxJSONDepth {
		return nil, jval{}, errDocDepth
	}
	return nil, jval{}, nil
}

// depthRef is how deep the containers of a valid document nest.
func depthRef(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// TestJSONDocOnePass checks the one pass that checks and indexes a body
// (jsonDoc.index) against json.Valid and the depth, and newJSONDoc's
// errors against the two passes', on what JSON's grammar is strict about.
func TestJSONDocOnePass(t *testing.T) {
	for _, body := range []string{
		``, ` `, `{}`, `[]`, " \t[ ]\r\n", `{"":""}`, `"é"`, "\"\x7f\"", `{"a":[{"b":[]}]}`, `[[[[]]]]`,
		`"\/"`, `"\b\f\n\r\t\"\\"`, `"\u00e9\uD83D\uDE00"`, `[1e5,-0.5E-3,0,-0,1E+2,10]`, `true`, `false`, `null`,
		`"\x"`, `"\u12"`, `"\u12g4"`, `"\u12"x`, `"\`, `"a`, "\"\x01\"", "\"\x00\"",
		`01`, `-`, `-a`, `1.`, `1.e3`, `1e`, `1e+`, `+1`, `.5`, `1 2`, `0x10`, `NaN`,
		`[1,]`, `[,1]`, `[1 2]`, `{"a":1,}`, `{"a" 1}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`, `[}`, `{]`, `{"a":1]`, `[1}`, `[[]`, `[]]`,
		`tru`, `truex`, `nul`, `nulll`, `falsey`, `[true false]`, "\xef\xbb\xbf{}", "\"\xff\"",
	} {
		checkIndex(t, []byte(body), 4)
	}
}
