package sniff

import (
	"bufio"
	"errors"
	"io"
)

// ErrSwitched is returned by [ResponseReader.Next] and [ResponseReader.Wait]
// after a response whose framing is [FramingSwitch]: the rest of the
// stream is not HTTP/1.x (take it with [ResponseReader.Buffered] and the
// connection).
var ErrSwitched = errors.New("sniff: the stream switched protocols and is no longer HTTP/1.x")

// ResponseReader reads the responses a server sends on one connection and
// frames them exactly as RFC 9112 6.3 says a client must, so that no byte
// of a body, whoever chose it, can pass for a status line: a proxy that
// pairs the responses with the requests it forwarded then knows which
// answer a request got, and whether the server really switched protocols.
// Bytes pass through unchanged.
//
// The reader does not know the requests; the caller says, for each
// response, which request method it answers ([ResponseReader.Next]), and
// calls Next again with the same method after an interim (1xx) response.
//
// A ResponseReader owns a bufio.Reader on the connection; after it has
// been used, read the connection only through it (or take
// [ResponseReader.Buffered] first). It is not safe for concurrent use.
type ResponseReader struct {
	r         io.Reader
	br        *bufio.Reader
	raw       []byte  // copy of the last head
	framing   Framing // of the last response whose body is not copied yet
	remaining int64   // its Content-Length body bytes not yet copied
	err       error   // sticky: the stream cannot be framed, has ended, or switched
}

// NewResponseReader returns a ResponseReader that reads responses from r.
func NewResponseReader(r io.Reader) *ResponseReader {
	return &ResponseReader{r: r, br: bufio.NewReaderSize(r, MaxHeadSize)}
}

// Wait blocks until the first byte of the next response has arrived and
// returns nil, without parsing anything. It returns io.EOF if the stream
// ends cleanly between responses, [ErrBodyPending] if the previous
// response's body has not been copied, and the reader's final error, if it
// has one, like Next. A caller that must know which request a response
// answers before it calls Next (because one may not be outstanding) waits
// here first: a server answers only what it has received.
func (rr *ResponseReader) Wait() error {
	if err := rr.ready(); err != nil {
		return err
	}
	if _, err := rr.br.Peek(1); err != nil {
		rr.err = err
		return err
	}
	return nil
}

func (rr *ResponseReader) ready() error {
	if rr.err != nil {
		return rr.err
	}
	if rr.framing != FramingNone {
		return ErrBodyPending
	}
	return nil
}

// Next reads the next response head, blocking until it is complete, for a
// request whose method is method, and returns it with its raw bytes, which
// stay valid until the next call of Next. It returns io.EOF if the stream
// ends cleanly between responses, an error wrapping io.ErrUnexpectedEOF if
// it ends inside a head, and [ErrBodyPending] if the previous response's
// body has not been copied with [ResponseReader.CopyBody]. An error
// wrapping [ErrMalformedResponse] is final: the stream can no longer be
// framed, and every later call returns it again.
//
// After an interim response ([ResponseHead.Interim]) the final response to
// the same request follows: call Next with the same method again. After a
// response whose framing is [FramingSwitch], Next returns [ErrSwitched];
// after a body that ran until the connection closed, io.EOF.
func (rr *ResponseReader) Next(method string) (ResponseHead, []byte, error) {
	if err := rr.ready(); err != nil {
		return ResponseHead{}, nil, err
	}
	var h ResponseHead
	n, err := readHead(rr.br, "response", func(buf []byte) (int, error) {
		var err error
		h, err = ParseResponseHead(buf)
		return h.Len, err
	})
	if err != nil {
		rr.err = err
		return ResponseHead{}, nil, err
	}
	rr.raw = append(rr.raw[:0], rr.Buffered()[:n]...)
	rr.br.Discard(n)
	rr.framing = h.Framing(method)
	switch rr.framing {
	case FramingSwitch:
		rr.framing, rr.err = FramingNone, ErrSwitched
	case FramingLength:
		rr.remaining = h.ContentLength
		if rr.remaining == 0 {
			rr.framing = FramingNone
		}
	}
	return h, rr.raw, nil
}

// CopyBody copies the body of the response last returned by Next to w, as
// framed by [ResponseHead.Framing] (chunk-size lines, extensions and
// trailers included), bytes unchanged, and returns how many bytes it
// wrote. It returns 0 and nil if the response has no body or its body has
// been copied. A chunked body with broken framing is an error wrapping
// [ErrMalformedResponse]; w has then received the body up to the line or
// chunk boundary before the fault, never the faulty part. A body that
// runs until the connection closes ends the stream: Next then returns
// io.EOF. Errors are final, as for Next.
//
// Where a long stretch of body is not buffered yet (a Content-Length body,
// a large chunk, a body that runs until the close), CopyBody copies it
// straight from the connection to w with io.Copy, so that two bare
// *net.TCPConn splice.
func (rr *ResponseReader) CopyBody(w io.Writer) (int64, error) {
	return rr.CopyBodyAfter(w, nil)
}

// CopyBodyAfter is CopyBody with head (the response's head, as Next
// returned it) written first: head and the body bytes already read leave
// in one write to w, so that a small response the server sent in one
// segment reaches the client in one, not two. head is never held back
// waiting for body bytes: it is written, with whatever body is buffered,
// before CopyBodyAfter first blocks to read, and alone if the response has
// no body; the rest of the body then flows as it arrives, as with
// CopyBody. The count includes head. If the reader's stream had already
// failed, nothing is written.
func (rr *ResponseReader) CopyBodyAfter(w io.Writer, head []byte) (int64, error) {
	if rr.framing == FramingNone {
		if rr.err == nil || rr.err == io.EOF || rr.err == ErrSwitched {
			return writeAll(w, head)
		}
		return 0, rr.err
	}
	c := bodyCopier{br: rr.br, r: rr.r, w: w, prefix: head, kind: ErrMalformedResponse}
	var err error
	switch rr.framing {
	case FramingChunked:
		err = c.chunked()
	case FramingLength:
		err = c.data(rr.remaining)
		if err == nil {
			err = c.flush()
		}
	case FramingClose:
		err = c.rest()
		if err == nil {
			err = io.EOF // the stream is over
		}
	}
	rr.framing, rr.remaining = FramingNone, 0
	if err != nil {
		if c.werr == nil {
			c.flush()
		}
		rr.err = err
		if err == io.EOF {
			err = nil
		}
	}
	return c.written, err
}

// Buffered returns the bytes read from the connection but not returned by
// Next or copied by CopyBody yet: after a [FramingSwitch] response, the
// first bytes of the new protocol. The slice is valid until the next call
// that reads.
func (rr *ResponseReader) Buffered() []byte {
	b, _ := rr.br.Peek(rr.br.Buffered())
	return b
}
