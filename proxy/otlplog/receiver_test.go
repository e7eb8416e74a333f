package otlplog_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP logs endpoint on loopback that decodes each
// request with the official OTLP protobuf package.
type receiver struct {
	*httptest.Server

	mu       sync.Mutex
	requests []*collogspb.ExportLogsServiceRequest
	headers  []http.Header
	paths    []string
	got      chan struct{} // a value per request decoded
}

// startReceiver serves OTLP on 127.0.0.1. reply, if not nil, answers
// request n (from 0) instead of the plain 200 with an empty protobuf
// response; it runs after the request is recorded.
func startReceiver(t *testing.T, reply func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{got: make(chan struct{}, 1<<16)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := new(collogspb.ExportLogsServiceRequest)
		if err := proto.Unmarshal(body, req); err != nil {
			t.Errorf("receiver: request body is not an ExportLogsServiceRequest: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		n := len(rc.requests)
		rc.requests = append(rc.requests, req)
		rc.headers = append(rc.headers, r.Header.Clone())
		rc.paths = append(rc.paths, r.URL.Path)
		rc.mu.Unlock()
		rc.got <- struct{}{}
		if reply != nil {
			reply(n, w, r)
			return
		}
		writeResponse(w, &collogspb.ExportLogsServiceResponse{})
	}))
	t.Cleanup(rc.Close)
	return rc
}

func writeResponse(w http.ResponseWriter, resp *collogspb.ExportLogsServiceResponse) {
	b, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

// exported is one log record as received, with its resource and scope.
type exported struct {
	resource map[string]*commonpb.AnyValue
	scope    string
	record   *logspb.LogRecord
	attrs    map[string]*commonpb.AnyValue
}

// records returns every log record received so far, in order.
func (rc *receiver) records() []exported {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []exported
	for _, req := range rc.requests {
		for _, rl := range req.GetResourceLogs() {
			res := attrMap(rl.GetResource().GetAttributes())
			for _, sl := range rl.GetScopeLogs() {
				for _, lr := range sl.GetLogRecords() {
					out = append(out, exported{resource: res, scope: sl.GetScope().GetName(), record: lr, attrs: attrMap(lr.GetAttributes())})
				}
			}
		}
	}
	return out
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// syncBuffer is a bytes.Buffer safe for the handler's report goroutine
// and the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the JSON lines written so far, decoded.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	data := append([]byte(nil), s.b.Bytes()...)
	s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("local line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// withMsg returns the lines whose msg is msg.
func withMsg(lines []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// waitLine polls buf until a line satisfies ok, or fails after timeout.
func waitLine(t *testing.T, buf *syncBuffer, timeout time.Duration, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, l := range buf.lines(t) {
			if ok(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			var otlp []string
			for _, l := range withMsg(buf.lines(t), "otlp") {
				b, _ := json.Marshal(l)
				otlp = append(otlp, string(b))
			}
			t.Fatalf("no local line %s within %v; otlp lines: %s", what, timeout, strings.Join(otlp, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// num reads a JSON number field as int64 (-1 if absent).
func num(l map[string]any, k string) int64 {
	f, ok := l[k].(float64)
	if !ok {
		return -1
	}
	return int64(f)
}
