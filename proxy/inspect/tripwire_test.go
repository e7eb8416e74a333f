package inspect

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/doorman-net/doorman/conf"
)

// closedBookEvidence is the evidence the closed-book set looks for on
// Anthropic's, OpenAI's and Google's hosts.
func closedBookEvidence(t testing.TB, host string) *conf.EvidenceMatcher {
	t.Helper()
	p, err := conf.ParseFile([]byte("mode: open\nruleset closed-book\n"))
	if err != nil {
		t.Fatal(err)
	}
	sets := p.RuleSetsFor(host)
	return conf.NewEvidenceMatcher(sets[0].Evidence())
}

// chunked reads s a few bytes at a time, as a stream arrives.
func chunked(s string, n int) io.Reader {
	return iotest.OneByteReader(strings.NewReader(s)) // n unused: one byte is the hardest
}

// Real response shapes, from the vendors' SDK types: which trip the
// wire, and where the response is cut.
func TestTripwire(t *testing.T) {
	for _, c := range []struct {
		name, host string
		kind       tripKind
		body       string
		want       string // what the client gets: the body up to the cut
		evidence   string // "" none
		// never: what a JSON body read a byte at a time must not
		// forward (the wire cuts where it decides, and a JSON body
		// streams up to there).
		never string
	}{
		{name: "anthropic plain JSON", host: "api.anthropic.com", kind: tripJSON,
			body: `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"say \"type\":\"server_tool_use\""},{"type":"tool_use","id":"t","name":"web_search","input":{}}],"stop_reason":"tool_use"}`},
		{name: "anthropic server tool, JSON", host: "api.anthropic.com", kind: tripJSON,
			body:     `{"id":"msg_1","content":[{"type":"text","text":"let me look"},{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"answer"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://x","title":"the answer"}]}]}`,
			want:     `{"id":"msg_1","content":[{"type":"text","text":"let me look"},`,
			evidence: "anthropic.server_tool", never: "the answer"},
		{name: "anthropic stream", host: "api.anthropic.com", kind: tripSSE,
			body: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web_search\",\"input\":{}}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"query\\\"\"}}\n\n",
			want: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
			evidence: "anthropic.server_tool"},
		{name: "anthropic stream, CRLF, tool search passes", host: "api.anthropic.com", kind: tripSSE,
			body: "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"server_tool_use\",\"name\":\"tool_search_tool_regex\"}}\r\n\r\n: comment\r\n\r\ndata: [DONE]\r\n\r\n"},
		{name: "openai responses stream", host: "api.openai.com", kind: tripSSE,
			body: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"tools\":[{\"type\":\"web_search\"}]}}\n\n" +
				"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"web_search_call\",\"id\":\"ws_1\",\"status\":\"in_progress\"}}\n\n",
			want:     "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"tools\":[{\"type\":\"web_search\"}]}}\n\n",
			evidence: "openai.web_search"},
		{name: "openai chat completion citations", host: "api.openai.com", kind: tripJSON,
			body:     `{"choices":[{"message":{"content":"x","annotations":[{"type":"url_citation","url_citation":{"url":"https://x"}}]}}]}`,
			want:     `{"choices":[{"message":{"content":"x","annotations":[`,
			evidence: "openai.web_search", never: "https://x"},
		{name: "gemini grounding, streamed JSON array", host: "generativelanguage.googleapis.com", kind: tripJSON,
			body:     `[{"candidates":[{"content":{"parts":[{"text":"a"}]}}]},` + "\n" + `{"candidates":[{"content":{"parts":[{"text":"b"}]},"groundingMetadata":{"webSearchQueries":["q"]}}]}]`,
			want:     `[{"candidates":[{"content":{"parts":[{"text":"a"}]}}]},` + "\n" + `{"candidates":[`,
			evidence: "google.google_search", never: "webSearchQueries"},
		{name: "gemini empty grounding passes", host: "generativelanguage.googleapis.com", kind: tripJSON,
			body: `{"candidates":[{"groundingMetadata":{},"urlContextMetadata":null,"content":{"parts":[{"text":"b"}]}}]}`},
		{name: "gemini code execution part, escaped key", host: "generativelanguage.googleapis.com", kind: tripSSE,
			body:     "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}]}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"executable\\u0043ode\":{\"code\":\"print(1)\"}}]}}]}\r\n\r\n",
			want:     "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}]}\r\n\r\n",
			evidence: "google.code_execution"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := closedBookEvidence(t, c.host)
			for _, probe := range []bool{false, true} {
				for i, src := range []io.Reader{strings.NewReader(c.body), chunked(c.body, 1)} {
					tw := newTripwire(src, c.kind, ev, probe)
					got, err := io.ReadAll(tw)
					want := c.body
					if c.evidence != "" && !probe {
						want = c.want
						if !errors.Is(err, errTripped) {
							t.Errorf("probe %v: err %v, want the wire tripped", probe, err)
						}
					} else if err != nil {
						t.Errorf("probe %v: %v", probe, err)
					}
					switch {
					case i == 1 && c.kind == tripJSON && c.evidence != "" && !probe:
						if !strings.HasPrefix(c.body, string(got)) || len(got) < len(want) || strings.Contains(string(got), c.never) {
							t.Errorf("a byte at a time: got\n%q\nwant a prefix of the body without %q", got, c.never)
						}
					case i == 1 && strings.HasSuffix(want, "\r\n") && string(got)+"\n" == want:
						// The event's CR ended it before its LF came.
					case string(got) != want:
						t.Errorf("probe %v: got\n%q\nwant\n%q", probe, got, want)
					}
					if (c.evidence == "") != (len(tw.seen) == 0) || (c.evidence != "" && tw.seen[0] != c.evidence) {
						t.Errorf("probe %v: evidence %q, want %q", probe, tw.seen, c.evidence)
					}
				}
			}
		})
	}
}

