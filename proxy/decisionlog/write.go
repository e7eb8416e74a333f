package decisionlog

import (
	"context"
	"log/slog"
	"net/netip"
	"time"
)

// WithPod returns l, whose every line then carries the uid of the
// Kubernetes pod the sandbox is (PodUIDKey), or l itself for uid "".
func WithPod(l *slog.Logger, uid string) *slog.Logger {
	if uid == "" {
		return l
	}
	return l.With(slog.String(PodUIDKey, uid))
}

// Connection is a connection line: what the proxy did with one TCP
// connection, or an allowDirect flow that bypassed it.
type Connection struct {
	Sandbox   string
	Client    netip.AddrPort
	Dst       netip.AddrPort // the original destination
	Proto     string
	Name      string
	ECH       bool // the ClientHello carried encrypted_client_hello: ECHKey is written (only then)
	Rule      string
	Verdict   string
	Reason    string
	Upstream  netip.AddrPort // left out of the line if not valid
	BytesUp   int64
	BytesDown int64
	Duration  time.Duration
}

// Attrs returns the line's fields, in the order they are written.
func (c Connection) Attrs() []slog.Attr { return c.appendAttrs(make([]slog.Attr, 0, 13)) }

// appendAttrs appends the line's fields to attrs.
func (c Connection) appendAttrs(attrs []slog.Attr) []slog.Attr {
	attrs = append(attrs,
		slog.String(SandboxKey, c.Sandbox),
		slog.String(ClientKey, c.Client.String()),
		slog.String(DstKey, c.Dst.String()),
		slog.String(ProtoKey, c.Proto),
		slog.String(NameKey, c.Name),
	)
	if c.ECH {
		attrs = append(attrs, slog.Bool(ECHKey, true))
	}
	attrs = append(attrs,
		slog.String(RuleKey, c.Rule),
		slog.String(VerdictKey, c.Verdict),
		slog.String(ReasonKey, c.Reason),
	)
	if c.Upstream.IsValid() {
		attrs = append(attrs, slog.String(UpstreamKey, c.Upstream.String()))
	}
	return append(attrs,
		slog.Int64(BytesUpKey, c.BytesUp),
		slog.Int64(BytesDownKey, c.BytesDown),
		durationAttr(c.Duration),
	)
}

// Log writes the line to l: INFO when allowed, WARN when denied, ERROR
// when allowed but the upstream failed (and INFO without a verdict, a
// line the reader skips).
func (c Connection) Log(ctx context.Context, l *slog.Logger) {
	var attrs [13]slog.Attr
	logAttrs(ctx, l, verdictLevel(c.Verdict, slog.LevelInfo), KindConnection, c.appendAttrs(attrs[:0])...)
}

// HostDrop is a connection line for one packet the sandbox's host-side
// layer dropped (package proxy/droplog): verdict deny, no name, no rule,
// no bytes relayed. Src and Dst are the packet's source and destination,
// addr:port for TCP and UDP, the address alone for other protocols, ""
// for none (a frame that is not IP nor ARP); Proto is its protocol
// ("udp", "tcp", "icmp", "icmpv6", "arp", ...); ICMPType and ICMPCode
// are written for ICMP only (-1: not ICMP).
type HostDrop struct {
	Sandbox  string
	Src, Dst string
	Proto    string
	ICMPType int
	ICMPCode int
	Reason   string
}

// Attrs returns the line's fields, in the order they are written.
func (h HostDrop) Attrs() []slog.Attr {
	attrs := []slog.Attr{
		slog.String(SandboxKey, h.Sandbox),
		slog.String(ClientKey, h.Src),
		slog.String(DstKey, h.Dst),
		slog.String(ProtoKey, h.Proto),
		slog.String(NameKey, ""),
		slog.String(RuleKey, ""),
		slog.String(VerdictKey, Deny),
		slog.String(ReasonKey, h.Reason),
	}
	if h.ICMPType >= 0 {
		attrs = append(attrs, slog.Int(ICMPTypeKey, h.ICMPType), slog.Int(ICMPCodeKey, h.ICMPCode))
	}
	return append(attrs, slog.Int64(BytesUpKey, 0), slog.Int64(BytesDownKey, 0), durationAttr(0))
}

// Log writes the line to l, at WARN.
func (h HostDrop) Log(ctx context.Context, l *slog.Logger) {
	logAttrs(ctx, l, slog.LevelWarn, KindConnection, h.Attrs()...)
}

