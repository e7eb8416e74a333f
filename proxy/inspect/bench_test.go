package inspect

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkKeepAlive is one process's view of the inspected keep-alive
// path of BenchmarkInspect (integration): HTTP/1.1 clients on keep-alive
// sessions, a body rule that parses every request, an upstream that
// offers HTTP/2. Client and upstream share the process with the Server:
// it is for profiling the Server's share (-cpuprofile, allocations), not
// a measure of its speed.
func BenchmarkKeepAlive(b *testing.B) {
	bd := newBed(b, "api.example.test\ninspect api.example.test deny POST /v1/messages json:tools[].type=web_search*\n", true)
	cl := bd.client(false)
	const body = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"bash_20250124","name":"bash"}]}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", "https://"+host+"/v1/messages", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := cl.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

// BenchmarkRuleSetKeepAlive is BenchmarkKeepAlive on a model API host
// with one body rule beside the same host with the closed-book set (the
// integration BenchmarkRuleSet's keep-alive rows), for profiling the
// set's share.
func BenchmarkRuleSetKeepAlive(b *testing.B) {
	const body = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"bash_20250124","name":"bash"}]}`
	for _, c := range []struct{ name, policy string }{
		{"one rule", "api.anthropic.com\ninspect api.anthropic.com deny POST /v1/messages json:tools[].type=web_search*\n"},
		{"closed-book", "api.anthropic.com\nruleset closed-book\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			bd := newSetBed(b, "api.anthropic.com", c.policy)
			cl := bd.client(false)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("POST", "https://api.anthropic.com/v1/messages", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := cl.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRuleSetStream is BenchmarkRuleSetKeepAlive for a streamed
// answer (six server-sent events, each scanned by the tripwire under
// closed-book).
func BenchmarkRuleSetStream(b *testing.B) {
	const body = `{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	events := []string{
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello from the fake provider"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`,
		`{"type":"message_stop"}`,
	}
	for _, c := range []struct{ name, policy string }{
		{"one rule", "api.anthropic.com\ninspect api.anthropic.com deny POST /v1/messages json:tools[].type=web_search*\n"},
		{"closed-book", "api.anthropic.com\nruleset closed-book\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			bd := newSetBed(b, "api.anthropic.com", c.policy)
			bd.answer = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, e := range events {
					io.WriteString(w, "event: x\ndata: "+e+"\n\n")
					w.(http.Flusher).Flush()
				}
			}
			cl := bd.client(false)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("POST", "https://api.anthropic.com/v1/messages", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := cl.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
