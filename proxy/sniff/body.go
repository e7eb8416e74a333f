package sniff

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
)

// maxChunkLine bounds a chunk-size line with its extensions, as Go's
// net/http does.
const maxChunkLine = 4096

// bodyCopier copies one message body from br to w. It checks bytes in br's
// buffer in place and writes them in as few writes as it can: pend bytes at
// the front of the buffer are checked and not yet written.
//
// prefix (the message's head) goes out with the first write, joined to
// the pending bytes, so that a head and the body bytes that came with it
// leave in one write (one segment, for a small message). Every read that
// may block is preceded by flush, so the prefix never waits for body
// bytes that have not arrived.
type bodyCopier struct {
	br      *bufio.Reader
	r       io.Reader // the connection under br, for copying past the buffer
	w       io.Writer
	prefix  []byte // not written yet; nil once written
	pend    int
	written int64
	werr    error // the first error of w
	kind    error // ErrMalformedRequest or ErrMalformedResponse, for framing errors
}

// flush writes the prefix, if it has not been written, and the pending
// bytes in one write, and drops the pending bytes from the buffer.
func (c *bodyCopier) flush() error {
	if c.pend == 0 && len(c.prefix) == 0 {
		return nil
	}
	p, _ := c.br.Peek(c.pend)
	if len(c.prefix) > 0 {
		p = append(append(make([]byte, 0, len(c.prefix)+len(p)), c.prefix...), p...)
		c.prefix = nil
	}
	n, err := c.w.Write(p)
	c.written += int64(n)
	c.br.Discard(c.pend)
	c.pend = 0
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	c.werr = err
	return err
}

// writeAll writes b to w, an empty b with no call, as flush does.
func writeAll(w io.Writer, b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return int64(n), err
}

// more flushes, then waits until the buffer holds at least one more byte.
func (c *bodyCopier) more() error {
	if err := c.flush(); err != nil {
		return err
	}
	_, err := c.br.Peek(c.br.Buffered() + 1)
	switch {
	case err == io.EOF:
		return io.ErrUnexpectedEOF
	case errors.Is(err, bufio.ErrBufferFull):
		return malformed(c.kind, "body line longer than the read buffer") // callers bound lines below that
	}
	return err
}

