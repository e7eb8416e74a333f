// Package proxy is doorman's per-sandbox transparent proxy.
//
// nftables in the sandbox's network namespace redirects every outbound TCP
// connection to listeners that were created inside that namespace but are
// held by this proxy, which lives in the runtime's namespace. For each
// connection the proxy reads the original destination from conntrack, peeks
// (without consuming) at the first bytes for the TLS SNI or the HTTP Host,
// decides by the sandbox's policy, and then either relays the connection or
// refuses it in the client's own protocol: a fatal access_denied alert for
// TLS, a 403 naming the host and sandbox for HTTP, a reset for anything else.
//
// Three rules keep the proxy from being a way around its own policy:
//
//   - A name rule is honoured by dialing the name, never the client's choice
//     of IP: the proxy resolves the name itself and connects to those
//     addresses at the original port, so an allowed SNI sent to an
//     attacker's IP reaches the real host instead.
//   - Every address the proxy dials goes past package guard first, whatever
//     admitted the connection and in every mode, open included: loopback,
//     link-local, private (RFC 1918, CGNAT, ULA), metadata and other
//     special-purpose addresses, the proxy host's own addresses and its
//     connected subnets (its LAN, the other sandboxes on its bridges) are
//     refused unless an address entry inside that range admits them. The
//     proxy lives in the host's namespace; an allowed name whose DNS points
//     there must not make it a way in. Of a name's addresses only those
//     the guard permits are dialed; if it permits none, the connection is
//     refused and logged as a denial whose reason starts with "private
//     upstream", with the refused address as its upstream.
//   - A policy that cannot be loaded means deny-all, and a tightened policy
//     closes established connections that lost their permission.
//
// Every connection ends as one line of the decision log (Record, written
// as decisionlog.Connection; package decisionlog defines the log's
// schema and every writer uses it), and so does every policy load.
//
// Because the bytes were only peeked, an admitted TLS (or unknown) stream is
// relayed from its first byte by splice(2) between the two sockets. The
// common case never has a goroutine of its own (accept.go, dialloop.go,
// loop.go): the proxy's relay loop (package relayloop) accepts it, peeks at
// its first bytes, decides, dials the upstream when its addresses are known
// without a DNS round trip, and relays the pair until both ends are done,
// so an established connection costs two descriptors and a few hundred
// bytes. The loop also answers its supervisor's heartbeats
// (AnswerHeartbeats, heartbeat.go), so that a loop that no longer gets
// round to what is ready has the worker replaced. The rest (a name to
// resolve, trickled first bytes, refusals,
// plaintext HTTP, inspected hosts) runs on goroutines as *net.TCPConn, and
// a spliced connection that reaches its upstream that way is handed back to
// the loop. Plaintext HTTP is the exception: its requests pass through a parser so
// that the Host of every request on a keep-alive connection is checked,
// and its responses through a framer, because whether the stream is still
// HTTP depends on them. A proxy that takes any status line it sees in the
// response stream for an answer can be told "101 Switching Protocols" by a
// line in a body the workload chose, and stop checking; an h2c upgrade
// the server accepts would make the rest HTTP/2, whose requests name any
// authority. So the responses are framed as RFC 9112 says and paired with
// the requests in order; only a 101 answering a WebSocket handshake, or a
// 2xx answering CONNECT, makes the connection opaque; other upgrade
// requests are forwarded without their Upgrade fields; and a response
// stream that cannot be framed ends the connection rather than be guessed
// at. Long bodies still splice: the framer hands them to io.Copy between
// the two connections.
//
// A sandbox shares its host with others, so its proxy has caps (Config's
// Max* and IdleTimeout; see limits.go): connections held, connections not
// decided yet and the bytes they hold, connections per upstream (the
// host's ephemeral ports), and idle time. What exceeds a cap is refused in
// the client's protocol too, a TLS internal_error alert or a 503, and is a
// limit line rather than a decision. The peek that waits for a ClientHello
// is built so that one trickled in tiny records costs a few dozen looks,
// not one a segment (see peek).
package proxy
