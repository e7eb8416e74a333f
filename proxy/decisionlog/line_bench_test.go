package decisionlog

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"
)

// benchConnection is a typical allowed connection's line.
var benchConnection = Connection{
	Sandbox: "default/web-7d4b9c", Client: netip.MustParseAddrPort("10.88.0.7:41532"),
	Dst: netip.MustParseAddrPort("203.0.113.80:443"), Proto: "tls", Name: "api.example.test",
	Rule: "api.example.test", Verdict: Allow, Reason: "name allowed",
	Upstream: netip.MustParseAddrPort("203.0.113.80:443"), BytesUp: 2317, BytesDown: 61234,
	Duration: 18734 * time.Microsecond,
}

// BenchmarkConnectionLine writes a connection line through the chain the
// proxy's daemon builds (pod uid, Aggregator, JSON handler) to a writer
// that drops it: what encoding one line costs, without its write(2).
// The slog row is slog's own JSON handler, and the "before" row that
// through Logger.LogAttrs, as the proxy wrote a line before issue 29.
func BenchmarkConnectionLine(b *testing.B) {
	b.Run("before", func(b *testing.B) {
		agg := NewAggregator(slog.NewJSONHandler(io.Discard, nil), AggregatorConfig{})
		defer agg.Close()
		l := WithPod(slog.New(agg), "6f1c2d9e-1b2a-4c3d-9e8f-0a1b2c3d4e5f")
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			l.LogAttrs(ctx, slog.LevelInfo, KindConnection, benchConnection.Attrs()...)
		}
	})
	for _, h := range []struct {
		name string
		h    slog.Handler
	}{
		{"decisionlog", NewJSONHandler(io.Discard)},
		{"slog", slog.NewJSONHandler(io.Discard, nil)},
	} {
		b.Run(h.name, func(b *testing.B) {
			agg := NewAggregator(h.h, AggregatorConfig{})
			defer agg.Close()
			l := WithPod(slog.New(agg), "6f1c2d9e-1b2a-4c3d-9e8f-0a1b2c3d4e5f")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				benchConnection.Log(ctx, l)
			}
		})
	}
}
