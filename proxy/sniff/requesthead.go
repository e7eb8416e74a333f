package sniff

import (
	"bytes"
	"fmt"
)

// MaxHeadSize is the largest HTTP/1.x head accepted, request or response,
// start line and final CRLFCRLF included: 16 KiB, the size of HAProxy's
// default buffer, which must hold a whole head there too.
const MaxHeadSize = 16 << 10

// RequestHead is one parsed HTTP/1.x request head.
type RequestHead struct {
	Method string // the method token, as sent (case matters in HTTP)
	Target string // the request-target, as sent
	Proto  string // "HTTP/1.0" or "HTTP/1.1"
	// Host is the Host header's host, lowercased, without port, brackets
	// or trailing dot; an IPv6 address in canonical form. "" if absent.
	Host string
	// HostPort is the port of the Host header as sent, "" if none.
	HostPort string
	// TargetHost is the host of an absolute-form (http://h:p/path) or, for
	// CONNECT, authority-form (h:p) target, normalized like Host; "" for
	// origin-form and asterisk-form targets. When both are set they name
	// the same host: ParseRequestHead refuses a request where they differ.
	TargetHost string
	// TargetPort is the port of an absolute-form or authority-form target,
	// "" if it has none.
	TargetPort string
	// Len is the length of the head in bytes, through the final CRLFCRLF.
	Len int
	// ContentLength is the Content-Length header's value, -1 if none.
	ContentLength int64
	// Chunked is true if the body is chunked: Transfer-Encoding was given
	// and chunked is its last coding (any other Transfer-Encoding is an
	// error).
	Chunked bool
	// Upgrade is true for CONNECT and for a request with both an Upgrade
	// header and the "upgrade" option in Connection: after it, the stream
	// may stop being HTTP/1.x.
	Upgrade bool
	// UpgradeTo is the Upgrade header's value as sent (several fields
	// joined by ", "), "" if none.
	UpgradeTo string
	// WebSocket is true for an opening handshake of the WebSocket protocol
	// (RFC 6455 4.1): an HTTP/1.1 GET whose Connection has the "upgrade"
	// option and whose Upgrade names one protocol, websocket (any case).
	WebSocket bool
	// Close is true if the client will send no further request: Connection
	// has "close", or the request is HTTP/1.0 without "keep-alive".
	Close bool
}

// Name is the host the request is for: TargetHost if the target names one
// (a server must then ignore Host, RFC 9112 3.2.2), else Host.
func (h *RequestHead) Name() string {
	if h.TargetHost != "" {
		return h.TargetHost
	}
	return h.Host
}

// HasBody reports whether a body follows the head.
func (h *RequestHead) HasBody() bool {
	return h.Chunked || h.ContentLength > 0
}

// ParseRequestHead parses an HTTP/1.x request head (RFC 9112) at the start
// of data. It returns [ErrIncomplete] until data holds the final CRLFCRLF,
// or an error if the head is longer than [MaxHeadSize]. Complete lines are
// checked as they arrive, so a bad request line or header is reported
// without waiting for the rest of the head.
//
// A request line that does not start with a method token and a space, or
// whose version is not HTTP/something, is [ErrNotHTTP]; other errors wrap
// [ErrMalformedRequest]. ParseRequestHead is strict where proxies and
// servers are known to disagree, since any disagreement lets a client
// smuggle a request for another host past the proxy. It refuses:
//   - lines ending in a bare LF, a CR anywhere else, obs-fold
//     continuation lines, whitespace before a header's colon, control
//     characters in values;
//   - versions other than HTTP/1.0 and HTTP/1.1;
//   - an HTTP/1.1 request without Host; a second Host header; a Host that
//     is not host[:port]; a header whose name is Host, Content-Length or
//     Transfer-Encoding with '_' for '-' (some servers fold them together);
//   - both Content-Length and Transfer-Encoding; Content-Length values that
//     differ or a list in one field (equal repeated fields are fine);
//     Transfer-Encoding in HTTP/1.0, or whose last coding is not chunked;
//   - targets other than origin-form, http(s) absolute-form without
//     userinfo, CONNECT's host:port, and OPTIONS *; a fragment in the
//     target; an absolute-form or CONNECT target whose host or port
//     disagrees with Host ([ErrHostMismatch]); a body on CONNECT.
//
// Bare LF line endings are refused rather than tolerated: RFC 9112 2.2
// allows a server to accept them, and a proxy that splits lines on LF while
// the server does not (or the reverse) is exactly the disagreement that
// request smuggling needs. Every client in use sends CRLF.
func ParseRequestHead(data []byte) (RequestHead, error) {
	var p headParser
	return p.parse(data)
}

