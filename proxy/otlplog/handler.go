// Package otlplog copies the proxy's decision records to an OpenTelemetry
// collector as OTLP logs, next to the local JSON lines.
//
// It exists so that operators who collect telemetry with OpenTelemetry get
// every connection, request and DNS decision of every sandbox without scraping
// files, while the proxy keeps its two promises: the local JSON line stays
// the record (it is written first and whatever the collector does), and a
// slow or absent collector never delays or fails a connection. Records
// wait in a bounded queue and are exported in batches by one goroutine;
// when the queue is full, or an export fails, records are dropped and
// counted, and the count is written to the local log as a line with
// message "otlp".
//
// Only records whose message is "connection" (proxy decisions),
// "request" (decisions on requests inside inspected hosts' sessions) or
// "dns" (DNS filter decisions) are exported: their attributes become OTLP
// attributes of the same types, the message becomes the body, the level
// the severity, and the sandbox a resource attribute (doorman.sandbox,
// with service.name doorman). Without an endpoint nothing is built: the
// handler returned is the local one.
package otlplog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/bridges/otelslog"
	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// Resource attribute keys of the exported records.
const (
	// SandboxKey names the sandbox the records come from.
	SandboxKey = "doorman.sandbox"
	// serviceNameKey is OpenTelemetry's service.name.
	serviceNameKey = "service.name"
	serviceName    = "doorman"
	// scopeName is the instrumentation scope of the exported records.
	scopeName = "github.com/doorman-net/doorman/proxy"
)

// Export batching: one export at least every second, at most
// maxBatch records per request.
const (
	exportInterval = time.Second
	maxBatch       = 256
)

// Exported reports whether records with message msg are sent to the
// collector: the proxy's "connection" and "request", and the DNS
// filter's "dns".
func Exported(msg string) bool {
	return msg == decisionlog.KindConnection || msg == decisionlog.KindRequest || msg == decisionlog.KindDNS
}

// NewHandler returns a handler that writes every record to local, and
// also exports those whose message is Exported to cfg.Endpoint as OTLP
// logs (OTLP/HTTP, protobuf). shutdown flushes what is queued within its
// context's deadline, stops the exporter, and writes a final "otlp" line
// with the counts to local; call it once, on exit.
//
// With an empty cfg.Endpoint, NewHandler returns local itself and a
// shutdown that does nothing: no goroutine, no allocation, no OTel state.
//
// Handle never waits for the collector. Export is OTLP/HTTP with
// protobuf bodies, uncompressed, with the system's CA roots; the
// OTEL_EXPORTER_OTLP_* variables play no part (HTTPS_PROXY and NO_PROXY
// do, as for OpenTelemetry's exporters).
func NewHandler(local slog.Handler, cfg Config) (h slog.Handler, shutdown func(context.Context) error, err error) {
	if cfg.Endpoint == "" {
		return local, func(context.Context) error { return nil }, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	cfg = cfg.withDefaults()
	u, err := cfg.URL()
	if err != nil {
		return nil, nil, err
	}
	exp := newHTTPExporter(u, cfg.Headers, cfg.ExportTimeout)

	c := &counts{limit: int64(cfg.QueueSize)}
	// The SDK's batch processor: a bounded queue, one goroutine, exports
	// of at most maxBatch records, each cut off after ExportTimeout.
	batch := sdklog.NewBatchProcessor(countingExporter{Exporter: exp, counts: c},
		sdklog.WithMaxQueueSize(cfg.QueueSize),
		sdklog.WithExportMaxBatchSize(min(maxBatch, cfg.QueueSize)),
		sdklog.WithExportInterval(exportInterval),
		sdklog.WithExportTimeout(cfg.ExportTimeout),
	)
	provider := sdklog.NewLoggerProvider(
		sdklog.WithResource(resource.NewSchemaless(
			attribute.String(serviceNameKey, serviceName),
			attribute.String(SandboxKey, cfg.Sandbox),
		)),
		sdklog.WithProcessor(boundedProcessor{Processor: batch, counts: c}),
		// The records come from slog, which keeps duplicate keys (and so
		// does the local line); the SDK's deduplication, one map per
		// attribute added, would cost more than the rest of the export.
		sdklog.WithAllowKeyDuplication(),
	)

	stopped := new(atomic.Bool)
	tee := &teeHandler{
		local:   local,
		remote:  otelslog.NewHandler(scopeName, otelslog.WithLoggerProvider(provider)),
		stopped: stopped,
		counts:  c,
	}

	reportTo := slog.New(local).With(slog.String(decisionlog.SandboxKey, cfg.Sandbox), slog.String(decisionlog.EndpointKey, u.String()))
	stop, done := make(chan struct{}), make(chan struct{})
	go reportDrops(c, reportTo, cfg.ReportInterval, stop, done)

	var once sync.Once
	shutdown = func(ctx context.Context) error {
		var err error
		once.Do(func() {
			stopped.Store(true)
			close(stop)
			<-done
			if serr := provider.Shutdown(ctx); serr != nil {
				err = fmt.Errorf("otlp export to %s: shutdown: %w", u, serr)
			}
			// What is still pending did not reach the collector in time.
			// An export the deadline cut short may still be settling its
			// records: settle keeps them from counting as failed and as
			// unsent at once.
			c.settle.Lock()
			defer c.settle.Unlock()
			unsent := max(c.pending.Load(), 0)
			level := slog.LevelInfo
			if c.dropped()+unsent > 0 {
				level = slog.LevelWarn
			}
			c.report(reportTo, level, decisionlog.MsgOTLP, unsent)
		})
		return err
	}
	return tee, shutdown, nil
}

// teeHandler writes records to local and copies the Exported ones to
// remote. It is enabled exactly when local is: the exported records are a
// copy of local lines, never more.
type teeHandler struct {
	local   slog.Handler
	remote  slog.Handler
	stopped *atomic.Bool // set by shutdown: nothing more is exported
	counts  *counts
}

// Enabled reports whether local takes records at level l.
func (h *teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.local.Enabled(ctx, l)
}

// Handle writes r to local, then queues it for export if its message is
// Exported. Only local's error is returned: export never fails a record.
func (h *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.local.Handle(ctx, r)
	if !Exported(r.Message) || h.stopped.Load() {
		return err
	}
	if h.counts.pending.Load() >= h.counts.limit {
		// The queue is full: drop now rather than convert the record
		// for boundedProcessor to drop it.
		h.counts.queueFull.Add(1)
		return err
	}
	_ = h.remote.Handle(ctx, r) // queues and returns; drops are counted
	return err
}

// WithAttrs returns a handler whose records carry attrs, locally and
// exported.
func (h *teeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &teeHandler{local: h.local.WithAttrs(attrs), remote: h.remote.WithAttrs(attrs), stopped: h.stopped, counts: h.counts}
}

// WithGroup returns a handler that puts the attributes that follow in
// group name, locally and exported.
func (h *teeHandler) WithGroup(name string) slog.Handler {
	return &teeHandler{local: h.local.WithGroup(name), remote: h.remote.WithGroup(name), stopped: h.stopped, counts: h.counts}
}