// DNSQuery is a dns line: what the DNS filter did with one query.
type DNSQuery struct {
	Sandbox  string
	Proto    string // udp or tcp
	Client   netip.AddrPort
	Name     string
	QType    string
	Verdict  string
	Rule     string
	Reason   string
	Rcode    string         // "" if no reply was sent: written RcodeNone
	Upstream netip.AddrPort // written "" if not valid
	// ECHRemoved says ECH configurations were stripped from the answer.
	ECHRemoved bool
	// PrivateRemoved counts the private addresses removed from the
	// answer (records and hint values).
	PrivateRemoved int
	Duration       time.Duration
}

// Attrs returns the line's fields, in the order they are written.
func (q DNSQuery) Attrs() []slog.Attr {
	rcode := q.Rcode
	if rcode == "" {
		rcode = RcodeNone
	}
	upstream := ""
	if q.Upstream.IsValid() {
		upstream = q.Upstream.String()
	}
	return []slog.Attr{
		slog.String(SandboxKey, q.Sandbox),
		slog.String(ProtoKey, q.Proto),
		slog.String(ClientKey, q.Client.String()),
		slog.String(NameKey, q.Name),
		slog.String(QTypeKey, q.QType),
		slog.String(VerdictKey, q.Verdict),
		slog.String(RuleKey, q.Rule),
		slog.String(ReasonKey, q.Reason),
		slog.String(RcodeKey, rcode),
		slog.String(UpstreamKey, upstream),
		slog.Bool(ECHRemovedKey, q.ECHRemoved),
		slog.Int(PrivateRemovedKey, q.PrivateRemoved),
		durationAttr(q.Duration),
	}
}

// Log writes the line to l: INFO when allowed, WARN when denied, ERROR
// on an error (and without a verdict).
func (q DNSQuery) Log(ctx context.Context, l *slog.Logger) {
	logAttrs(ctx, l, verdictLevel(q.Verdict, slog.LevelError), KindDNS, q.Attrs()...)
}

// verdictLevel is the level of a decision with verdict v, or otherwise
// if v is none of the three.
func verdictLevel(v string, otherwise slog.Level) slog.Level {
	switch v {
	case Allow:
		return slog.LevelInfo
	case Deny:
		return slog.LevelWarn
	case Error:
		return slog.LevelError
	}
	return otherwise
}

// durationAttr writes d in milliseconds, to the microsecond.
func durationAttr(d time.Duration) slog.Attr {
	return slog.Float64(DurationKey, float64(d.Microseconds())/1000)
}

// PolicyLoad is the line a proxy writes when it read its policy file:
// loaded and in force, or rejected, and the proxy denies everything (see
// WaitPolicy, which reads it back as a PolicyEvent).
type PolicyLoad struct {
	Sandbox string
	Path    string
	Mode    string // loaded
	Entries int    // loaded
	Err     error  // not nil: rejected
}

// Log writes the line to l: MsgPolicyLoaded at INFO, or MsgPolicyRejected
// at ERROR.
func (p PolicyLoad) Log(ctx context.Context, l *slog.Logger) {
	if p.Err != nil {
		logAttrs(ctx, l, slog.LevelError, MsgPolicyRejected,
			slog.String(SandboxKey, p.Sandbox),
			slog.String(PathKey, p.Path),
			slog.String(ErrKey, p.Err.Error()),
		)
		return
	}
	logAttrs(ctx, l, slog.LevelInfo, MsgPolicyLoaded,
		slog.String(SandboxKey, p.Sandbox),
		slog.String(PathKey, p.Path),
		slog.String(ModeKey, p.Mode),
		slog.Int(EntriesKey, p.Entries),
	)
}

// Resolver is the line a proxy writes at its start: the DNS servers it
// resolves the names admitted by name rules with. Without servers it is
// a warning that names the resolv.conf used instead, and why.
type Resolver struct {
	Sandbox    string
	Servers    []netip.AddrPort
	ResolvConf string // without servers
	Why        string // without servers
}

// Log writes the line to l: INFO with servers, WARN without.
func (r Resolver) Log(ctx context.Context, l *slog.Logger) {
	if len(r.Servers) > 0 {
		logAttrs(ctx, l, slog.LevelInfo, MsgResolver,
			slog.String(SandboxKey, r.Sandbox),
			slog.Any(ServersKey, r.Servers),
		)
		return
	}
	logAttrs(ctx, l, slog.LevelWarn, MsgResolver,
		slog.String(SandboxKey, r.Sandbox),
		slog.Any(ServersKey, []netip.AddrPort{}), // [], not null
		slog.String(ResolvConfKey, r.ResolvConf),
		slog.String(WhyKey, r.Why),
	)
}

// Limit is a limit line: a cap of the sandbox (Limit, one of the Limit*
// names, whose value is Max) refused Count connections or queries, from
// First to Last. The proxy writes one per refusal (Count 1, no times);
// the Aggregator lets the first of each interval through and sums the
// rest of the interval into one line at its end, so that a flood costs
// the log two lines an interval, not one a refusal.
type Limit struct {
	Sandbox     string
	Limit       string
	Max         int64
	Count       int64     // 0 is written as 1
	First, Last time.Time // left out if zero
}

