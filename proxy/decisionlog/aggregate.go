package decisionlog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults of AggregatorConfig.
const (
	// DefaultInterval is how long the Aggregator counts repeats before
	// it writes what it counted.
	DefaultInterval = 10 * time.Second
	// DefaultMaxDistinct is how many distinct denials one interval logs
	// one by one.
	DefaultMaxDistinct = 256
)

// AggregatorConfig configures an Aggregator; the zero value of each
// field is its default.
type AggregatorConfig struct {
	// Interval is how long repeats are counted before a summary line is
	// written (default DefaultInterval).
	Interval time.Duration
	// MaxDistinct bounds the distinct denials an interval logs one by
	// one (default DefaultMaxDistinct); the denials of other keys are
	// counted in one summary per kind.
	MaxDistinct int
}

// Aggregator is a slog.Handler in front of the decision log's own that
// bounds what denials and refusals write. A workload that asks for the
// same denied name twenty thousand times a second, or floods a cap, would
// otherwise write a line each time: tens of gigabytes an hour into the
// host's log directory.
//
// Within each interval:
//
//   - The first denial of a key (kind, proto, name, qtype and rcode,
//     original destination, rule and reason: all but the client's port) is
//     written as it was logged; its repeats are counted, and written at
//     the end of the interval as one denials line (see Denials) with
//     their count and the times of the first and the last.
//   - Past MaxDistinct keys, the denials of new keys are not written but
//     counted, per kind, in one denials line whose reason is
//     ReasonTooManyDenials: a workload that encodes data into ever new
//     names cannot grow the log faster than that either.
//   - Limit lines (a cap refused) likewise: the first per cap is written,
//     the rest summed into one limit line at the end.
//
// Every other line, allowed connections and queries included, passes
// through unchanged. A handler derived with WithAttrs or WithGroup passes
// everything through. Close writes what is still counted.
type Aggregator struct {
	next        slog.Handler
	interval    time.Duration
	maxDistinct int

	mu      sync.Mutex
	denials map[denialKey]*repeats
	order   []denialKey // the keys of denials, in the order first seen
	others  map[otherKey]*repeats
	limits  map[limitKey]*repeats
	lorder  []limitKey
	maxes   map[limitKey]int64
	closed  bool

	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}
}

// denialKey is what makes two denials the same.
type denialKey struct {
	kind, sandbox, proto, name, qtype, rcode, dst, rule, reason string
}

// otherKey counts the denials past MaxDistinct.
type otherKey struct{ kind, sandbox string }

// limitKey is one cap of one sandbox.
type limitKey struct{ sandbox, limit string }

// repeats counts the lines of one key not written.
type repeats struct {
	count       int64
	first, last time.Time
}

func (r *repeats) add(t time.Time) {
	if r.count == 0 {
		r.first = t
	}
	r.count++
	r.last = t
}

// NewAggregator returns an Aggregator writing to next, which flushes its
// counts every interval until Close.
func NewAggregator(next slog.Handler, cfg AggregatorConfig) *Aggregator {
	a := &Aggregator{
		next:        next,
		interval:    cfg.Interval,
		maxDistinct: cfg.MaxDistinct,
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	if a.interval <= 0 {
		a.interval = DefaultInterval
	}
	if a.maxDistinct <= 0 {
		a.maxDistinct = DefaultMaxDistinct
	}
	a.reset()
	go a.loop()
	return a
}

func (a *Aggregator) reset() {
	a.denials = make(map[denialKey]*repeats)
	a.order = a.order[:0]
	a.others = make(map[otherKey]*repeats)
	a.limits = make(map[limitKey]*repeats)
	a.lorder = a.lorder[:0]
	a.maxes = make(map[limitKey]int64)
}

func (a *Aggregator) loop() {
	defer close(a.done)
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.Flush()
		}
	}
}

// Close writes the counts of the interval in progress and stops the
// flushing. Lines handled after Close pass through unaggregated.
func (a *Aggregator) Close() {
	a.closeOnce.Do(func() {
		close(a.stop)
		<-a.done
		a.Flush()
		a.mu.Lock()
		a.closed = true
		a.mu.Unlock()
	})
}

// Enabled reports whether next handles level.
func (a *Aggregator) Enabled(ctx context.Context, level slog.Level) bool {
	return a.next.Enabled(ctx, level)
}

// WithAttrs returns next's handler with attrs: it does not aggregate.
func (a *Aggregator) WithAttrs(attrs []slog.Attr) slog.Handler { return a.next.WithAttrs(attrs) }

