package otlplog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/doorman-net/doorman/proxy/internal/logtest"
	"github.com/doorman-net/doorman/spec"
)

// The "otlp" lines are fixed to the byte: the final one of a shutdown,
// and one with every count.
func TestOTLPLinesGolden(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("exported with nothing logged: %s", r.URL)
	}))
	defer srv.Close()
	var buf bytes.Buffer
	_, shutdown, err := NewHandler(slog.NewJSONHandler(&buf, nil), Config{Sandbox: "sb-golden", OTLP: spec.OTLP{Endpoint: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	c := &counts{limit: 10}
	c.exported.Store(7)
	c.queueFull.Store(2)
	c.failed.Store(3)
	c.setErr(errors.New("otlp export: 503 Service Unavailable"))
	c.report(slog.New(slog.NewJSONHandler(&buf, nil)).With(slog.String("sandbox", "sb-golden"), slog.String("endpoint", "http://collector.example:4318/v1/logs")), slog.LevelWarn, "otlp", 4)

	logtest.Check(t, logtest.Lines(buf.String()),
		`{"level":"INFO","msg":"otlp","sandbox":"sb-golden","endpoint":"`+srv.URL+`/v1/logs","exported":0,"dropped":0,"queue_full":0,"export_failed":0}`,
		`{"level":"WARN","msg":"otlp","sandbox":"sb-golden","endpoint":"http://collector.example:4318/v1/logs","exported":7,"dropped":9,"queue_full":2,"export_failed":3,"unsent":4,"last_error":"otlp export: 503 Service Unavailable"}`,
	)
}
