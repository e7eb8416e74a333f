package sniff

// Protocol is what the first bytes of a stream look like.
type Protocol int

// The protocols [Detect] tells apart.
const (
	// ProtoUnknown is anything else: the stream carries no name the
	// proxy can read (SSH, raw TCP, a lowercase or exotic HTTP method).
	ProtoUnknown Protocol = iota
	// ProtoTLS is a TLS handshake record: read the name with [ServerName].
	ProtoTLS
	// ProtoHTTP is an HTTP/1.x request line: read the name with
	// [ParseRequestHead].
	ProtoHTTP
	// ProtoH2C is the HTTP/2 connection preface sent with prior knowledge
	// (RFC 9113 section 3.4); it names no host before the first HEADERS frame.
	ProtoH2C
)

// String returns "unknown", "tls", "http" or "h2c".
func (p Protocol) String() string {
	switch p {
	case ProtoTLS:
		return "tls"
	case ProtoHTTP:
		return "http"
	case ProtoH2C:
		return "h2c"
	default:
		return "unknown"
	}
}

// h2Preface is the client connection preface of HTTP/2 (RFC 9113 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// maxDetectMethod bounds the method token [Detect] waits for. The longest
// registered HTTP method (UPDATEREDIRECTREF) has 17 letters.
const maxDetectMethod = 20

// Detect classifies a stream from its first bytes: 0x16 0x03 (a TLS
// handshake record) is [ProtoTLS]; the full HTTP/2 preface is [ProtoH2C];
// a method token followed by a space is [ProtoHTTP]. It returns
// [ErrIncomplete] while data is too short to tell, and ProtoUnknown with a
// nil error for anything else.
//
// For HTTP the method must be 1 to 20 of the characters A-Z, '-' and '_'.
// That covers every registered method and keeps banners such as SSH's
// "SSH-2.0-OpenSSH_9.2p1 Debian" from passing for a request line, so that
// such streams stay decidable by address rules. A request with a lowercase
// or otherwise odd method is ProtoUnknown: it gets no name, which fails
// closed.
func Detect(data []byte) (Protocol, error) {
	if len(data) == 0 {
		return ProtoUnknown, ErrIncomplete
	}
	if data[0] == recordTypeHandshake {
		if len(data) < 2 {
			return ProtoUnknown, ErrIncomplete
		}
		if data[1] == 0x03 {
			return ProtoTLS, nil
		}
		return ProtoUnknown, nil
	}
	if n := min(len(data), len(h2Preface)); string(data[:n]) == h2Preface[:n] {
		if n < len(h2Preface) {
			return ProtoUnknown, ErrIncomplete
		}
		return ProtoH2C, nil
	}
	for i, c := range data {
		switch {
		case c == ' ' && i > 0:
			return ProtoHTTP, nil
		case i == maxDetectMethod:
			return ProtoUnknown, nil
		case 'A' <= c && c <= 'Z', c == '-', c == '_':
		default:
			return ProtoUnknown, nil
		}
	}
	return ProtoUnknown, ErrIncomplete
}
