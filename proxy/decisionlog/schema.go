package decisionlog

// The schema of the log a sandbox's proxy writes: the message of each kind
// of line, the keys of its fields and their types, and the values the
// reader relies on. Every writer in the proxy uses these, most through the
// typed lines of write.go, so that a field is added in one place and a
// misspelt key cannot split the log; Decision and PolicyEvent, which read
// the lines, carry the same keys in their JSON tags (see schema_test.go).

// The verdicts of a decision line (proxy.Verdict's are these).
const (
	Allow = "allow"
	Deny  = "deny"
	Error = "error" // allowed, but the upstream failed (DNS: no resolver answered)
)

// The kinds of decision lines, which are also their messages (msg).
const (
	// KindConnection is the TCP proxy's decision on one connection (see
	// proxy.Record).
	KindConnection = "connection"
	// KindDNS is the DNS filter's decision on one query (see package
	// dnsfilter, "Log records").
	KindDNS = "dns"
	// KindDenials is a summary of denials not logged one by one: the
	// repeats of one denial within an interval, or the denials beyond the
	// distinct ones an interval logs (see Aggregator and Denials). Its
	// KindKey says which kind of decision they were.
	KindDenials = "denials"
	// KindLimit says that a cap of the sandbox refused connections or
	// queries: the first refusal of an interval at once, the rest of the
	// interval's in one line at its end (see Limit and Aggregator).
	KindLimit = "limit"
)

// The messages (msg) of the lines that are not decisions; the decisions'
// are KindConnection and KindDNS.
const (
	// MsgPolicyLoaded: the proxy put its policy file in force
	// (PolicyLoad).
	MsgPolicyLoaded = "policy loaded"
	// MsgPolicyRejected: the policy file did not load and the proxy
	// denies everything (PolicyLoad).
	MsgPolicyRejected = "policy rejected, denying everything"
	// MsgPolicyUnwatched: the policy file's directory cannot be watched,
	// so the file is polled (path, err).
	MsgPolicyUnwatched = "cannot watch policy directory, polling only"
	// MsgPolicyWatch: the watch lost an event or broke, and the file is
	// polled from then on (path, err).
	MsgPolicyWatch = "policy watch"
	// MsgResolver: at start, the DNS servers the proxy resolves allowed
	// names with (Resolver).
	MsgResolver = "resolver"
	// MsgOTLP: what the OTLP export sent and dropped so far (sandbox,
	// endpoint, exported, dropped, queue_full, export_failed, unsent,
	// last_error).
	MsgOTLP = "otlp"
	// MsgDirectLost: conntrack events were lost, so allowDirect flows
	// went unlogged (sandbox, overruns, err).
	MsgDirectLost = "allowDirect events lost"
	// MsgDirectNotLogged and MsgDirectNoLongerLogged: the allowDirect
	// flows' watcher could not start, or stopped (sandbox, err).
	MsgDirectNotLogged      = "allowDirect flows are not logged"
	MsgDirectNoLongerLogged = "allowDirect flows are no longer logged"
	// MsgHostDropsNotLogged: the host-side layer's drop counters could
	// not be read (the error says why), so some of its drops are not
	// logged.
	MsgHostDropsNotLogged = "host-layer drops are not logged"
	// MsgRewritesUnchecked: at start, the proxy cannot read the
	// conntrack table of its namespace, so it cannot tell where a nat
	// OUTPUT rule of the host sends its upstream connections (sandbox,
	// err).
	MsgRewritesUnchecked = "upstream rewrites are not checked"
	// MsgAccept, MsgDNSRead and MsgDNSAccept: the proxy's or the DNS
	// filter's listener failed and is retried (sandbox, proto for DNS,
	// err).
	MsgAccept    = "accept"
	MsgDNSRead   = "dns read"
	MsgDNSAccept = "dns accept"
	// MsgLimits: at start, the caps in force, as computed from the
	// configuration and the process's own limits (Limits).
	MsgLimits = "limits"
	// MsgLogDropped: the log file could not be written (a full disk) and
	// lines were dropped; written once writing works again (sandbox,
	// dropped, first, last, err). See LogFile.
	MsgLogDropped = "log lines dropped"
)

