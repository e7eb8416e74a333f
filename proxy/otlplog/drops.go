package otlplog

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sdklog "go.opentelemetry.io/otel/sdk/log"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// counts tracks what happened to the records handed to the exporter. The
// SDK's batch processor drops records when its queue is full without
// saying how many (beyond a global debug log), and reports export errors
// to OpenTelemetry's global error handler; these counters say it to the
// decision log instead.
type counts struct {
	limit int64 // most records pending at once

	pending   atomic.Int64 // accepted, not yet through an export
	queueFull atomic.Int64 // refused because limit records were pending
	failed    atomic.Int64 // in an export that failed or timed out, or rejected
	exported  atomic.Int64 // in an export that succeeded
	// settle is held while an export's records move from pending to
	// exported or failed, so that the final count (the shutdown line)
	// never sees them in both.
	settle     sync.Mutex
	lastErrMu  sync.Mutex
	lastErr    string // the latest export error, for the report line
	lastErrSet bool
}

// dropped is every record that will never reach the collector.
func (c *counts) dropped() int64 { return c.queueFull.Load() + c.failed.Load() }

func (c *counts) setErr(err error) {
	c.lastErrMu.Lock()
	c.lastErr, c.lastErrSet = err.Error(), true
	c.lastErrMu.Unlock()
}

func (c *counts) latestErr() (string, bool) {
	c.lastErrMu.Lock()
	defer c.lastErrMu.Unlock()
	return c.lastErr, c.lastErrSet
}

// report writes one line with message "otlp" to logger: the records
// exported and dropped since the start. Extra counts (e.g. the records a
// shutdown could not send) are added to dropped.
func (c *counts) report(logger *slog.Logger, level slog.Level, msg string, unsent int64) {
	attrs := []slog.Attr{
		slog.Int64(decisionlog.ExportedKey, c.exported.Load()),
		slog.Int64(decisionlog.DroppedKey, c.dropped()+unsent),
		slog.Int64(decisionlog.QueueFullKey, c.queueFull.Load()),
		slog.Int64(decisionlog.ExportFailedKey, c.failed.Load()),
	}
	if unsent > 0 {
		attrs = append(attrs, slog.Int64(decisionlog.UnsentKey, unsent))
	}
	if e, ok := c.latestErr(); ok {
		attrs = append(attrs, slog.String(decisionlog.LastErrorKey, e))
	}
	logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// boundedProcessor sits in front of the SDK's batch processor and refuses
// (and counts) a record when limit records are already pending, so the
// batch processor's own queue, which is as large as limit, never
// overflows, and the memory held for a collector that does not keep up
// stays bounded.
type boundedProcessor struct {
	sdklog.Processor
	counts *counts
}

// OnEmit passes r on, or drops it if too many are pending. It never
// blocks.
func (p boundedProcessor) OnEmit(ctx context.Context, r *sdklog.Record) error {
	if p.counts.pending.Add(1) > p.counts.limit {
		p.counts.pending.Add(-1)
		p.counts.queueFull.Add(1)
		return nil
	}
	return p.Processor.OnEmit(ctx, r)
}

// countingExporter wraps the OTLP exporter: it counts the records of each
// export as exported or failed, releases them from the pending count,
// and keeps export errors from the SDK's global error handler (which
// would print them to stderr, once per batch).
type countingExporter struct {
	sdklog.Exporter
	counts *counts
}

// Export sends records and counts the outcome. It reports no error: the
// failure is counted, and the batch processor has nothing to do with it.
func (e countingExporter) Export(ctx context.Context, records []sdklog.Record) error {
	err := e.Exporter.Export(ctx, records)
	n := int64(len(records))
	var rejected *rejectedError
	e.counts.settle.Lock()
	defer e.counts.settle.Unlock()
	switch {
	case err == nil:
		e.counts.exported.Add(n)
	case errors.As(err, &rejected):
		r := min(rejected.rejected, n)
		e.counts.failed.Add(r)
		e.counts.exported.Add(n - r)
		e.counts.setErr(err)
	default:
		e.counts.failed.Add(n)
		e.counts.setErr(err)
	}
	e.counts.pending.Add(-n)
	return nil
}

// reportDrops writes a "otlp" line to logger every interval in which
// records were dropped, until stop is closed.
func reportDrops(c *counts, logger *slog.Logger, interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if d := c.dropped(); d != last {
				last = d
				c.report(logger, slog.LevelWarn, decisionlog.MsgOTLP, 0)
			}
		}
	}
}
