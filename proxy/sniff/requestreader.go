package sniff

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// RequestReader reads the pipelined or keep-alive HTTP/1.x requests a
// client sends on one connection, so that the proxy can check the host of
// every request, not only the first, before it forwards it. It frames each
// request the way a strict server would: the head with [ParseRequestHead],
// the body by Content-Length or chunked coding, trailers included. Bytes
// pass through unchanged.
//
// A RequestReader owns a bufio.Reader on the connection; after it has been
// used, read the connection only through it (or take [RequestReader.Buffered]
// first). It is not safe for concurrent use.
type RequestReader struct {
	r         io.Reader
	br        *bufio.Reader
	raw       []byte // copy of the last head
	remaining int64  // Content-Length body bytes of the last request not yet copied
	chunked   bool   // the last request has a chunked body not yet copied
	err       error  // sticky: the stream cannot be framed any more
}

// NewRequestReader returns a RequestReader that reads requests from r.
func NewRequestReader(r io.Reader) *RequestReader {
	return &RequestReader{r: r, br: bufio.NewReaderSize(r, MaxHeadSize)}
}

// Next reads the next request head, blocking until it is complete, and
// returns it with its raw bytes, which stay valid until the next call of
// Next. It returns io.EOF if the stream ends cleanly between requests,
// an error wrapping io.ErrUnexpectedEOF if it ends inside a head, and
// [ErrBodyPending] if the previous request's body has not been copied with
// [RequestReader.CopyBody]. Any other error is final: the stream can no
// longer be framed, and every later call returns it again.
//
// After a request with Upgrade set, the stream may have stopped being
// HTTP/1.x (if the server agreed); the caller decides whether to go on
// calling Next or to relay the rest as opaque bytes.
func (rr *RequestReader) Next() (RequestHead, []byte, error) {
	if rr.err != nil {
		return RequestHead{}, nil, rr.err
	}
	if rr.chunked || rr.remaining > 0 {
		return RequestHead{}, nil, ErrBodyPending
	}
	var h RequestHead
	n, err := readHead(rr.br, "request", func(buf []byte) (int, error) {
		var err error
		h, err = ParseRequestHead(buf)
		return h.Len, err
	})
	if err != nil {
		rr.err = err
		return RequestHead{}, nil, err
	}
	rr.raw = append(rr.raw[:0], rr.Buffered()[:n]...)
	rr.br.Discard(n)
	rr.chunked, rr.remaining = h.Chunked, max(h.ContentLength, 0)
	return h, rr.raw, nil
}

// readHead blocks until parse, called on the buffered bytes each time a
// line has completed (and while the first line is incomplete), accepts
// them or refuses them with an error other than ErrIncomplete, and
// returns the head's length or that error. It returns io.EOF if the stream
// ends before the head's first byte, and an error wrapping
// io.ErrUnexpectedEOF if it ends inside the head; what names the kind of
// message in that error.
func readHead(br *bufio.Reader, what string, parse func([]byte) (int, error)) (int, error) {
	scanned := -1 // bytes parsed without result; reparse when a line completes
	for {
		n := br.Buffered()
		if n == 0 {
			if _, err := br.Peek(1); err != nil {
				return 0, err
			}
			continue
		}
		buf, _ := br.Peek(n)
		if scanned < 0 || bytes.IndexByte(buf[scanned:], '\n') >= 0 || bytes.IndexByte(buf, '\n') < 0 {
			l, err := parse(buf)
			if err == nil {
				return l, nil
			}
			if !errors.Is(err, ErrIncomplete) {
				return 0, err
			}
		}
		scanned = n
		if _, err := br.Peek(n + 1); err != nil {
			if err == io.EOF {
				err = fmt.Errorf("connection closed after %d bytes of a %s head: %w", n, what, io.ErrUnexpectedEOF)
			}
			return 0, err
		}
	}
}

// CopyBody copies the body of the request last returned by Next to w, as
// framed by its Content-Length or its chunked coding (chunk-size lines,
// extensions and trailers included), bytes unchanged, and returns how many
// bytes it wrote. It returns 0 and nil if the request has no body or its
// body has been copied. A chunked body with broken framing is an error
// wrapping [ErrMalformedRequest]; w has then received the body up to the
// line or chunk boundary before the fault, never the faulty part. Errors
// are final, as for Next.
//
// Where a long stretch of body is not buffered yet, CopyBody copies it
// straight from the connection to w with io.Copy, so that two bare
// *net.TCPConn splice.
func (rr *RequestReader) CopyBody(w io.Writer) (int64, error) {
	return rr.CopyBodyAfter(w, nil)
}

// CopyBodyAfter is CopyBody with head (the request's head, as Next
// returned it or as the caller rewrote it) written first: head and the
// body bytes already read leave in one write to w, so that a small request
// the client sent in one segment goes upstream in one. head is never held
// back waiting for body bytes (a client that sent Expect: 100-continue
// sends none until it is answered): it is written, with whatever body is
// buffered, before CopyBodyAfter first blocks to read, and alone if the
// request has no body; the rest of the body then flows as it arrives. The
// count includes head. If the reader's stream had already failed, nothing
// is written.
func (rr *RequestReader) CopyBodyAfter(w io.Writer, head []byte) (int64, error) {
	if rr.err != nil {
		return 0, rr.err
	}
	c := bodyCopier{br: rr.br, r: rr.r, w: w, prefix: head, kind: ErrMalformedRequest}
	var err error
	switch {
	case rr.chunked:
		err = c.chunked()
	case rr.remaining > 0:
		err = c.data(rr.remaining)
		if err == nil {
			err = c.flush()
		}
	default:
		err = c.flush()
	}
	rr.chunked, rr.remaining = false, 0
	if err != nil {
		// Pass on what was checked before the fault, so that how much w
		// gets does not depend on how the reads fell.
		if c.werr == nil {
			c.flush()
		}
		rr.err = err
	}
	return c.written, err
}

// Buffered returns the bytes read from the connection but not returned by
// Next or copied by CopyBody yet, for a caller that goes on with a raw
// relay after an upgrade. The slice is valid until the next call that
// reads.
func (rr *RequestReader) Buffered() []byte {
	b, _ := rr.br.Peek(rr.br.Buffered())
	return b
}