// Attrs returns the line's fields, in the order they are written.
func (l Limit) Attrs() []slog.Attr {
	attrs := []slog.Attr{
		slog.String(SandboxKey, l.Sandbox),
		slog.String(LimitKey, l.Limit),
		slog.Int64(MaxKey, l.Max),
		slog.Int64(CountKey, max(l.Count, 1)),
	}
	if !l.First.IsZero() {
		attrs = append(attrs, slog.Time(FirstKey, l.First), slog.Time(LastKey, l.Last))
	}
	return attrs
}

// Log writes the line to l, at WARN.
func (l Limit) Log(ctx context.Context, logger *slog.Logger) {
	logAttrs(ctx, logger, slog.LevelWarn, KindLimit, l.Attrs()...)
}

// Denials is a denials line: Count denials of one kind (KindConnection
// or KindDNS) that were not logged one by one, from First to Last. For
// the repeats of one denial its fields are those the denial's lines have
// in common (the client's port differs from one to the next); for the
// denials beyond the distinct ones an interval logs, Reason is
// ReasonTooManyDenials and the rest is empty.
type Denials struct {
	Sandbox     string
	Kind        string
	Proto       string
	Name        string
	QType       string // DNS
	Rcode       string // DNS
	Dst         string // connections: the original destination, as logged
	Rule        string
	Reason      string
	Count       int64
	First, Last time.Time
}

// Attrs returns the line's fields, in the order they are written.
func (d Denials) Attrs() []slog.Attr {
	attrs := []slog.Attr{
		slog.String(SandboxKey, d.Sandbox),
		slog.String(KindKey, d.Kind),
		slog.String(ProtoKey, d.Proto),
		slog.String(NameKey, d.Name),
	}
	if d.Kind == KindDNS {
		attrs = append(attrs, slog.String(QTypeKey, d.QType), slog.String(RcodeKey, d.Rcode))
	} else {
		attrs = append(attrs, slog.String(DstKey, d.Dst))
	}
	return append(attrs,
		slog.String(RuleKey, d.Rule),
		slog.String(VerdictKey, Deny),
		slog.String(ReasonKey, d.Reason),
		slog.Int64(CountKey, d.Count),
		slog.Time(FirstKey, d.First),
		slog.Time(LastKey, d.Last),
	)
}

// Log writes the line to l, at WARN.
func (d Denials) Log(ctx context.Context, l *slog.Logger) {
	logAttrs(ctx, l, slog.LevelWarn, KindDenials, d.Attrs()...)
}

// Limits is the line a proxy writes at its start: the caps in force.
// Connections is the effective connection cap, which the descriptor
// limit (NoFile, less Reserve) or the memory limit may have lowered below
// the one configured; LimitedBy then says which, and why.
type Limits struct {
	Sandbox             string
	Connections         int
	Pending             int
	PendingBytes        int64
	PerUpstream         int // 0: no cap
	PortRange           int // the ephemeral ports PerUpstream is a share of; 0 if unknown
	SniffTimeout        time.Duration
	IdleTimeout         time.Duration // 0: none
	DNSQueriesPerSecond int           // 0: no DNS filter, or no cap
	LogMaxSize          int64         // 0: the log does not rotate
	NoFile              uint64
	Reserve             int
	LimitedBy           string
}

// Log writes the line to l: INFO, or WARN when the connection cap is
// lower than configured.
func (s Limits) Log(ctx context.Context, l *slog.Logger) {
	level := slog.LevelInfo
	if s.LimitedBy != "" {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String(SandboxKey, s.Sandbox),
		slog.Int(ConnectionsKey, s.Connections),
		slog.Int(PendingKey, s.Pending),
		slog.Int64(PendingBytesKey, s.PendingBytes),
		slog.Int(PerUpstreamKey, s.PerUpstream),
		slog.Int(PortRangeKey, s.PortRange),
		slog.String(SniffTimeoutKey, s.SniffTimeout.String()),
		slog.String(IdleTimeoutKey, s.IdleTimeout.String()),
		slog.Int(DNSRateKey, s.DNSQueriesPerSecond),
		slog.Int64(LogMaxSizeKey, s.LogMaxSize),
		slog.Uint64(NoFileKey, s.NoFile),
		slog.Int(ReserveKey, s.Reserve),
	}
	if s.LimitedBy != "" {
		attrs = append(attrs, slog.String(LimitedByKey, s.LimitedBy))
	}
	logAttrs(ctx, l, level, MsgLimits, attrs...)
}
