package testnet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Fake model APIs, for tests of rule sets: a Host named like a provider's
// API host (api.anthropic.com, api.openai.com, a *.googleapis.com name)
// answers that provider's model calls in the shapes of its API, as the
// vendors' own clients (@anthropic-ai/sdk, openai, @google/genai) parse
// them, JSON and streamed, and records every request body it got. The
// names resolve only inside the Net's fake internet.
//
// A request whose body holds ToolUseMarker is answered as if the
// provider had run a provider-side tool (web search): Anthropic's
// server_tool_use and web_search_tool_result blocks, OpenAI's
// web_search_call item (Responses) or url_citation annotation (Chat
// Completions), Gemini's groundingMetadata. A stream sends a first text
// part before the tool use, and ToolUseText only after it.
const (
	ToolUseMarker = "dm-show-tool-use"
	// ToolUseText is text only a response that shows tool use carries,
	// after the evidence: a client that sees it got past the tool use.
	ToolUseText = "the answer from the web is 42"
	// PlainText is the text every model answer starts with.
	PlainText = "hello from the fake provider"
)

// Provider names which API a host fakes.
type Provider string

// The providers the fake hosts speak.
const (
	Anthropic Provider = "anthropic"
	OpenAI    Provider = "openai"
	Gemini    Provider = "gemini"
)

// ProviderOf returns the API a host name fakes, "" if none.
func ProviderOf(name string) Provider {
	switch {
	case name == "api.anthropic.com":
		return Anthropic
	case name == "api.openai.com":
		return OpenAI
	case strings.HasSuffix(name, ".googleapis.com"):
		return Gemini
	}
	return ""
}

// ProviderRequest is one request a fake provider got.
type ProviderRequest struct {
	Method, Path, Host string
	Header             http.Header
	Body               string
}

// providerLog records a fake provider's requests.
type providerLog struct {
	mu   sync.Mutex
	reqs []ProviderRequest
}

// ProviderRequests returns the requests the host got as a fake provider,
// in order.
func (h *Host) ProviderRequests() []ProviderRequest {
	h.providers.mu.Lock()
	defer h.providers.mu.Unlock()
	return append([]ProviderRequest(nil), h.providers.reqs...)
}

// ResetProviderRequests forgets the requests recorded so far.
func (h *Host) ResetProviderRequests() {
	h.providers.mu.Lock()
	defer h.providers.mu.Unlock()
	h.providers.reqs = nil
}

