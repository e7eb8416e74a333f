// Package inspect is the proxy's terminating relay: for a host whose
// policy has request rules (conf.InspectHost), it ends the client's TLS
// with a leaf certificate of the network's CA (package ca), judges every
// request by the host's rules, puts credentials in, and sends the request
// on over a TLS connection of its own to the real host, verified against
// the host's roots with the real name. Every other host never reaches
// this package: the proxy splices it untouched.
//
// # Why net/http on both sides
//
// The client side faces a hostile workload, so it is Go's net/http
// server, whose HTTP/1.1 framing is strict (one Content-Length, no
// Content-Length beside Transfer-Encoding, no obsolete line folding, no
// bare CR or LF in a field) and whose HTTP/2 server rejects header values
// with CR, LF or NUL and connection-specific header fields. A request is
// re-framed on the way out by net/http's client, so no byte of the
// client's framing reaches the upstream: smuggling needs a framing both
// ends read differently, and here the upstream reads only doorman's.
// Each side negotiates its own ALPN: a client that speaks HTTP/2 to
// doorman is relayed over HTTP/2 if the host offers it, over HTTP/1.1
// otherwise; a client that speaks HTTP/1.1 is relayed over HTTP/1.1, on
// pooled connections, one per request in flight (over one shared HTTP/2
// connection, every session's requests would queue behind its one writer
// and reader). The relay is httputil.ReverseProxy's without what a relay
// of one host to itself does not need (relay.go); a WebSocket handshake
// goes through httputil.ReverseProxy itself.
//
// # What a request must be
//
//   - Its authority (:authority, Host, or an absolute-form target; over
//     HTTP/2 a Host field beside :authority too) names the session's
//     host, on the session's port if it names one: a
//     request for another host inside an inspected session (domain
//     fronting) is refused. The upstream reads the host in its canonical
//     spelling, whatever spelling the client sent.
//   - What the rules read is what is forwarded: the fields the client's
//     Connection names (but Upgrade and the other hop-by-hop fields) are
//     dropped before the rules read the request, and request trailers,
//     which no rule reads, are not forwarded.
//   - Not CONNECT, and no upgrade but WebSocket (an h2c upgrade would turn
//     the rest of the connection into HTTP/2 that no rule reads); a
//     WebSocket's frames are relayed as they are once its handshake passed
//     the rules.
//   - A target that conf.ParseTarget accepts (no fragment, no dot
//     segment, backslash, control character or broken UTF-8 once decoded,
//     once or twice), and a query that parses: what a rule reads must be
//     what the host reads. The path is forwarded as ParseTarget
//     normalized it, which is what the rules judged. Deny rules match
//     every spelling of a request an origin may route to the same
//     handler, allow rules only its canonical spelling (see conf,
//     "One request, many spellings"). What only a proxy in front of the
//     origin may say is dropped, however its name is spelled: Forwarded,
//     X-Forwarded-*, and the path overrides X-Original-URL and kin.
//   - Not TRACE or TRACK to a host doorman puts a credential in: the
//     answer would echo it.
//   - If a body rule applies, a body of at most the host's limit (413
//     otherwise), not content-encoded (in any Content-Encoding field),
//     and coming: 30 s without a byte is 408. Its buffer grows with the
//     bytes that arrive, not with the length the client declares, and
//     the bodies held at once share a 64 MiB bound (503 past it); the
//     rule-set judgements in flight share a bound on their bodies'
//     objects and arrays (body.go).
//
// # Rule sets
//
// On a host a rule set covers (conf.Policy.RuleSetsFor), a request the
// host's own rules passed is judged by the set too (rulesets.go): deny
// refuses it with a JSON error naming the tool, strip forwards the body
// the set rewrote (a gzip or deflate body decoded first), probe only
// records. Its response goes through the tripwire (tripwire.go,
// jsonscan.go): event streams are held one event at a time and JSON is
// tokenized as it streams, and evidence of a provider-side tool ends the
// response there. doorman asks such hosts for identity encoding.
//
// Responses stream: a body of unknown length (chunked, server-sent
// events) is flushed to the client as each part arrives; request bodies
// are read whole only when a body rule needs them.
//
// # Decisions
//
// Each request is one decision-log line (decisionlog.Request): method,
// path (its query left out), the rule that decided, the status and the
// body bytes. A refused request gets a 403 naming the host, the rule and
// the sandbox, as JSON when the request was JSON. Secrets are read from
// their files on the host, at most once a second, and are never logged;
// placeholders are compared by their SHA-256.
package inspect