// headParser holds what the lines of a head said, as offsets into it.
type headParser struct {
	methodEnd              int
	targetStart, targetEnd int
	protoStart             int
	minor                  int // HTTP/1.minor
	form                   targetForm
	https                  bool      // absolute-form with scheme https
	target                 authority // for absolute-form and authority-form

	host     authority
	hostLine []byte // the Host header's value, for error messages
	hasHost  bool
	cl       int64 // -1 if no Content-Length
	hasTE    bool
	te       []byte // the last Transfer-Encoding value, for error messages
	chunked  bool   // chunked is among the transfer codings seen so far
	conn     connOptions
	upgrade  []byte // the Upgrade fields' values, joined by ", "
}

type targetForm int

const (
	originForm targetForm = iota
	absoluteForm
	authorityForm
	asteriskForm
)

func (p *headParser) parse(data []byte) (RequestHead, error) {
	p.cl = -1
	limit := data[:min(len(data), MaxHeadSize)]
	if err := checkPartialMethod(limit); err != nil {
		return RequestHead{}, err
	}
	for pos := 0; ; {
		nl := bytes.IndexByte(limit[pos:], '\n')
		if nl < 0 {
			if len(data) >= MaxHeadSize {
				return RequestHead{}, requestErr("request head is longer than %d bytes", MaxHeadSize)
			}
			return RequestHead{}, ErrIncomplete
		}
		nl += pos
		line, err := headLine(limit, pos, nl, ErrMalformedRequest)
		if err != nil {
			return RequestHead{}, err
		}
		switch {
		case pos == 0:
			err = p.requestLine(line)
		case len(line) == 0:
			return p.finish(data[:nl+1])
		default:
			err = p.headerLine(line, pos)
		}
		if err != nil {
			return RequestHead{}, err
		}
		pos = nl + 1
	}
}

// checkPartialMethod fails early on a first line that cannot become a
// request line, so that callers peeking at a stream need not wait for a
// newline that may never come. It looks only at the bytes before the first
// space, so its verdict does not change as more bytes arrive.
func checkPartialMethod(b []byte) error {
	for i, c := range b {
		if c == ' ' && i > 0 {
			return nil
		}
		if !isTokenChar(c) {
			return fmt.Errorf("%w: byte 0x%02x at offset %d in the method", ErrNotHTTP, c, i)
		}
	}
	return nil
}

// h2PrefaceLine is the first line of the HTTP/2 connection preface.
const h2PrefaceLine = "PRI * HTTP/2.0"

// requestLine parses "method SP request-target SP HTTP-version".
func (p *headParser) requestLine(line []byte) error {
	if string(line) == h2PrefaceLine {
		return fmt.Errorf("%w: %w: request line %q", ErrMalformedRequest, ErrH2CPreface, line)
	}
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		sp = len(line)
	}
	if sp == 0 || !isToken(line[:sp]) {
		return fmt.Errorf("%w: request line %q does not start with a method", ErrNotHTTP, clip(line))
	}
	if sp == len(line) {
		return fmt.Errorf("%w: line %q has no space after a method", ErrNotHTTP, clip(line))
	}
	p.methodEnd = sp
	rest := line[sp+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	switch {
	case sp2 < 0:
		return requestErr("request line %q has no HTTP version", clip(line))
	case sp2 == 0:
		return requestErr("request line %q has an empty request target", clip(line))
	}
	p.targetStart = sp + 1
	p.targetEnd = p.targetStart + sp2
	p.protoStart = p.targetEnd + 1
	target, proto := rest[:sp2], rest[sp2+1:]
	switch {
	case len(proto) < 5 || string(proto[:5]) != "HTTP/":
		return fmt.Errorf("%w: request line %q has version %q", ErrNotHTTP, clip(line), clip(proto))
	case string(proto) == "HTTP/1.1":
		p.minor = 1
	case string(proto) == "HTTP/1.0":
		p.minor = 0
	default:
		return requestErr("request line %q has version %q; only HTTP/1.0 and HTTP/1.1 are supported", clip(line), clip(proto))
	}
	return p.requestTarget(line[:sp], target)
}

