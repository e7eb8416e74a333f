package decisionlog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"testing"
	"time"
)

// twoHandlers returns this package's JSON handler and slog's, each
// writing to its own buffer, and both stamping every record with the same
// time.
func twoHandlers() (ours, theirs slog.Handler, ourBuf, theirBuf *bytes.Buffer) {
	ourBuf, theirBuf = new(bytes.Buffer), new(bytes.Buffer)
	return fixedTime{NewJSONHandler(ourBuf)}, fixedTime{slog.NewJSONHandler(theirBuf, nil)}, ourBuf, theirBuf
}

// fixedTime gives each record with a time the same one, with a monotonic
// reading (which the handlers must drop) and nanoseconds.
type fixedTime struct{ slog.Handler }

var fixedNow = time.Now()

func (h fixedTime) Handle(ctx context.Context, r slog.Record) error {
	if !r.Time.IsZero() {
		r.Time = fixedNow
	}
	return h.Handler.Handle(ctx, r)
}

func (h fixedTime) WithAttrs(as []slog.Attr) slog.Handler {
	return fixedTime{h.Handler.WithAttrs(as)}
}

func (h fixedTime) WithGroup(name string) slog.Handler { return fixedTime{h.Handler.WithGroup(name)} }

// sameLines logs with log through both handlers (and through loggers
// built on them, as the daemon builds them) and fails unless the bytes
// written are the same.
func sameLines(t *testing.T, log func(l *slog.Logger)) {
	t.Helper()
	ours, theirs, ob, tb := twoHandlers()
	log(slog.New(ours))
	log(slog.New(theirs))
	if !bytes.Equal(ob.Bytes(), tb.Bytes()) {
		t.Fatalf("lines differ:\nours:   %q\nslog's: %q", ob.String(), tb.String())
	}
	if ob.Len() == 0 {
		t.Fatal("nothing written")
	}
}

// Every line the proxy writes comes out as slog's JSON handler writes it.
func TestJSONHandlerWritesSlogsBytes(t *testing.T) {
	ctx := context.Background()
	when := time.Date(2026, 3, 4, 5, 6, 7, 891000000, time.FixedZone("X", 3600))
	conn := Connection{
		Sandbox: "ctr1", Client: netip.MustParseAddrPort("127.0.0.1:40000"),
		Dst: netip.MustParseAddrPort("[2001:db8::10]:443"), Proto: "tls", Name: "api.example.test",
		Rule: "api.example.test", Verdict: Allow, Reason: "name allowed",
		Upstream: netip.MustParseAddrPort("[2001:db8::10]:443"), BytesUp: 517, BytesDown: 4120,
		Duration: 1500 * time.Microsecond,
	}
	denied := conn
	denied.Verdict, denied.Upstream, denied.Reason = Deny, netip.AddrPort{}, "request for \"evil\"\n<x>&\u2028\xff: name not allowed"
	for _, tc := range []struct {
		name string
		log  func(l *slog.Logger)
	}{
		{"connection", func(l *slog.Logger) { conn.Log(ctx, l) }},
		{"denied connection", func(l *slog.Logger) { denied.Log(ctx, l) }},
		{"pod uid", func(l *slog.Logger) { conn.Log(ctx, WithPod(l, "6f1c2d9e-1b2a")) }},
		{"dns", func(l *slog.Logger) {
			DNSQuery{Sandbox: "ctr1", Proto: "udp", Client: netip.MustParseAddrPort("10.0.0.2:5353"), Name: "a.example",
				QType: "A", Verdict: Allow, ECHRemoved: true, PrivateRemoved: 2, Duration: 3 * time.Millisecond}.Log(ctx, l)
		}},
		{"denials", func(l *slog.Logger) {
			Denials{Sandbox: "ctr1", Kind: KindConnection, Count: 7, First: when, Last: when.Add(time.Second)}.Log(ctx, l)
		}},
		{"limits", func(l *slog.Logger) {
			Limits{Sandbox: "ctr1", Connections: 10, SniffTimeout: time.Second, LimitedBy: "nofile"}.Log(ctx, l)
		}},
		{"resolver (a value of another kind)", func(l *slog.Logger) {
			Resolver{Sandbox: "ctr1", Servers: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:53")}}.Log(ctx, l)
		}},
		{"policy rejected", func(l *slog.Logger) {
			PolicyLoad{Sandbox: "ctr1", Path: "/p", Err: errors.New("bad \x00 entry")}.Log(ctx, l)
		}},
		{"every flat kind", func(l *slog.Logger) {
			l.LogAttrs(ctx, slog.LevelWarn+1, "m\tsg", slog.Uint64("u", math.MaxUint64), slog.Int64("i", math.MinInt64),
				slog.Bool("b", false), slog.Duration("d", -time.Second), slog.Time("t", when),
				slog.Float64("f1", 1e21), slog.Float64("f2", 1e-7), slog.Float64("f3", -0.0), slog.Float64("f4", 123456.789))
		}},
		{"not flat", func(l *slog.Logger) {
			l.Info("x", "err", errors.New("e"), slog.Group("g", "a", 1), "nan", math.NaN(), "", "empty key")
			l.Info("y", slog.Time("year", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)))
			l.Info("z", slog.Attr{})
		}},
		{"with attrs and groups", func(l *slog.Logger) {
			l = l.With("a", 1, "s", "x\"y")
			l.Info("one", "b", 2)
			l.With(slog.Group("g", "c", 3)).Info("two", "d", 4)
			l.WithGroup("grp").Info("three", "e", 5)
			l.WithGroup("grp").With("f", 6).Info("four")
			l.With().Info("five")
			l.WithGroup("").Info("six", "h", 8)
		}},
		{"debug is not written", func(l *slog.Logger) {
			l.Debug("no")
			l.Info("yes")
		}},
		{"no time", func(l *slog.Logger) {
			r := slog.NewRecord(time.Time{}, slog.LevelInfo, "t0", 0)
			r.AddAttrs(slog.String("k", "v"))
			l.Handler().Handle(ctx, r)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { sameLines(t, tc.log) })
	}
}

// FuzzJSONHandler compares this package's handler with slog's on lines
// of every flat kind, with strings of any bytes.
func FuzzJSONHandler(f *testing.F) {
	f.Add("connection", "ctr1", "api.example.test", "name allowed", int64(517), uint64(4120), 1.5, int64(1e15), true)
	f.Add("dns", "", "\x00\x1f\"\\\u2028\u2029\xff\xfe<>&", "\u00e9\U0001F600", int64(-1), uint64(0), 1e-7, int64(math.MinInt64), false)
	f.Add("m", "k", "\x7f", "a\tb\r\nc", int64(math.MaxInt64), uint64(math.MaxUint64), 1e21, int64(0), false)
	f.Fuzz(func(t *testing.T, msg, key, s1, s2 string, i int64, u uint64, fl float64, nanos int64, pod bool) {
		when := time.Unix(0, nanos).In(time.FixedZone("Z", int(nanos%86400)))
		sameLines(t, func(l *slog.Logger) {
			if pod {
				l = WithPod(l, s2)
			}
			l.LogAttrs(context.Background(), slog.LevelInfo, msg,
				slog.String(key, s1), slog.String("name", s2), slog.Int64("i", i), slog.Uint64("u", u),
				slog.Float64("f", fl), slog.Bool("b", pod), slog.Time("t", when), slog.Duration("d", time.Duration(i)))
		})
	})
}