// serveProvider answers a model call on a provider's host; false for a
// host that fakes none.
func (h *Host) serveProvider(w http.ResponseWriter, r *http.Request) bool {
	p := ProviderOf(h.name)
	if p == "" || strings.HasPrefix(r.URL.Path, "/dm/") {
		return false
	}
	body, _ := io.ReadAll(r.Body)
	h.providers.mu.Lock()
	h.providers.reqs = append(h.providers.reqs, ProviderRequest{Method: r.Method, Path: r.URL.Path, Host: r.Host, Header: r.Header.Clone(), Body: string(body)})
	h.providers.mu.Unlock()
	var req struct {
		Stream bool `json:"stream"`
	}
	json.Unmarshal(body, &req)
	tool := bytes.Contains(body, []byte(ToolUseMarker))
	switch {
	case p == Anthropic && r.URL.Path == "/v1/messages":
		if req.Stream {
			anthropicStream(w, tool)
		} else {
			writeJSON(w, anthropicMessage(tool))
		}
	case p == OpenAI && r.URL.Path == "/v1/chat/completions":
		if req.Stream {
			openAIChatStream(w, tool)
		} else {
			writeJSON(w, openAIChat(tool))
		}
	case p == OpenAI && r.URL.Path == "/v1/responses":
		if req.Stream {
			openAIResponsesStream(w, tool)
		} else {
			writeJSON(w, openAIResponse(tool, "completed"))
		}
	case p == Gemini && strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
		geminiStream(w, tool)
	case p == Gemini && strings.HasSuffix(r.URL.Path, ":generateContent"):
		writeJSON(w, geminiChunk(PlainText, tool, true))
	default:
		// Any other call: a JSON object naming what was asked.
		writeJSON(w, map[string]any{"id": "dm_1", "object": "doorman.fake", "path": r.URL.Path, "method": r.Method})
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// sse writes one server-sent event (event may be "") and flushes it.
func sse(w http.ResponseWriter, event string, data any, crlf bool) {
	js, _ := json.Marshal(data)
	nl := "\n"
	if crlf {
		nl = "\r\n"
	}
	if event != "" {
		io.WriteString(w, "event: "+event+nl)
	}
	io.WriteString(w, "data: "+string(js)+nl+nl)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func startStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

// Anthropic: Messages (@anthropic-ai/sdk's Message, RawMessageStreamEvent).

func anthropicUsage() map[string]any {
	return map[string]any{"input_tokens": 3, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
}

var anthropicToolBlocks = []map[string]any{
	{"type": "server_tool_use", "id": "srvtoolu_dm1", "name": "web_search", "input": map[string]any{"query": "the answer"}},
	{"type": "web_search_tool_result", "tool_use_id": "srvtoolu_dm1", "content": []any{
		map[string]any{"type": "web_search_result", "url": "https://example.org/answer", "title": "The answer", "encrypted_content": "x", "page_age": nil}}},
}

func anthropicMessage(tool bool) map[string]any {
	content := []any{map[string]any{"type": "text", "text": PlainText}}
	if tool {
		for _, b := range anthropicToolBlocks {
			content = append(content, b)
		}
		content = append(content, map[string]any{"type": "text", "text": ToolUseText})
	}
	return map[string]any{"id": "msg_dm1", "type": "message", "role": "assistant", "model": "claude-fake", "content": content,
		"stop_reason": "end_turn", "stop_sequence": nil, "usage": anthropicUsage()}
}

func anthropicStream(w http.ResponseWriter, tool bool) {
	startStream(w)
	msg := anthropicMessage(false)
	msg["content"], msg["stop_reason"] = []any{}, nil
	sse(w, "message_start", map[string]any{"type": "message_start", "message": msg}, false)
	text := func(i int, s string) {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}}, false)
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": s}}, false)
		sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": i}, false)
	}
	text(0, PlainText)
	if tool {
		for i, b := range anthropicToolBlocks {
			sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": i + 1, "content_block": b}, false)
			sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": i + 1}, false)
		}
		text(3, ToolUseText)
	}
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 5}}, false)
	sse(w, "message_stop", map[string]any{"type": "message_stop"}, false)
}

// OpenAI: Chat Completions (ChatCompletion, ChatCompletionChunk) and
// Responses (Response, ResponseStreamEvent).