// requestTarget classifies the target (RFC 9112 3.2) and parses the
// authority of absolute-form and authority-form targets.
func (p *headParser) requestTarget(method, target []byte) error {
	if len(target) == 0 {
		return requestErr("empty request target")
	}
	for i, c := range target {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return requestErr("request target %q has byte 0x%02x at offset %d", clip(target), c, i)
		}
	}
	connect := string(method) == "CONNECT"
	switch {
	case connect:
		a, err := parseAuthority(target, p.targetStart, true)
		if err != nil {
			return requestErr("CONNECT target %q is not host:port: %v", clip(target), err)
		}
		p.form, p.target = authorityForm, a
	case target[0] == '/':
		p.form = originForm
	case string(target) == "*":
		if string(method) != "OPTIONS" {
			return requestErr("request target * with method %q; only OPTIONS may use it", method)
		}
		p.form = asteriskForm
	default:
		i := bytes.Index(target, []byte("://"))
		if i < 0 {
			return requestErr("request target %q is neither a path nor an absolute URI", clip(target))
		}
		scheme := target[:i]
		switch {
		case bytes.EqualFold(scheme, []byte("http")):
		case bytes.EqualFold(scheme, []byte("https")):
			p.https = true
		default:
			return requestErr("request target %q has scheme %q; only http and https are accepted", clip(target), scheme)
		}
		auth := target[i+3:]
		if j := bytes.IndexAny(auth, "/?"); j >= 0 {
			auth = auth[:j]
		}
		if bytes.IndexByte(auth, '@') >= 0 {
			return requestErr("request target %q has userinfo, which HTTP forbids", clip(target))
		}
		a, err := parseAuthority(auth, p.targetStart+i+3, false)
		if err != nil {
			return requestErr("request target %q: %v", clip(target), err)
		}
		p.form, p.target = absoluteForm, a
	}
	return nil
}

// headerLine parses one field line (RFC 9112 5) and records what framing,
// routing and connection handling need.
func (p *headParser) headerLine(line []byte, base int) error {
	name, value, err := headerField(line, ErrMalformedRequest)
	if err != nil {
		return err
	}
	valueStart := base + len(line) - len(value) - len(trailingOWS(line))
	switch {
	case fieldIs(name, "host"):
		if p.hasHost {
			return requestErr("second Host header %q (the first was %q)", clip(value), p.hostLine)
		}
		p.hasHost, p.hostLine = true, value
		a, err := parseAuthority(value, valueStart, false)
		if err != nil {
			return requestErr("Host header %q: %v", clip(value), err)
		}
		p.host = a
	case fieldIs(name, "content-length"):
		if err := p.contentLength(value); err != nil {
			return err
		}
	case fieldIs(name, "transfer-encoding"):
		if err := p.transferEncoding(value); err != nil {
			return err
		}
	case fieldIs(name, "connection"):
		p.conn.add(value)
	case fieldIs(name, "upgrade"):
		if len(value) > 0 {
			p.upgrade = appendList(p.upgrade, value)
		}
	default:
		if bytes.IndexByte(name, '_') >= 0 {
			for _, f := range []string{"host", "content-length", "transfer-encoding"} {
				if lookalike(name, f) {
					return requestErr("header %q looks like %s with '_' for '-'", name, f)
				}
			}
		}
	}
	return nil
}

// contentLength records a Content-Length value (see parseContentLength). A
// request may not have Transfer-Encoding too.
func (p *headParser) contentLength(value []byte) error {
	if p.hasTE {
		return requestErr("both Transfer-Encoding and Content-Length")
	}
	n, err := parseContentLength(value, p.cl, ErrMalformedRequest)
	if err != nil {
		return err
	}
	p.cl = n
	return nil
}

// transferEncoding records the codings of a Transfer-Encoding value (see
// addCodings). A request may not have Content-Length too, nor be HTTP/1.0.
func (p *headParser) transferEncoding(value []byte) error {
	if p.cl >= 0 {
		return requestErr("both Content-Length and Transfer-Encoding")
	}
	if p.minor == 0 {
		return requestErr("Transfer-Encoding in an HTTP/1.0 request")
	}
	p.hasTE, p.te = true, value
	return addCodings(value, p.te, &p.chunked, ErrMalformedRequest)
}

