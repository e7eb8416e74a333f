package decisionlog

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
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

	// The rule sets' fields, on the lines of requests to a host a rule
	// set covers (each only when it has something to say).
	RuleSetKey  = "ruleset"  // string: the sets in force and their actions, "closed-book@1 strip"
	ToolsKey    = "tools"    // array of strings: the provider-side tools the request asked for, "anthropic.web_search at tools[1] (web_search_20250305)"
	RemovedKey  = "removed"  // array of strings: of those, what strip removed before forwarding
	EvidenceKey = "evidence" // array of strings: evidence of provider-side tool use the response showed
	DeclaredKey = "declared" // array of strings: every tool type the request declared ("bash_20250124", "googleSearch"), in probe mode
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
	// ReasonEvidence starts the reason of a request whose response was
	// cut because it showed a provider-side tool (the tripwire).
	ReasonEvidence = "the response shows a provider-side tool: "
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
	// The rule sets' findings (see the keys above); empty on a host no
	// set covers.
	RuleSet  string
	Tools    []string
	Removed  []string
	Evidence []string
	Declared []string
}

// Attrs returns the line's fields, in the order they are written.
func (r Request) Attrs() []slog.Attr {
	// Room for the rule set fields too: appending them to a full slice
	// would copy it into one twice as large, on every inspected request
	// a rule set covers.
	attrs := make([]slog.Attr, 0, 19)
	attrs = append(attrs,
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
	)
	if r.RuleSet != "" {
		attrs = append(attrs, slog.String(RuleSetKey, r.RuleSet))
	}
	for _, f := range []struct {
		key  string
		list []string
	}{{ToolsKey, r.Tools}, {RemovedKey, r.Removed}, {EvidenceKey, r.Evidence}, {DeclaredKey, r.Declared}} {
		if len(f.list) > 0 {
			attrs = append(attrs, slog.Any(f.key, f.list))
		}
	}
	return attrs
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
	if len(d.Removed) > 0 {
		s += "; removed " + strings.Join(d.Removed, ", ")
	} else if len(d.Tools) > 0 {
		s += "; tools " + strings.Join(d.Tools, ", ")
	}
	if len(d.Evidence) > 0 {
		s += "; evidence " + strings.Join(d.Evidence, ", ")
	}
	return s
}

func pad(s string, n int) string {
	for len(s) < n {
		s += " "
	}
	return s
}
