package inspect

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"syscall"
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
// set's share. cpu-ns/op is the process's CPU time per request (client,
// proxy and upstream together).
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
			cpu0 := processCPU(b)
			defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
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

// benchEvents are the events of BenchmarkRuleSetStream's answer (an
// Anthropic Messages stream).
var benchEvents = []string{
	`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello from the fake provider"}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`,
	`{"type":"message_stop"}`,
}

// BenchmarkTripwire is the tripwire alone on BenchmarkRuleSetStream's
// answer, each event a read of its own as it arrives (stream), and on
// an Anthropic Messages answer of known length read whole (json), by
// closed-book's evidence: its cost per response, without the network
// and TLS around it.
func BenchmarkTripwire(b *testing.B) {
	ev := closedBookEvidence(b, "api.anthropic.com")
	var events [][]byte
	for _, e := range benchEvents {
		events = append(events, []byte("event: x\ndata: "+e+"\n\n"))
	}
	message := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hello from the fake provider"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":5}}`)
	buf := make([]byte, 32<<10)
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU(b)
		defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
		for b.Loop() {
			tw := newTripwire(&eventReader{events: events}, tripSSE, ev, false)
			for {
				if _, err := tw.Read(buf); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
			releaseTripwire(tw) // as the proxy does once a response is sent
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU(b)
		defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
		for b.Loop() {
			tw := newTripwire(bytes.NewReader(message), tripJSON, ev, false)
			for {
				if _, err := tw.Read(buf); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
			releaseTripwire(tw) // as the proxy does once a response is sent
		}
	})
}

// processCPU is the user and system CPU time the process has used, in
// nanoseconds: a loaded machine inflates it less than the wall clock.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// eventReader returns one event per read, as a flushed stream arrives.
type eventReader struct {
	events [][]byte
	i      int
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.i == len(r.events) {
		return 0, io.EOF
	}
	n := copy(p, r.events[r.i])
	r.i++
	return n, nil
}

// BenchmarkRuleSetStream is BenchmarkRuleSetKeepAlive for a streamed
// answer (six server-sent events, each scanned by the tripwire under
// closed-book).
func BenchmarkRuleSetStream(b *testing.B) {
	const body = `{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	events := benchEvents
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
			cpu0 := processCPU(b)
			defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
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
