package proxy

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// Record is the decision log entry for one connection, written as one JSON
// line when the connection ends (or is refused).
type Record struct {
	Sandbox  string
	Client   netip.AddrPort
	Dst      netip.AddrPort // original destination
	Proto    string         // tls, http, h2c, unknown
	Name     string         // SNI or Host, "" if none
	ECH      bool           // the ClientHello carried encrypted_client_hello
	Rule     string         // entry that admitted it
	Verdict  Verdict
	Reason   string
	Upstream netip.AddrPort // address dialed, if any
	BytesUp  int64          // client to upstream
	BytesDn  int64          // upstream to client
	Start    time.Time
	Duration time.Duration
}

// LogValue renders the record with the decision log's field names (see
// decisionlog.Connection).
func (r Record) LogValue() slog.Value {
	return slog.GroupValue(r.Line().Attrs()...)
}

// Line returns r as the decision log's connection line.
func (r Record) Line() decisionlog.Connection {
	return decisionlog.Connection{
		Sandbox:   r.Sandbox,
		Client:    r.Client,
		Dst:       r.Dst,
		Proto:     r.Proto,
		Name:      r.Name,
		ECH:       r.ECH,
		Rule:      r.Rule,
		Verdict:   string(r.Verdict),
		Reason:    r.Reason,
		Upstream:  r.Upstream,
		BytesUp:   r.BytesUp,
		BytesDown: r.BytesDn,
		Duration:  r.Duration,
	}
}

// log writes r as one line (see decisionlog.Connection.Log): fields at the
// top level of the JSON object, message "connection", level INFO for
// allowed, WARN for denied and ERROR for allowed connections whose
// upstream failed.
func (p *Proxy) log(r Record) {
	if r.Verdict == Allow {
		p.allowed.Add(1)
	} else {
		p.denied.Add(1)
	}
	if r.Duration == 0 && !r.Start.IsZero() {
		r.Duration = time.Since(r.Start)
	}
	r.Line().Log(context.Background(), p.logger)
}