// The keys of the fields, after slog's own time, level and msg. Every
// line that concerns a sandbox has SandboxKey.
const (
	SandboxKey = "sandbox" // string: the sandbox's id
	PodUIDKey  = "pod_uid" // string: the uid of the Kubernetes pod the sandbox is (on every line of its proxy, see WithPod); absent for other sandboxes
	ErrKey     = "err"     // string: what failed

	// Decisions: connection and dns lines.
	ClientKey  = "client"  // addr:port string: the workload's end
	DstKey     = "dst"     // addr:port string: the original destination (connections)
	ProtoKey   = "proto"   // string: tls, http, h2c, unknown, or tcp and udp for allowDirect flows; udp or tcp for DNS
	NameKey    = "name"    // string: SNI or Host, or the name queried; "" if none
	ECHKey     = "ech"     // bool, on connection lines only when true: the ClientHello carried encrypted_client_hello
	RuleKey    = "rule"    // string: the entry that admitted it, "" if none
	VerdictKey = "verdict" // string: Allow, Deny or Error
	ReasonKey  = "reason"  // string: why
	// ICMPTypeKey and ICMPCodeKey (integers): the ICMP or ICMPv6 type
	// and code of a packet the host-side layer dropped (HostDrop);
	// absent for other protocols.
	ICMPTypeKey = "icmp_type"
	ICMPCodeKey = "icmp_code"
	// UpstreamKey (addr:port string): the address dialed (connections;
	// absent if none), or the resolver that answered or was tried last
	// (DNS; "" if none).
	UpstreamKey       = "upstream"
	BytesUpKey        = "bytes_up"        // integer: bytes client to upstream (connections)
	BytesDownKey      = "bytes_down"      // integer: bytes upstream to client (connections)
	DurationKey       = "duration_ms"     // number: milliseconds, to the microsecond
	QTypeKey          = "qtype"           // string: A, AAAA, HTTPS, ... (DNS)
	RcodeKey          = "rcode"           // string: NOERROR, REFUSED, ..., or RcodeNone (DNS)
	ECHRemovedKey     = "ech_removed"     // bool: ECH configurations were stripped from the answer (DNS)
	PrivateRemovedKey = "private_removed" // integer: private addresses removed from the answer (DNS)

	// Policy lines.
	PathKey    = "path"    // string: the policy file
	ModeKey    = "mode"    // string: none, allowlist or open
	EntriesKey = "entries" // integer: how many entries the policy has

	// The resolver line.
	ServersKey    = "servers"    // array of addr:port strings
	ResolvConfKey = "resolvConf" // string: the resolv.conf names are resolved with instead
	WhyKey        = "why"        // string

	// The otlp line.
	EndpointKey     = "endpoint"      // string: the collector's URL
	ExportedKey     = "exported"      // integer: records the collector took
	DroppedKey      = "dropped"       // integer: records that will never reach it
	QueueFullKey    = "queue_full"    // integer: of those, refused for a full queue
	ExportFailedKey = "export_failed" // integer: of those, in an export that failed
	UnsentKey       = "unsent"        // integer: still queued at shutdown (only then)
	LastErrorKey    = "last_error"    // string: the latest export error (once there was one)

	// The allowDirect lines.
	OverrunsKey = "overruns" // integer: conntrack event queue overruns so far

	// Summaries: denials and limit lines, and the log's own.
	KindKey  = "kind"  // string: KindConnection or KindDNS, the kind of the denials summarized
	CountKey = "count" // integer: how many denials or refusals the line stands for
	FirstKey = "first" // time (RFC 3339): the first of them
	LastKey  = "last"  // time (RFC 3339): the last of them
	LimitKey = "limit" // string: the cap that refused (a Limit* name)
	MaxKey   = "max"   // integer: the cap's value
	// DroppedLinesKey (integer): log lines that could not be written.
	DroppedLinesKey = "dropped"

	// The limits line: the caps in force (see Limits).
	ConnectionsKey  = "connections"         // integer
	PendingKey      = "pending"             // integer
	PendingBytesKey = "pendingBytes"        // integer
	PerUpstreamKey  = "perUpstream"         // integer
	SniffTimeoutKey = "sniffTimeout"        // duration string
	IdleTimeoutKey  = "idleTimeout"         // duration string, "0s": none
	DNSRateKey      = "dnsQueriesPerSecond" // integer
	LogMaxSizeKey   = "logMaxSize"          // integer: bytes
	NoFileKey       = "nofile"              // integer: the descriptor limit the proxy raised itself to
	ReserveKey      = "reserve"             // integer: descriptors kept for the proxy's own use
	PortRangeKey    = "portRange"           // integer: ephemeral ports for connections to one upstream
	LimitedByKey    = "limitedBy"           // string: what lowered the connection cap below the one configured, if anything
)