// WithGroup returns next's handler with the group: it does not aggregate.
func (a *Aggregator) WithGroup(name string) slog.Handler { return a.next.WithGroup(name) }

// Handle writes r, or counts it if it repeats a denial or a refusal of
// this interval (see Aggregator).
func (a *Aggregator) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case KindConnection, KindDNS:
		k, ok := denialOf(r)
		if !ok {
			return a.next.Handle(ctx, r)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.closed {
			return a.next.Handle(ctx, r)
		}
		if rep := a.denials[k]; rep != nil {
			rep.add(r.Time)
			return nil
		}
		if len(a.denials) >= a.maxDistinct {
			ok := otherKey{k.kind, k.sandbox}
			rep := a.others[ok]
			if rep == nil {
				rep = &repeats{}
				a.others[ok] = rep
			}
			rep.add(r.Time)
			return nil
		}
		a.denials[k] = &repeats{}
		a.order = append(a.order, k)
		return a.next.Handle(ctx, r)
	case KindLimit:
		k, limit, ok := limitOf(r)
		if !ok {
			return a.next.Handle(ctx, r)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.closed {
			return a.next.Handle(ctx, r)
		}
		a.maxes[k] = limit
		if rep := a.limits[k]; rep != nil {
			rep.add(r.Time)
			return nil
		}
		a.limits[k] = &repeats{}
		a.lorder = append(a.lorder, k)
		return a.next.Handle(ctx, r)
	}
	return a.next.Handle(ctx, r)
}

// Flush writes a summary of what the interval counted and starts a new
// interval: a denials line per denial that repeated, one per kind for the
// denials past MaxDistinct, a limit line per cap that refused more than
// once. The loop calls it every interval.
func (a *Aggregator) Flush() {
	ctx := context.Background()
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	write := func(msg string, attrs []slog.Attr) {
		r := slog.NewRecord(now, slog.LevelWarn, msg, 0)
		r.AddAttrs(attrs...)
		a.next.Handle(ctx, r)
	}
	for _, k := range a.order {
		rep := a.denials[k]
		if rep.count == 0 {
			continue
		}
		write(KindDenials, Denials{
			Sandbox: k.sandbox, Kind: k.kind, Proto: k.proto, Name: k.name, QType: k.qtype, Rcode: k.rcode, Dst: k.dst,
			Rule: k.rule, Reason: k.reason, Count: rep.count, First: rep.first, Last: rep.last,
		}.Attrs())
	}
	for _, kind := range []string{KindConnection, KindDNS} {
		for k, rep := range a.others {
			if k.kind != kind {
				continue
			}
			write(KindDenials, Denials{
				Sandbox: k.sandbox, Kind: k.kind, Reason: ReasonTooManyDenials,
				Count: rep.count, First: rep.first, Last: rep.last,
			}.Attrs())
		}
	}
	for _, k := range a.lorder {
		rep := a.limits[k]
		if rep.count == 0 {
			continue
		}
		write(KindLimit, Limit{
			Sandbox: k.sandbox, Limit: k.limit, Max: a.maxes[k], Count: rep.count, First: rep.first, Last: rep.last,
		}.Attrs())
	}
	a.reset()
}

// denialOf returns the key of r if it is a denial.
func denialOf(r slog.Record) (denialKey, bool) {
	k := denialKey{kind: r.Message}
	verdict := ""
	r.Attrs(func(at slog.Attr) bool {
		switch at.Key {
		case VerdictKey:
			verdict = at.Value.String()
		case SandboxKey:
			k.sandbox = at.Value.String()
		case ProtoKey:
			k.proto = at.Value.String()
		case NameKey:
			k.name = at.Value.String()
		case QTypeKey:
			k.qtype = at.Value.String()
		case RcodeKey:
			k.rcode = at.Value.String()
		case DstKey:
			k.dst = at.Value.String()
		case RuleKey:
			k.rule = at.Value.String()
		case ReasonKey:
			k.reason = at.Value.String()
		}
		return true
	})
	return k, verdict == Deny
}

// limitOf returns the key and the cap of a limit line written by the
// proxy (one refusal, without times); a summary passes through.
func limitOf(r slog.Record) (k limitKey, limit int64, ok bool) {
	ok = true
	r.Attrs(func(at slog.Attr) bool {
		switch at.Key {
		case SandboxKey:
			k.sandbox = at.Value.String()
		case LimitKey:
			k.limit = at.Value.String()
		case MaxKey:
			limit = at.Value.Int64()
		case FirstKey:
			ok = false
		}
		return true
	})
	return k, limit, ok && k.limit != ""
}