// A body that says JSON and is not is cut (it cannot be judged), and an
// event over the limit is cut; probe mode passes both on.
func TestTripwireFailsClosed(t *testing.T) {
	ev := closedBookEvidence(t, "api.openai.com")
	tw := newTripwire(strings.NewReader(`{"a":1}}{"type":"web_search_call"}`), tripJSON, ev, false)
	if _, err := io.ReadAll(tw); !errors.Is(err, errTripped) || tw.why == "" {
		t.Errorf("not JSON: %v %q", err, tw.why)
	}
	big := "data: {\"a\":\"" + strings.Repeat("x", maxEvent) + "\"}\n\n"
	tw = newTripwire(strings.NewReader(big), tripSSE, ev, false)
	if got, err := io.ReadAll(tw); !errors.Is(err, errTripped) || len(got) != 0 {
		t.Errorf("long event: %v, %d bytes", err, len(got))
	}
	tw = newTripwire(strings.NewReader(big), tripSSE, ev, true)
	if got, err := io.ReadAll(tw); err != nil || !bytes.Equal(got, []byte(big)) {
		t.Errorf("long event, probe: %v, %d bytes", err, len(got))
	}
}

// The scanner reads a stream split anywhere as it reads it whole.
func TestJSONScannerSplits(t *testing.T) {
	ev := closedBookEvidence(t, "api.anthropic.com")
	body := `[1, -2.5e3, true, null, "a\"b\\", {"type" : "web_fetch_tool_result", "x":[{}]}, {"t\u0079pe":"mcp_tool_use"}]`
	var whole jsonScanner
	whole.ev = ev
	all, err := whole.Write([]byte(body))
	if err != nil || whole.end() != nil || len(all) != 2 {
		t.Fatalf("%v %v", all, err)
	}
	for i := 0; i <= len(body); i++ {
		var s jsonScanner
		s.ev = ev
		h1, err1 := s.Write([]byte(body[:i]))
		h2, err2 := s.Write([]byte(body[i:]))
		hits := append(h1, h2...)
		if err1 != nil || err2 != nil || s.end() != nil || len(hits) != 2 || hits[0].start != all[0].start || hits[1].ev.ID != "anthropic.mcp" {
			t.Fatalf("split at %d: %v %v %v", i, hits, err1, err2)
		}
	}
	for _, bad := range []string{`{"a" 1}`, `[1 2]`, `{"a":}`, `[1,]`, `{,}`, `nul`, `[tru]`, `{"a":1,}`, `}`, `01x`} {
		var s jsonScanner
		s.ev = ev
		_, err := s.Write([]byte(bad))
		if err == nil {
			err = s.end()
		}
		if err == nil {
			t.Errorf("%s scans", bad)
		}
	}
}
