package conf

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// TestJudgeBodyMemory: judging a body by a host's JSON rules costs about
// its size, not a tree of it. A 1 MiB body of small objects or arrays
// took 40 to 57 MiB of allocations and 27 to 30 MiB live as
// map[string]any and []any (39 to 55 times its size): at the default
// max-body, a few requests in flight outgrew a proxy's 256 MiB cgroup.
func TestJudgeBodyMemory(t *testing.T) {
	p, err := ParseFile([]byte("a.test\ninspect a.test deny POST json:tools[].type=web_search*\ninspect a.test allow POST json:tools[0].name=x\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := p.InspectFor("a.test")
	const size = 1 << 20
	n := MaxJSONContainers - 3 // the most a body that can be read holds, with the document and tools
	for _, body := range []string{
		`[` + strings.Repeat(`[],`, n) + `[]]`,
		`[` + strings.Repeat(`0,`, size/2) + `0]`,
		`{"tools":[` + strings.Repeat(`{},`, n) + `{}]}`,
		`{"tools":[` + strings.Repeat(`{"type":"bash","name":"b"},`, size/27) + `{}]}`,
	} {
		req := &Request{Method: "POST", Path: "/", Header: http.Header{}, Body: []byte(body)}
		var j Judgement
		grew := allocated(func() { j = h.Judge(req) })
		if j.Verdict != VerdictDeny || j.Rule != "default deny" {
			t.Fatalf("%.40s...: %+v", body, j)
		}
		if grew > 8*uint64(len(body)) {
			t.Errorf("%.40s...: judging %d bytes allocated %d", body, len(body), grew)
		}
	}
}

// allocated returns the bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// BenchmarkJudgeBody judges an agent's 256 KiB Messages request by a
// host's JSON rules (a deny rule that reads tools[], an allow rule that
// reads messages[0].role): what a body rule costs per request.
func BenchmarkJudgeBody(b *testing.B) {
	p, err := ParseFile([]byte("a.test\ninspect a.test deny POST json:tools[].type=web_search*\ninspect a.test allow POST json:messages[0].role=assistant\n"))
	if err != nil {
		b.Fatal(err)
	}
	h := p.InspectFor("a.test")
	body := []byte(agentBody(256 << 10))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req := &Request{Method: "POST", Path: "/v1/messages", Header: http.Header{}, Body: body}
		if j := h.Judge(req); j.Verdict != VerdictAllow {
			b.Fatal(j)
		}
	}
}