// data passes n bytes of body through.
func (c *bodyCopier) data(n int64) error {
	for n > 0 {
		avail := c.br.Buffered() - c.pend
		if avail > 0 {
			take := int(min(int64(avail), n))
			c.pend += take
			n -= int64(take)
			continue
		}
		if err := c.flush(); err != nil {
			return err
		}
		if n >= int64(c.br.Size()) {
			// The buffer is empty: copy the rest straight from the
			// connection, which lets two *net.TCPConn splice.
			m, err := io.Copy(c.w, &io.LimitedReader{R: c.r, N: n})
			c.written += m
			c.werr = err // io.Copy does not say which side failed; either way w is done
			if err == nil && m < n {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if _, err := c.br.Peek(1); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// rest passes everything until the end of the stream through.
func (c *bodyCopier) rest() error {
	c.pend = c.br.Buffered()
	if err := c.flush(); err != nil {
		return err
	}
	m, err := io.Copy(c.w, c.r)
	c.written += m
	c.werr = err
	return err
}

// line returns the next line at the pending position, LF included, reading
// more if needed; it must be consumed (pend += len) before the next read.
func (c *bodyCopier) line(limit int) ([]byte, error) {
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		rest := buf[c.pend:]
		i := bytes.IndexByte(rest, '\n')
		if i >= limit || i < 0 && len(rest) >= limit {
			return nil, malformed(c.kind, "chunked body line longer than %d bytes", limit)
		}
		if i >= 0 {
			return rest[:i+1], nil
		}
		if err := c.more(); err != nil {
			return nil, err
		}
	}
}

// crlfLine strips the CRLF off a line returned by line, refusing a bare LF
// or a CR anywhere else.
func crlfLine(line []byte, kind error) ([]byte, error) {
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, malformed(kind, "chunked body line %q ends in a bare LF", clip(line))
	}
	line = line[:len(line)-2]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, malformed(kind, "chunked body line %q has a bare CR", clip(line))
	}
	return line, nil
}

// chunked passes a chunked body through (RFC 9112 7.1): chunks, the last
// chunk and the trailer section.
func (c *bodyCopier) chunked() error {
	for {
		line, err := c.line(maxChunkLine)
		if err != nil {
			return err
		}
		size, err := parseChunkSizeLine(line, c.kind)
		if err != nil {
			return err
		}
		c.pend += len(line)
		if size == 0 {
			break
		}
		if err := c.data(size); err != nil {
			return err
		}
		for c.br.Buffered()-c.pend < 2 {
			if err := c.more(); err != nil {
				return err
			}
		}
		if b, _ := c.br.Peek(c.pend + 2); b[c.pend] != '\r' || b[c.pend+1] != '\n' {
			return malformed(c.kind, "chunk data is followed by %q, not CRLF", b[c.pend:])
		}
		c.pend += 2
	}
	for trailers := 0; ; {
		if trailers >= MaxHeadSize {
			return malformed(c.kind, "trailer section longer than %d bytes", MaxHeadSize)
		}
		line, err := c.line(MaxHeadSize - trailers)
		if err != nil {
			return err
		}
		trailers += len(line)
		field, err := crlfLine(line, c.kind)
		if err != nil {
			return err
		}
		if len(field) == 0 {
			c.pend += len(line)
			return c.flush()
		}
		if err := checkTrailer(field, c.kind); err != nil {
			return err
		}
		c.pend += len(line)
	}
}

// checkTrailer checks the syntax of a trailer field line and refuses fields
// that frame or route a message (RFC 9110 6.5.1), which a lax peer might
// still act on.
func checkTrailer(line []byte, kind error) error {
	if line[0] == ' ' || line[0] == '\t' {
		return malformed(kind, "trailer line %q is an obs-fold continuation", clip(line))
	}
	name, _, err := splitFieldLine(line, kind)
	if err != nil {
		return err
	}
	for _, f := range []string{"host", "content-length", "transfer-encoding"} {
		if lookalike(name, f) {
			return malformed(kind, "trailer field %q is not allowed", name)
		}
	}
	return nil
}

// parseChunkSizeLine parses chunk-size [chunk-ext] CRLF (RFC 9112 7.1.1):
// chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ).
func parseChunkSizeLine(line []byte, kind error) (int64, error) {
	l, err := crlfLine(line, kind)
	if err != nil {
		return 0, err
	}
	var size int64
	i := 0
	for ; i < len(l) && isHex(l[i]); i++ {
		if size > math.MaxInt64>>4 {
			return 0, malformed(kind, "chunk size %q is too large", clip(l))
		}
		size = size<<4 | int64(unhex(l[i]))
	}
	if i == 0 {
		return 0, malformed(kind, "chunk size line %q does not start with a hex size", clip(l))
	}
	for rest := l[i:]; len(rest) > 0; {
		rest = trimLeftOWS(rest)
		if len(rest) == 0 || rest[0] != ';' {
			return 0, malformed(kind, "chunk size line %q has %q after the size, not an extension", clip(l), clip(rest))
		}
		rest = trimLeftOWS(rest[1:])
		n := tokenLen(rest)
		if n == 0 {
			return 0, malformed(kind, "chunk extension in %q has no name", clip(l))
		}
		rest = rest[n:]
		if r := trimLeftOWS(rest); len(r) > 0 && r[0] == '=' {
			rest = trimLeftOWS(r[1:])
			if len(rest) > 0 && rest[0] == '"' {
				n = quotedStringLen(rest)
			} else {
				n = tokenLen(rest)
			}
			if n == 0 {
				return 0, malformed(kind, "chunk extension in %q has a bad value", clip(l))
			}
			rest = rest[n:]
		}
	}
	return size, nil
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func trimLeftOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// tokenLen is the length of the token at the start of b.
func tokenLen(b []byte) int {
	for i, c := range b {
		if !isTokenChar(c) {
			return i
		}
	}
	return len(b)
}

// quotedStringLen is the length of the quoted-string (RFC 9110 5.6.4) at
// the start of b, 0 if there is none.
func quotedStringLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i == len(b) || b[i] < ' ' && b[i] != '\t' || b[i] == 0x7f {
				return 0
			}
		case c < ' ' && c != '\t' || c == 0x7f:
			return 0
		}
	}
	return 0
}
