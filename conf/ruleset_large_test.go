package conf

import (
	"strings"
	"testing"
	"time"
)

// A large body with many objects the rules read is judged in time
// linear in its size.
func TestRuleSetLargeBody(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","tools":[{"type":"bash_20250124"}],"messages":[`)
	for i := range 20000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"y"}]}]}`)
	}
	b.WriteString(`]}`)
	p := closedBook(t, SetStrip)
	start := time.Now()
	j := judge(t, p, "api.anthropic.com", "POST", "/v1/messages", b.String())
	if d := time.Since(start); j.Verdict != VerdictAllow || d > 2*time.Second {
		t.Errorf("%s in %v (%d bytes)", j.Verdict, d, b.Len())
	}
	t.Logf("%d bytes in %v", b.Len(), time.Since(start))
}
