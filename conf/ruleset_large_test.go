package conf

import (
	"encoding/json"
	"strings"
	"testing"
)

// largeBody is a Messages request with n turns, each with a tool result.
func largeBody(n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"m","tools":[{"type":"bash_20250124"}],"messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"y"}]}]}`)
	}
	b.WriteString(`]}`)
	return b.String()
}

// A large body with many objects the rules read is judged whole (the
// memos switch to maps past a few objects).
func TestRuleSetLargeBody(t *testing.T) {
	body := largeBody(20000)
	j := judge(t, closedBook(t, SetStrip), "api.anthropic.com", "POST", "/v1/messages", body)
	if j.Verdict != VerdictAllow || j.Body != nil {
		t.Errorf("%s %q", j.Verdict, j.Reason)
	}
	bad := strings.Replace(body, `"type":"text","text":"y"`, `"type":"image","source":{"type":"url","url":"https://x"}`, 1)
	if j := judge(t, closedBook(t, SetStrip), "api.anthropic.com", "POST", "/v1/messages", bad); j.Verdict != VerdictDeny {
		t.Errorf("a URL source in turn 1 of 20000: %s", j.Verdict)
	}
}

// BenchmarkRuleSetLargeBody judges a 2.7 MB Messages request (20 000
// turns) by closed-book: bytes per second of a large agent request.
func BenchmarkRuleSetLargeBody(b *testing.B) {
	body := largeBody(20000)
	p := closedBook(b, SetStrip)
	sets := p.RuleSetsFor("api.anthropic.com")
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r := &Request{Method: "POST", Path: "/v1/messages", Body: []byte(body)}
		if j := sets[0].Judge(r); j.Verdict != VerdictAllow {
			b.Fatal(j.Verdict)
		}
	}
}

// agentBody is a Messages request as a coding agent sends it late in a
// task, of about size bytes: a system prompt, client tools with their
// schemas, and turns of text, tool use and tool results (file contents,
// command output) with escapes and non-ASCII text in them.
func agentBody(size int) string {
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"system":[{"type":"text","text":"You are a coding agent.\nWork in /repo.","cache_control":{"type":"ephemeral"}}],`)
	b.WriteString(`"tools":[{"type":"bash_20250124","name":"bash"},{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"},`)
	b.WriteString(`{"name":"search","description":"Search the repository.","input_schema":{"type":"object","properties":{"query":{"type":"string"},"path":{"type":"string"}},"required":["query"]}}],`)
	b.WriteString(`"messages":[`)
	chunk := strings.Repeat("func main() {\n\tfmt.Println(\"héllo, wörld\")\n}\n", 6)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"role":"assistant","content":[{"type":"text","text":"Let me look at the file."},{"type":"tool_use","id":"toolu_`)
		b.WriteString(strings.Repeat("x", 8))
		b.WriteString(`","name":"bash","input":{"command":"cat main.go"}}]},`)
		b.WriteString(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_xxxxxxxx","content":[{"type":"text","text":`)
		q, _ := json.Marshal(chunk)
		b.Write(q)
		b.WriteString(`}]}]}`)
	}
	b.WriteString(`]}`)
	return b.String()
}

// BenchmarkRuleSetAgentBody judges a 500 KB agent request (see
// agentBody) by closed-book.
func BenchmarkRuleSetAgentBody(b *testing.B) {
	body := agentBody(500 << 10)
	p := closedBook(b, SetStrip)
	sets := p.RuleSetsFor("api.anthropic.com")
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r := &Request{Method: "POST", Path: "/v1/messages", Body: []byte(body)}
		if j := sets[0].Judge(r); j.Verdict != VerdictAllow {
			b.Fatal(j.Verdict, j.Reason)
		}
	}
}
