package dnsfilter

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"
)

// The verdicts of a query, as logged.
const (
	verdictAllow = "allow" // admitted and forwarded
	verdictDeny  = "deny"  // not admitted, or not a query the filter serves
	verdictError = "error" // admitted, but no answer could be had
)

// record is the log record of one query.
type record struct {
	proto      string
	client     netip.AddrPort
	name       string
	qtype      string
	verdict    string
	rule       string
	reason     string
	rcode      string // "" until a reply is packed: then logged as "none"
	upstream   netip.AddrPort
	echRemoved bool
	// privateRemoved counts the addresses the guard refused that were
	// removed from the answer (records and hint values).
	privateRemoved int
	start          time.Time
}

// deny sets the verdict deny, with the reason formatted.
func (r *record) deny(format string, args ...any) {
	r.verdict, r.reason = verdictDeny, fmt.Sprintf(format, args...)
}

// fail sets the verdict error, with the reason formatted.
func (r *record) fail(format string, args ...any) {
	r.verdict, r.reason = verdictError, fmt.Sprintf(format, args...)
}

// log writes r as one record with message "dns": INFO when allowed, WARN
// when denied, ERROR on an error; and counts it.
func (f *Filter) log(r *record) {
	level := slog.LevelInfo
	switch r.verdict {
	case verdictAllow:
		f.allowed.Add(1)
	case verdictDeny:
		f.denied.Add(1)
		level = slog.LevelWarn
	default:
		f.failed.Add(1)
		level = slog.LevelError
	}
	rcode := r.rcode
	if rcode == "" {
		rcode = "none"
	}
	upstream := ""
	if r.upstream.IsValid() {
		upstream = r.upstream.String()
	}
	f.logger.LogAttrs(context.Background(), level, "dns",
		slog.String("sandbox", f.sandbox),
		slog.String("proto", r.proto),
		slog.String("client", r.client.String()),
		slog.String("name", r.name),
		slog.String("qtype", r.qtype),
		slog.String("verdict", r.verdict),
		slog.String("rule", r.rule),
		slog.String("reason", r.reason),
		slog.String("rcode", rcode),
		slog.String("upstream", upstream),
		slog.Bool("ech_removed", r.echRemoved),
		slog.Int("private_removed", r.privateRemoved),
		slog.Float64("duration_ms", float64(time.Since(r.start).Microseconds())/1000),
	)
}
