package sniff

import (
	"errors"
	"fmt"
)

// ErrIncomplete means the bytes seen so far are a valid beginning but more
// are needed to decide. Once a function has returned anything else for a
// prefix of a stream, it returns the same for every longer prefix.
var ErrIncomplete = errors.New("sniff: incomplete, more bytes are needed")

// ErrNotTLS means the stream does not begin with a TLS handshake record.
var ErrNotTLS = errors.New("sniff: not a TLS handshake record")

// ErrNotHTTP means the stream does not begin with an HTTP/1.x request line.
var ErrNotHTTP = errors.New("sniff: not an HTTP/1.x request")

// ErrMalformedHello is wrapped by every error [ServerName] returns for a
// stream that starts like TLS but holds no valid ClientHello.
var ErrMalformedHello = errors.New("sniff: malformed TLS ClientHello")

// ErrMalformedRequest is wrapped by every error returned for a stream that
// starts like an HTTP/1.x request but breaks its syntax or framing rules.
var ErrMalformedRequest = errors.New("sniff: malformed HTTP request")

// ErrMalformedResponse is wrapped by every error returned for a response
// stream that breaks the syntax or framing rules of HTTP/1.x, so that where
// one response ends and the next begins can no longer be known.
var ErrMalformedResponse = errors.New("sniff: malformed HTTP response")

// ErrHostMismatch is wrapped (together with [ErrMalformedRequest]) when a
// request's absolute-form or authority-form target names another host or
// port than its Host header.
var ErrHostMismatch = errors.New("request target disagrees with Host header")

// ErrH2CPreface is wrapped (together with [ErrMalformedRequest]) when a
// request line is the first line of the HTTP/2 connection preface, "PRI *
// HTTP/2.0": h2c with prior knowledge, which names its host only in
// frames a reader of HTTP/1.x cannot check.
var ErrH2CPreface = errors.New("HTTP/2 connection preface (h2c with prior knowledge)")

// ErrBodyPending is returned by [RequestReader.Next] and
// [ResponseReader.Next] when the previous message has a body that CopyBody
// has not copied yet.
var ErrBodyPending = errors.New("sniff: body of the previous message not copied yet")

func helloErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformedHello}, args...)...)
}

func requestErr(format string, args ...any) error {
	return malformed(ErrMalformedRequest, format, args...)
}

func responseErr(format string, args ...any) error {
	return malformed(ErrMalformedResponse, format, args...)
}

// malformed returns an error wrapping kind (ErrMalformedRequest or
// ErrMalformedResponse), for the parts both directions share.
func malformed(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{kind}, args...)...)
}