// The caps a limit line names (LimitKey), by the configuration key that
// sets each (see spec.Limits).
const (
	// LimitConnections: connections the proxy holds at once, decided or
	// not; past it, a new connection is refused.
	LimitConnections = "connections"
	// LimitPending: connections accepted and not decided yet.
	LimitPending = "pending"
	// LimitPendingBytes: the bytes those connections sent before their
	// decision, together.
	LimitPendingBytes = "pendingBytes"
	// LimitPerUpstream: connections to one upstream address and port,
	// open or closed by the proxy within the last minute (their source
	// ports are still taken).
	LimitPerUpstream = "perUpstream"
	// LimitDNSRate: DNS queries per second.
	LimitDNSRate = "dnsQueriesPerSecond"
)

// RcodeNone is the rcode of a DNS query that got no reply.
const RcodeNone = "none"

// The reasons, and starts of reasons, that readers tell apart (package
// learn learns from some denials and not from others).
const (
	// ReasonNameNotAllowed: no entry admits the name. It ends the reasons
	// that say which name ("request for evil.example: name not
	// allowed"), and starts the DNS filter's for a search-list expansion.
	ReasonNameNotAllowed = "name not allowed"
	// ReasonNoRule: a connection without a name, whose destination no
	// address entry admits.
	ReasonNoRule = "no name and no address rule matches"
	// ReasonModeNone: the policy is in mode none.
	ReasonModeNone = "mode none"
	// ReasonPolicyChanged starts the reason of a connection that a new
	// policy closed; the new decision's reason follows.
	ReasonPolicyChanged = "policy changed: "
	// ReasonShutdown: the connection was open when the proxy stopped.
	ReasonShutdown = "proxy shutting down"
	// ReasonPrivateUpstream starts each clause of the reason of a
	// connection refused because its upstream is private (see package
	// guard): "private upstream 10.0.0.5: RFC 1918 (10.0.0.0/8)".
	ReasonPrivateUpstream = "private upstream "
	// ReasonPrivateAnswer is the same for a DNS answer whose every
	// address was private.
	ReasonPrivateAnswer = "private answer "
	// ReasonAllowDirect is the reason of an allowDirect flow's line.
	ReasonAllowDirect = "allowDirect"
	// ReasonIdle starts the reason of a relayed connection closed because
	// no byte went either way for the idle timeout ("idle for 1h0m0s").
	// Its verdict stays allow.
	ReasonIdle = "idle for "
	// ReasonTooManyDenials is the reason of a denials line that counts
	// the denials of an interval beyond the distinct ones it logs.
	ReasonTooManyDenials = "more distinct denials than one interval logs"
)
