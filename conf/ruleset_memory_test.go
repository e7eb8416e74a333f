package conf

import (
	"net/http"
	"strings"
	"testing"
)

// TestRuleSetJudgeMemory: what judging a body by a rule set costs is
// bounded. A body of many small objects on a rule's path (tools[]) cost
// some hundreds of bytes each: 1 MiB of them took about 280 MiB of
// allocations and 150 MiB live, a 32 MiB one gigabytes, more than a
// proxy's cgroup holds. A body with more than MaxJSONContainers objects
// and arrays now cannot be read, and the set refuses it; one at the
// bound is judged.
func TestRuleSetJudgeMemory(t *testing.T) {
	p, err := ParseFile([]byte("api.anthropic.com\nruleset closed-book strip\n"))
	if err != nil {
		t.Fatal(err)
	}
	sets := p.RuleSetsFor("api.anthropic.com")
	tools := func(n int) string {
		return `{"model":"m","max_tokens":1,"messages":[],"tools":[` + strings.Repeat(`{},`, n-1) + `{}]}`
	}
	judge := func(body string) (SetJudgement, uint64) {
		req := &Request{Method: "POST", Path: "/v1/messages", Header: http.Header{}, Body: []byte(body)}
		var j SetJudgement
		grew := allocated(func() { j = sets[0].Judge(req) })
		return j, grew
	}
	for _, body := range []string{
		tools(1 << 20 / 3),
		`{"model":"m","messages":[` + strings.Repeat(`[],`, 1<<20/3) + `[]]}`,
		`[` + strings.Repeat(`{"a":[]},`, MaxJSONContainers/2) + `{}]`,
	} {
		j, grew := judge(body)
		if j.Verdict != VerdictDeny || !strings.Contains(j.Reason, "more than 131072 objects and arrays") {
			t.Errorf("%.40s... (%d bytes): %+v", body, len(body), j)
		}
		if grew > 4<<20 {
			t.Errorf("%.40s... (%d bytes): refusing it allocated %d bytes", body, len(body), grew)
		}
	}
	// At the bound (the document, messages and tools are three of them).
	if j, _ := judge(tools(MaxJSONContainers - 3)); j.Verdict != VerdictAllow {
		t.Errorf("a body at the bound: %+v", j)
	}
	if n := JSONContainerBound([]byte(tools(10))); n != 13 {
		t.Errorf("JSONContainerBound: %d, want 13", n)
	}
	if n := JSONContainerBound([]byte(tools(1 << 20))); n != MaxJSONContainers+1 {
		t.Errorf("JSONContainerBound of a big body: %d", n)
	}
}
