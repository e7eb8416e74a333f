package sniff

import (
	"bytes"
	"strconv"
)

// ResponseHead is one parsed HTTP/1.x response head. How its body ends
// depends also on the request it answers: see [ResponseHead.Framing].
type ResponseHead struct {
	Proto      string // "HTTP/1.0" or "HTTP/1.1"
	StatusCode int    // 100 to 599
	// Len is the length of the head in bytes, through the final CRLFCRLF.
	Len int
	// ContentLength is the Content-Length header's value, -1 if none.
	// Transfer-Encoding overrides it.
	ContentLength int64
	// TransferEncoding is the Transfer-Encoding header's codings as sent
	// (several fields joined by ", "), "" if none.
	TransferEncoding string
	// Chunked is true if chunked is the last transfer coding.
	Chunked bool
	// Upgrade is the Upgrade header's value as sent (several fields joined
	// by ", "), "" if none: in a 101, the protocol switched to.
	Upgrade string
	// Close is true if the server will send nothing after this response:
	// Connection has "close", or the response is HTTP/1.0 without
	// "keep-alive".
	Close bool
}

// Framing is how the body of a response is delimited (RFC 9112 6.3).
type Framing int

// The framings [ResponseHead.Framing] tells apart.
const (
	// FramingNone: no body follows the head, whatever its headers say.
	FramingNone Framing = iota
	// FramingLength: ContentLength bytes of body follow.
	FramingLength
	// FramingChunked: a chunked body follows, trailer section included.
	FramingChunked
	// FramingClose: the body is everything until the server closes the
	// connection; nothing follows it.
	FramingClose
	// FramingSwitch: no body, and the stream stops being HTTP/1.x after
	// the head (a 101 Switching Protocols, or a 2xx answer to CONNECT,
	// which makes the connection a tunnel).
	FramingSwitch
)

// String returns "none", "length", "chunked", "close" or "switch".
func (f Framing) String() string {
	switch f {
	case FramingNone:
		return "none"
	case FramingLength:
		return "length"
	case FramingChunked:
		return "chunked"
	case FramingClose:
		return "close"
	case FramingSwitch:
		return "switch"
	}
	return "Framing(" + strconv.Itoa(int(f)) + ")"
}

// Interim reports whether the response is a 1xx other than 101: an
// interim answer (100 Continue, 103 Early Hints) after which the final
// response to the same request still comes.
func (h *ResponseHead) Interim() bool {
	return h.StatusCode < 200 && h.StatusCode != 101
}

// Framing returns how the body of this response ends when it answers a
// request with the given method (RFC 9112 6.3): a 101, and a 2xx answer
// to CONNECT, end HTTP; other 1xx responses, 204 and 304 responses and
// every response to HEAD have no body whatever their headers say;
// otherwise Transfer-Encoding wins over Content-Length (chunked last: a
// chunked body; other codings: the body runs until the connection closes);
// then Content-Length; then the body runs until the connection closes.
func (h *ResponseHead) Framing(method string) Framing {
	switch {
	case h.StatusCode == 101:
		return FramingSwitch
	case h.StatusCode < 200:
		return FramingNone
	case method == "CONNECT" && h.StatusCode < 300:
		return FramingSwitch
	case method == "HEAD", h.StatusCode == 204, h.StatusCode == 304:
		return FramingNone
	case h.TransferEncoding != "" && h.Chunked:
		return FramingChunked
	case h.TransferEncoding != "":
		return FramingClose
	case h.ContentLength >= 0:
		return FramingLength
	}
	return FramingClose
}

// ParseResponseHead parses an HTTP/1.x response head (RFC 9112) at the
// start of data. It returns [ErrIncomplete] until data holds the final
// CRLFCRLF, or an error if the head is longer than [MaxHeadSize]. The
// status line is checked as its bytes arrive and every other line once it
// is complete, so a stream that is not a response is refused without
// waiting for a line end that may never come. Every error wraps
// [ErrMalformedResponse].
//
// Nothing in a response makes the proxy that reads it send a request
// elsewhere; what it must get right is where each response ends, since a
// reader that takes part of a body for a head can be steered by whoever
// chose that body. So ParseResponseHead refuses what could frame the stream
// in two ways, like [ParseRequestHead]: lines ending in a bare LF, a CR
// anywhere else, obs-fold continuation lines (RFC 9112 5.2 lets a client
// unfold them; no server needs them), whitespace before a colon, control
// characters in values; a version other than HTTP/1.0 and HTTP/1.1 or a
// status code outside 100-599; a Content-Length that is not a number of at
// most 18 digits, a list in one field, or values that differ;
// Transfer-Encoding in an HTTP/1.0 response (RFC 9112 6.1: faulty framing),
// with an empty or parameterized coding, or with a coding after chunked.
// Content-Length next to Transfer-Encoding is allowed (Transfer-Encoding
// wins) but must still be valid.
func ParseResponseHead(data []byte) (ResponseHead, error) {
	var p responseParser
	return p.parse(data)
}

