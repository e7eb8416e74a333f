package conf

import (
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
