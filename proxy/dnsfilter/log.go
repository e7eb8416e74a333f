package dnsfilter

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/doorman-net/doorman/proxy/decisionlog"
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
	// admittedName is the question's name when a name entry admitted it
	// (not mode open, not a reverse name): the guard's scopes apply to
	// its answer (see stripPrivate).
	admittedName string
	start        time.Time
}

// deny sets the verdict deny, with the reason formatted.
func (r *record) deny(format string, args ...any) {
	r.verdict, r.reason = decisionlog.Deny, fmt.Sprintf(format, args...)
}

// fail sets the verdict error, with the reason formatted.
func (r *record) fail(format string, args ...any) {
	r.verdict, r.reason = decisionlog.Error, fmt.Sprintf(format, args...)
}

// log writes r as one line (see decisionlog.DNSQuery.Log): message
// "dns", INFO when allowed, WARN when denied, ERROR on an error; and
// counts it.
func (f *Filter) log(r *record) {
	switch r.verdict {
	case decisionlog.Allow:
		f.allowed.Add(1)
	case decisionlog.Deny:
		f.denied.Add(1)
	default:
		f.failed.Add(1)
	}
	decisionlog.DNSQuery{
		Sandbox:        f.sandbox,
		Proto:          r.proto,
		Client:         r.client,
		Name:           r.name,
		QType:          r.qtype,
		Verdict:        r.verdict,
		Rule:           r.rule,
		Reason:         r.reason,
		Rcode:          r.rcode,
		Upstream:       r.upstream,
		ECHRemoved:     r.echRemoved,
		PrivateRemoved: r.privateRemoved,
		Duration:       time.Since(r.start),
	}.Log(context.Background(), f.logger)
}
