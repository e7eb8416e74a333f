package decisionlog

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"time"
)

// KindRequest is the proxy's decision on one request inside an inspected
// host's TLS session (see package inspect): one line per request, beside
// the connection line of the session that carried it.
const KindRequest = "request"

// The fields a request line has besides a connection line's.
const (
	MethodKey = "method" // string: the request's method
	// RequestPathKey is the request's path, percent-decoded, without its
	// query (which may hold what the workload should not have logged).
	RequestPathKey = "path"
	StatusKey      = "status" // integer: the status the client got; 0 if none was sent
)

// The reasons, and starts of reasons, of request lines.
const (
	// ReasonInspected is the reason of an inspected session's
	// connection line.
	ReasonInspected = "inspected"
	// ReasonClientTLS starts the reason of an inspected session whose
	// client refused doorman's certificate (a client that pins
	// certificates, or does not trust the network's CA).
	ReasonClientTLS = "client refused the inspected host's certificate: "
	// ReasonBodyTooLarge: a body rule needed the body and it was over
	// the host's limit (413).
	ReasonBodyTooLarge = "body over the limit a body rule reads"
	// ReasonWrongAuthority starts the reason of a request that names
	// another host than the TLS session's.
	ReasonWrongAuthority = "request for another host inside the session: "
)

// Request is a request line.
type Request struct {
	Sandbox   string
	Client    netip.AddrPort
	Dst       netip.AddrPort
	Proto     string // "h1" or "h2": what the client spoke
	Name      string // the inspected host (the session's SNI)
	Method    string
	Path      string
	Rule      string // the rule that decided, "default allow" if none matched
	Verdict   string
	Reason    string
	Status    int
	BytesUp   int64 // request body bytes
	BytesDown int64 // response body bytes
	Duration  time.Duration
}

// Attrs returns the line's fields, in the order they are written.
func (r Request) Attrs() []slog.Attr {
	return []slog.Attr{
		slog.String(SandboxKey, r.Sandbox),
		slog.String(ClientKey, r.Client.String()),
		slog.String(DstKey, r.Dst.String()),
		slog.String(ProtoKey, r.Proto),
		slog.String(NameKey, r.Name),
		slog.String(MethodKey, r.Method),
		slog.String(RequestPathKey, r.Path),
		slog.String(RuleKey, r.Rule),
		slog.String(VerdictKey, r.Verdict),
		slog.String(ReasonKey, r.Reason),
		slog.Int(StatusKey, r.Status),
		slog.Int64(BytesUpKey, r.BytesUp),
		slog.Int64(BytesDownKey, r.BytesDown),
		durationAttr(r.Duration),
	}
}

// Log writes the line: INFO allowed, WARN denied, ERROR when the upstream
// failed.
func (r Request) Log(ctx context.Context, l *slog.Logger) {
	logAttrs(ctx, l, verdictLevel(r.Verdict, slog.LevelInfo), KindRequest, r.Attrs()...)
}

// formatRequest renders a request's decision for people:
//
//	2025-06-01 12:00:00.123 deny  h2      api.example.com POST /v1/messages 403, rule deny POST /v1/messages json:tools[].type=web_search*
func formatRequest(d Decision) string {
	why := "rule " + d.Rule
	if d.Reason != "" {
		why += ": " + d.Reason
	}
	s := d.Time.Format(timeLayout) + " " + pad(d.Verdict, 5) + " " + pad(d.Proto, 7) + " " + orNoName(d.Name) + " " +
		d.Method + " " + d.Path + " " + strconv.Itoa(d.Status) + ", " + why
	if d.Verdict == Allow {
		s += " (up " + size(d.BytesUp) + ", down " + size(d.BytesDown) + ", " + duration(d.DurationMS) + ")"
	}
	return s
}

func pad(s string, n int) string {
	for len(s) < n {
		s += " "
	}
	return s
}
