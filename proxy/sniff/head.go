package sniff

import (
	"bytes"
	"strconv"
)

// What request and response heads share: their lines, their field lines,
// and the fields that frame a message or end a connection. Both parsers
// apply the same rules to them; only the error they wrap differs (kind:
// ErrMalformedRequest or ErrMalformedResponse).

// headLine returns the line limit[pos:nl+1] of a head, nl being the offset
// of its LF, without its CRLF. It must end in CRLF and hold no other CR:
// a bare CR or LF is read as a line end by some parsers and not by
// others.
func headLine(limit []byte, pos, nl int, kind error) ([]byte, error) {
	if nl == pos || limit[nl-1] != '\r' {
		return nil, malformed(kind, "line %q ends in a bare LF, not CRLF", clip(limit[pos:nl+1]))
	}
	line := limit[pos : nl-1]
	if i := bytes.IndexByte(line, '\r'); i >= 0 {
		return nil, malformed(kind, "line %q has a bare CR at offset %d", clip(line), i)
	}
	return line, nil
}

// headerField splits a header line (see splitFieldLine), which must not
// be an obs-fold continuation (RFC 9112 5.2).
func headerField(line []byte, kind error) (name, value []byte, err error) {
	if line[0] == ' ' || line[0] == '\t' {
		return nil, nil, malformed(kind, "header line %q is an obs-fold continuation", clip(line))
	}
	return splitFieldLine(line, kind)
}

// splitFieldLine splits "name: value" (RFC 9112 5.1): name is a token with
// no whitespace before the colon, value has its surrounding whitespace
// trimmed and no control characters but HTAB.
func splitFieldLine(line []byte, kind error) (name, value []byte, err error) {
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return nil, nil, malformed(kind, "header line %q has no colon", clip(line))
	}
	name = line[:colon]
	if len(name) == 0 {
		return nil, nil, malformed(kind, "header line %q has an empty name", clip(line))
	}
	for i, c := range name {
		if c == ' ' || c == '\t' {
			return nil, nil, malformed(kind, "header %q has whitespace before its colon", clip(name))
		}
		if !isTokenChar(c) {
			return nil, nil, malformed(kind, "header name %q has byte 0x%02x at offset %d", clip(name), c, i)
		}
	}
	value = trimOWS(line[colon+1:])
	for i, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, malformed(kind, "header %q has control byte 0x%02x at offset %d of its value", clip(name), c, i)
		}
	}
	return name, value, nil
}

// parseContentLength reads a Content-Length value: at most 18 digits,
// and equal to prev, the value of an earlier Content-Length field, if
// there was one (prev >= 0). Repeated equal values are fine, as RFC 9110
// 8.6 allows; a list in one field ("5, 5") is refused, as Go's net/http
// does.
func parseContentLength(value []byte, prev int64, kind error) (int64, error) {
	if len(value) == 0 || len(value) > 18 || !allDigits(value) {
		return 0, malformed(kind, "Content-Length %q is not a number of at most 18 digits", clip(value))
	}
	n, _ := strconv.ParseInt(string(value), 10, 64)
	if prev >= 0 && prev != n {
		return 0, malformed(kind, "conflicting Content-Length values %d and %d", prev, n)
	}
	return n, nil
}

// addCodings reads the transfer codings of one Transfer-Encoding value
// into *chunked: each must be a token without parameters, and chunked, once
// seen, the last. list is the message's Transfer-Encoding so far, this
// value included, for the error.
func addCodings(value, list []byte, chunked *bool, kind error) error {
	var err error
	forEachElement(value, func(e []byte) {
		switch {
		case err != nil:
		case len(e) == 0 || !isToken(e):
			err = malformed(kind, "Transfer-Encoding %q has an empty or parameterized coding", clip(value))
		case *chunked:
			err = malformed(kind, "Transfer-Encoding %q has a coding after chunked", clip(list))
		case bytes.EqualFold(e, []byte("chunked")):
			*chunked = true
		}
	})
	return err
}

// connOptions are the Connection options (RFC 9110 7.6.1) that framing
// and connection handling need.
type connOptions struct {
	close     bool
	keepAlive bool
	upgrade   bool // the Upgrade field is meant (only requests look)
}

// add records the options of one Connection value.
func (o *connOptions) add(value []byte) {
	forEachElement(value, func(e []byte) {
		switch {
		case bytes.EqualFold(e, []byte("close")):
			o.close = true
		case bytes.EqualFold(e, []byte("keep-alive")):
			o.keepAlive = true
		case bytes.EqualFold(e, []byte("upgrade")):
			o.upgrade = true
		}
	})
}

// fieldIs reports whether a field name is want, ignoring case.
func fieldIs(name []byte, want string) bool {
	return len(name) == len(want) && bytes.EqualFold(name, []byte(want))
}

// forEachElement calls f with each comma-separated element of a list
// value, trimmed of whitespace (RFC 9110 5.6.1).
func forEachElement(value []byte, f func([]byte)) {
	for {
		i := bytes.IndexByte(value, ',')
		if i < 0 {
			f(trimOWS(value))
			return
		}
		f(trimOWS(value[:i]))
		value = value[i+1:]
	}
}

// appendList adds value to a comma-separated list.
func appendList(list, value []byte) []byte {
	if len(list) > 0 {
		list = append(list, ", "...)
	}
	return append(list, value...)
}
