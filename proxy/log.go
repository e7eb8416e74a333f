package proxy

import (
	"context"
	"log/slog"
	"net/netip"
	"time"
)

// Record is the decision log entry for one connection, written as one JSON
// line when the connection ends (or is refused).
type Record struct {
	Sandbox  string
	Client   netip.AddrPort
	Dst      netip.AddrPort // original destination
	Proto    string         // tls, http, h2c, unknown
	Name     string         // SNI or Host, "" if none
	Rule     string         // entry that admitted it
	Verdict  Verdict
	Reason   string
	Upstream netip.AddrPort // address dialed, if any
	BytesUp  int64          // client to upstream
	BytesDn  int64          // upstream to client
	Start    time.Time
	Duration time.Duration
}

// LogValue renders the record with stable field names for the JSON line.
func (r Record) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("sandbox", r.Sandbox),
		slog.String("client", r.Client.String()),
		slog.String("dst", r.Dst.String()),
		slog.String("proto", r.Proto),
		slog.String("name", r.Name),
		slog.String("rule", r.Rule),
		slog.String("verdict", string(r.Verdict)),
		slog.String("reason", r.Reason),
	}
	if r.Upstream.IsValid() {
		attrs = append(attrs, slog.String("upstream", r.Upstream.String()))
	}
	attrs = append(attrs,
		slog.Int64("bytes_up", r.BytesUp),
		slog.Int64("bytes_down", r.BytesDn),
		slog.Float64("duration_ms", float64(r.Duration.Microseconds())/1000),
	)
	return slog.GroupValue(attrs...)
}

// log writes r as one line: fields at the top level of the JSON object,
// message "connection", level INFO for allowed, WARN for denied and ERROR
// for allowed connections whose upstream failed.
func (p *Proxy) log(r Record) {
	if r.Verdict == Allow {
		p.allowed.Add(1)
	} else {
		p.denied.Add(1)
	}
	if r.Duration == 0 && !r.Start.IsZero() {
		r.Duration = time.Since(r.Start)
	}
	level := slog.LevelInfo
	switch r.Verdict {
	case Deny:
		level = slog.LevelWarn
	case VerdictError:
		level = slog.LevelError // allowed, but the upstream failed
	}
	v := r.LogValue()
	p.logger.LogAttrs(context.Background(), level, "connection", v.Group()...)
}