// responseParser holds what the lines of a response head said.
type responseParser struct {
	minor   int // HTTP/1.minor
	status  int
	cl      int64 // -1 if no Content-Length
	te      []byte
	chunked bool // the last coding seen is chunked
	upgrade []byte
	conn    connOptions
}

// statusLineLen is the length of "HTTP/1.1 200", the shortest status line.
const statusLineLen = len("HTTP/1.1 200")

func (p *responseParser) parse(data []byte) (ResponseHead, error) {
	p.cl = -1
	limit := data[:min(len(data), MaxHeadSize)]
	for pos := 0; ; {
		nl := bytes.IndexByte(limit[pos:], '\n')
		if nl < 0 {
			if pos == 0 {
				line := limit
				if len(line) > 0 && line[len(line)-1] == '\r' {
					line = line[:len(line)-1] // maybe the CR of the CRLF
				}
				if err := p.statusLine(line, false); err != nil {
					return ResponseHead{}, err
				}
			}
			if len(data) >= MaxHeadSize {
				return ResponseHead{}, responseErr("response head is longer than %d bytes", MaxHeadSize)
			}
			return ResponseHead{}, ErrIncomplete
		}
		nl += pos
		if pos == 0 {
			// The status line is checked before its line end, in the
			// same order as while it was arriving, so that the error
			// for a stream does not depend on where it was cut.
			line := limit[:nl]
			if nl > 0 && line[nl-1] == '\r' {
				line = line[:nl-1]
			}
			if err := p.statusLine(line, true); err != nil {
				return ResponseHead{}, err
			}
		}
		line, err := headLine(limit, pos, nl, ErrMalformedResponse)
		if err != nil {
			return ResponseHead{}, err
		}
		switch {
		case pos == 0:
		case len(line) == 0:
			return p.finish(data[:nl+1]), nil
		default:
			if err := p.headerLine(line); err != nil {
				return ResponseHead{}, err
			}
		}
		pos = nl + 1
	}
}

// statusLine checks "HTTP/1.x SP 3DIGIT [SP reason-phrase]" (RFC 9112 4),
// complete or not yet. A missing SP after the code is accepted, as clients
// do. Each error depends only on the bytes up to the fault.
func (p *responseParser) statusLine(line []byte, complete bool) error {
	const prefix = "HTTP/1."
	for i := range min(len(line), statusLineLen) {
		c := line[i]
		ok := true
		switch {
		case i < len(prefix):
			ok = c == prefix[i]
		case i == len(prefix):
			ok = c == '0' || c == '1'
		case i == len(prefix)+1:
			ok = c == ' '
		case i == len(prefix)+2:
			ok = '1' <= c && c <= '5'
		default:
			ok = '0' <= c && c <= '9'
		}
		if !ok {
			return responseErr("status line %q does not start with HTTP/1.0 or HTTP/1.1 and a status code 100-599 (byte 0x%02x at offset %d)",
				clip(line[:i+1]), c, i)
		}
	}
	if len(line) > statusLineLen && line[statusLineLen] != ' ' {
		return responseErr("status line %q has byte 0x%02x after the status code, not a space", clip(line[:statusLineLen+1]), line[statusLineLen])
	}
	for i := statusLineLen + 1; i < len(line); i++ {
		if c := line[i]; c < ' ' && c != '\t' || c == 0x7f {
			return responseErr("status line %q has control byte 0x%02x at offset %d", clip(line[:i+1]), c, i)
		}
	}
	if !complete {
		return nil
	}
	if len(line) < statusLineLen {
		return responseErr("status line %q is too short", clip(line))
	}
	p.minor = int(line[len(prefix)] - '0')
	p.status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	return nil
}

// headerLine parses one field line and records what framing and connection
// handling need.
func (p *responseParser) headerLine(line []byte) error {
	name, value, err := headerField(line, ErrMalformedResponse)
	if err != nil {
		return err
	}
	switch {
	case fieldIs(name, "content-length"):
		n, err := parseContentLength(value, p.cl, ErrMalformedResponse)
		if err != nil {
			return err
		}
		p.cl = n
	case fieldIs(name, "transfer-encoding"):
		if p.minor == 0 {
			return responseErr("Transfer-Encoding in an HTTP/1.0 response")
		}
		p.te = appendList(p.te, value)
		return addCodings(value, p.te, &p.chunked, ErrMalformedResponse)
	case fieldIs(name, "connection"):
		p.conn.add(value)
	case fieldIs(name, "upgrade"):
		p.upgrade = appendList(p.upgrade, value)
	}
	return nil
}

func (p *responseParser) finish(head []byte) ResponseHead {
	return ResponseHead{
		Proto:            [...]string{"HTTP/1.0", "HTTP/1.1"}[p.minor],
		StatusCode:       p.status,
		Len:              len(head),
		ContentLength:    p.cl,
		TransferEncoding: string(p.te),
		Chunked:          p.chunked,
		Upgrade:          string(p.upgrade),
		Close:            p.conn.close || p.minor == 0 && !p.conn.keepAlive,
	}
}