func openAIChat(tool bool) map[string]any {
	msg := map[string]any{"role": "assistant", "content": PlainText, "refusal": nil, "annotations": []any{}}
	if tool {
		msg["content"] = PlainText + " " + ToolUseText
		msg["annotations"] = []any{map[string]any{"type": "url_citation", "url_citation": map[string]any{
			"start_index": 0, "end_index": 5, "url": "https://example.org/answer", "title": "The answer"}}}
	}
	return map[string]any{"id": "chatcmpl-dm1", "object": "chat.completion", "created": 1700000000, "model": "gpt-fake",
		"choices":            []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": "stop"}},
		"usage":              map[string]any{"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
		"system_fingerprint": nil}
}

func openAIChatStream(w http.ResponseWriter, tool bool) {
	startStream(w)
	chunk := func(delta map[string]any, finish any) {
		sse(w, "", map[string]any{"id": "chatcmpl-dm1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-fake",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}, false)
	}
	chunk(map[string]any{"role": "assistant", "content": PlainText}, nil)
	if tool {
		chunk(map[string]any{"annotations": []any{map[string]any{"type": "url_citation", "url_citation": map[string]any{
			"start_index": 0, "end_index": 5, "url": "https://example.org/answer", "title": "The answer"}}}}, nil)
		chunk(map[string]any{"content": " " + ToolUseText}, nil)
	}
	chunk(map[string]any{}, "stop")
	io.WriteString(w, "data: [DONE]\n\n")
}

var openAIWebSearchCall = map[string]any{"type": "web_search_call", "id": "ws_dm1", "status": "completed",
	"action": map[string]any{"type": "search", "query": "the answer"}}

func openAIResponse(tool bool, status string) map[string]any {
	text := func(s string) map[string]any {
		return map[string]any{"type": "message", "id": "msg_dm1", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": s, "annotations": []any{}}}}
	}
	output := []any{text(PlainText)}
	if tool {
		output = []any{openAIWebSearchCall, text(PlainText + " " + ToolUseText)}
	}
	if status != "completed" {
		output = []any{}
	}
	return map[string]any{"id": "resp_dm1", "object": "response", "created_at": 1700000000, "status": status, "error": nil,
		"incomplete_details": nil, "instructions": nil, "max_output_tokens": nil, "model": "gpt-fake", "output": output,
		"parallel_tool_calls": true, "previous_response_id": nil, "temperature": 1, "tool_choice": "auto", "tools": []any{}, "top_p": 1,
		"usage": map[string]any{"input_tokens": 3, "output_tokens": 5, "total_tokens": 8,
			"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}}
}

func openAIResponsesStream(w http.ResponseWriter, tool bool) {
	startStream(w)
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		sse(w, typ, fields, false)
	}
	ev("response.created", map[string]any{"response": openAIResponse(false, "in_progress")})
	msg := map[string]any{"type": "message", "id": "msg_dm1", "status": "in_progress", "role": "assistant", "content": []any{}}
	ev("response.output_item.added", map[string]any{"output_index": 0, "item": msg})
	ev("response.output_text.delta", map[string]any{"item_id": "msg_dm1", "output_index": 0, "content_index": 0, "delta": PlainText, "logprobs": []any{}})
	if tool {
		ev("response.output_item.added", map[string]any{"output_index": 1, "item": openAIWebSearchCall})
		ev("response.web_search_call.completed", map[string]any{"output_index": 1, "item_id": "ws_dm1"})
		ev("response.output_text.delta", map[string]any{"item_id": "msg_dm1", "output_index": 0, "content_index": 0, "delta": " " + ToolUseText, "logprobs": []any{}})
	}
	ev("response.completed", map[string]any{"response": openAIResponse(tool, "completed")})
}

// Gemini: generateContent and streamGenerateContent?alt=sse
// (GenerateContentResponse), events ending in CRLF as Google's do.

func geminiChunk(text string, tool, last bool) map[string]any {
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}}, "index": 0}
	if tool {
		cand["groundingMetadata"] = map[string]any{"webSearchQueries": []any{"the answer"},
			"groundingChunks": []any{map[string]any{"web": map[string]any{"uri": "https://example.org/answer", "title": "The answer"}}}}
	}
	if last {
		cand["finishReason"] = "STOP"
	}
	return map[string]any{"candidates": []any{cand}, "modelVersion": "gemini-fake", "responseId": "dm1",
		"usageMetadata": map[string]any{"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8}}
}

func geminiStream(w http.ResponseWriter, tool bool) {
	startStream(w)
	sse(w, "", geminiChunk(PlainText, false, false), true)
	if tool {
		sse(w, "", geminiChunk(" "+ToolUseText, true, false), true)
	}
	sse(w, "", geminiChunk("", false, true), true)
}

// String renders a request for a test's log.
func (p ProviderRequest) String() string {
	return fmt.Sprintf("%s %s %s", p.Method, p.Path, p.Body)
}
