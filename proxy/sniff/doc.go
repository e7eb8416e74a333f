// Package sniff learns which host a client is asking for from the first
// bytes of a TCP stream, without consuming them, so that doorman's
// transparent proxy can decide on a connection before it relays a byte;
// and, for plaintext HTTP/1.x, frames every request and response that
// follows, so that the proxy checks each request and knows when the
// connection stops being HTTP.
//
// The proxy peeks at a new connection (recvfrom with MSG_PEEK) and hands
// whatever the kernel holds to [Detect], then to [ServerName] for TLS or to
// [ParseRequestHead] for plaintext HTTP/1.x. Because the bytes stay in the
// socket, the relay that follows can splice(2) the whole stream, ClientHello
// included, unchanged. Every function here is pure: no sockets, no globals
// that change, and [ErrIncomplete] whenever the answer could still depend on
// bytes that have not arrived, so the caller simply peeks again.
//
// The parsers are strict on purpose. The workload is assumed hostile and to
// have read this code, and every place where the proxy and the real server
// could read the same bytes differently is a way past the allowlist:
//
//   - A ClientHello may span several TLS records and several TCP segments.
//     HAProxy's req.ssl_sni misreads hellos larger than one segment, and gost
//     does not reassemble records at all. Post-quantum key shares
//     (X25519MLKEM768, the default in Go, OpenSSL 3.5 and Chrome) make
//     ordinary hellos 1.5–2 KB, more than one MSS, so this is the common
//     case, not an attack. [ServerName] reassembles any record split, down
//     to one byte of handshake per record, and refuses anything a TLS server
//     would refuse or read differently: interleaved non-handshake records,
//     lengths that do not add up, duplicate extensions, several names.
//   - On a plaintext keep-alive connection every request can name a
//     different Host; gost checked only the first. [RequestReader] frames
//     each request (Content-Length or chunked, trailers included) so the
//     proxy can check every Host, and refuses the ambiguities that request
//     smuggling is built on: bare LF or CR, obs-fold, both Content-Length and
//     Transfer-Encoding, conflicting lengths, an absolute-form target that
//     names another host than Host.
//   - Whether a keep-alive connection is still HTTP/1.x depends on the
//     server's answers: after a 101 or a 2xx to CONNECT it is not. A proxy
//     that looks for status lines anywhere in the response stream can be
//     told "101" by a line in a body. [ResponseReader] frames responses as
//     a client must (RFC 9112 6.3: HEAD, 1xx, 204 and 304 without a body,
//     Transfer-Encoding over Content-Length, bodies that run until the
//     close), so that a status line is only ever read where a response
//     starts, and refuses what could be framed two ways.
//   - h2c with prior knowledge carries no Host the proxy can see up front;
//     [Detect] reports it as [ProtoH2C] so that the caller cannot mistake it
//     for HTTP/1.x.
package sniff