// finish checks what depends on the whole head and builds the result; head
// is the head through its final CRLFCRLF.
func (p *headParser) finish(head []byte) (RequestHead, error) {
	if p.minor == 1 && !p.hasHost {
		return RequestHead{}, requestErr("HTTP/1.1 request without Host header")
	}
	if p.hasTE && !p.chunked {
		return RequestHead{}, requestErr("Transfer-Encoding %q does not end in chunked", clip(p.te))
	}
	connect := p.form == authorityForm
	if connect && (p.hasTE || p.cl > 0) {
		return RequestHead{}, requestErr("CONNECT request with a body")
	}
	if p.hasHost && (p.form == absoluteForm || connect) {
		target := head[p.targetStart:p.targetEnd]
		if !p.target.sameHost(p.host, head) {
			return RequestHead{}, fmt.Errorf("%w: %w: target %q names host %q, Host header is %q",
				ErrMalformedRequest, ErrHostMismatch, clip(target), head[p.target.hostStart:p.target.hostEnd], p.hostLine)
		}
		tp, hp := p.target.port, p.host.port
		if p.form == absoluteForm {
			def := 80
			if p.https {
				def = 443
			}
			tp, hp = portOr(tp, def), portOr(hp, def)
		} else if hp < 0 {
			hp = tp
		}
		if tp != hp {
			return RequestHead{}, fmt.Errorf("%w: %w: target %q is for port %d, Host header %q for port %d",
				ErrMalformedRequest, ErrHostMismatch, clip(target), tp, p.hostLine, hp)
		}
	}
	s := string(head)
	h := RequestHead{
		Method:        s[:p.methodEnd],
		Target:        s[p.targetStart:p.targetEnd],
		Proto:         s[p.protoStart : p.protoStart+len("HTTP/1.x")],
		Len:           len(head),
		ContentLength: p.cl,
		Chunked:       p.chunked,
		Upgrade:       connect || p.conn.upgrade && len(p.upgrade) > 0,
		UpgradeTo:     string(p.upgrade),
		WebSocket:     p.minor == 1 && s[:p.methodEnd] == "GET" && p.conn.upgrade && bytes.EqualFold(p.upgrade, []byte("websocket")),
		Close:         p.conn.close || p.minor == 0 && !p.conn.keepAlive,
	}
	if p.hasHost {
		h.Host = p.host.hostString(s)
		h.HostPort = s[p.host.portStart:p.host.portEnd]
	}
	if p.form == absoluteForm || connect {
		h.TargetHost = p.target.hostString(s)
		h.TargetPort = s[p.target.portStart:p.target.portEnd]
	}
	return h, nil
}

// RemoveFields returns head without its field lines named one of names
// (any case), or head itself if it has none. head must be a whole head as
// [ParseRequestHead] accepted it, so that every line ends in CRLF and
// nothing but a field line follows the first. The proxy uses it to forward
// a request without the fields that would ask the server for a protocol
// switch it does not honour.
func RemoveFields(head []byte, names ...string) []byte {
	var out []byte
	kept := 0 // head[:kept] is in out, or would be
	for pos := bytes.Index(head, []byte("\r\n")) + 2; pos < len(head); {
		end := pos + bytes.Index(head[pos:], []byte("\r\n")) + 2
		if colon := bytes.IndexByte(head[pos:end], ':'); colon > 0 && fieldIn(head[pos:pos+colon], names) {
			if out == nil {
				out = make([]byte, 0, len(head))
			}
			out = append(out, head[kept:pos]...)
			kept = end
		}
		pos = end
	}
	if out == nil {
		return head
	}
	return append(out, head[kept:]...)
}

// fieldIn reports whether a field name is one of names, ignoring case.
func fieldIn(name []byte, names []string) bool {
	for _, n := range names {
		if len(n) == len(name) && bytes.EqualFold(name, []byte(n)) {
			return true
		}
	}
	return false
}

func portOr(port, def int) int {
	if port < 0 {
		return def
	}
	return port
}

// lookalike reports whether name equals want once '_' is read as '-'.
func lookalike(name []byte, want string) bool {
	if len(name) != len(want) {
		return false
	}
	for i, c := range name {
		if c == '_' {
			c = '-'
		}
		if lower(c) != want[i] {
			return false
		}
	}
	return true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// trailingOWS returns the whitespace at the end of b.
func trailingOWS(b []byte) []byte {
	i := len(b)
	for i > 0 && (b[i-1] == ' ' || b[i-1] == '\t') {
		i--
	}
	return b[i:]
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// tchar (RFC 9110 5.6.2) as bit masks of the bytes 0-63 and 64-127:
// "!#$%&'*+-.^_`|~", digits and letters.
const (
	tcharLo = 0x03ff6cfa00000000
	tcharHi = 0x57ffffffc7fffffe
)

// isTokenChar reports whether c is a tchar.
func isTokenChar(c byte) bool {
	if c < 64 {
		return tcharLo&(1<<c) != 0
	}
	return c < 128 && tcharHi&(1<<(c-64)) != 0
}

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !isTokenChar(c) {
			return false
		}
	}
	return true
}

// clip shortens b for an error message.
func clip(b []byte) string {
	const n = 64
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
