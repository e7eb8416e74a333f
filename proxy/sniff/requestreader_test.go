package sniff

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"
)

// pipelinedStream is four requests sent back to back on one connection: a
// GET, a POST with Content-Length, a chunked POST with chunk extensions and
// trailers, and a GET for another host (which a proxy must check again).
const pipelinedStream = "GET /one HTTP/1.1\r\nHost: a.example\r\n\r\n" +
	"POST /two HTTP/1.1\r\nHost: a.example\r\nContent-Length: 11\r\n\r\nhello world" +
	"POST /three HTTP/1.1\r\nHost: a.example:8080\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" +
	"5;name=value ; flag\r\nhello\r\n" +
	"A; q=\"quoted \\\" string\"\r\n0123456789\r\n" +
	"000\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\n" +
	"GET /four HTTP/1.1\r\nHost: b.example\r\nConnection: close\r\n\r\n"

type readResult struct {
	host, target string
	body         string
	name         string // RequestHead.Name: the host the proxy checks
}

// readAll runs a RequestReader over r to the end and returns what it saw
// and the exact bytes it passed on (heads and bodies).
func readAll(t *testing.T, r io.Reader) ([]readResult, string, error) {
	t.Helper()
	rr := NewRequestReader(r)
	var out []readResult
	var passed bytes.Buffer
	for {
		h, raw, err := rr.Next()
		if err != nil {
			return out, passed.String(), err
		}
		if len(raw) != h.Len {
			t.Fatalf("raw head of %d bytes, Len %d", len(raw), h.Len)
		}
		passed.Write(raw)
		var body bytes.Buffer
		n, err := rr.CopyBody(&body)
		if n != int64(body.Len()) {
			t.Fatalf("CopyBody returned %d, wrote %d", n, body.Len())
		}
		passed.Write(body.Bytes())
		out = append(out, readResult{h.Host, h.Target, body.String(), h.Name()})
		if err != nil {
			return out, passed.String(), err
		}
	}
}

func TestRequestReaderPipelined(t *testing.T) {
	want := []readResult{
		{"a.example", "/one", "", "a.example"},
		{"a.example", "/two", "hello world", "a.example"},
		{"a.example", "/three", "5;name=value ; flag\r\nhello\r\nA; q=\"quoted \\\" string\"\r\n0123456789\r\n000\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\n", "a.example"},
		{"b.example", "/four", "", "b.example"},
	}
	for name, r := range map[string]io.Reader{
		"whole":     strings.NewReader(pipelinedStream),
		"one byte":  iotest.OneByteReader(strings.NewReader(pipelinedStream)),
		"half":      iotest.HalfReader(strings.NewReader(pipelinedStream)),
		"data+EOF":  iotest.DataErrReader(strings.NewReader(pipelinedStream)),
		"7 at once": &chunkReader{s: pipelinedStream, n: 7},
	} {
		t.Run(name, func(t *testing.T) {
			got, passed, err := readAll(t, r)
			if err != io.EOF {
				t.Fatalf("ended with %v, want io.EOF", err)
			}
			if len(got) != len(want) {
				t.Fatalf("got %d requests, want %d: %+v", len(got), len(want), got)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("request %d: got %+v, want %+v", i, got[i], want[i])
				}
			}
			if passed != pipelinedStream {
				t.Errorf("bytes passed on differ from the stream:\n%q\n%q", passed, pipelinedStream)
			}
		})
	}
}

// chunkReader returns s n bytes per Read.
type chunkReader struct {
	s string
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.s) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

func TestRequestReaderLargeBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 10000) // 160 KB, past the buffer
	head := "PUT /big HTTP/1.1\r\nHost: a.example\r\nContent-Length: 160000\r\n\r\n"
	chunked := "PUT /big HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n27100\r\n" + string(body) + "\r\n0\r\n\r\n"
	next := "GET /after HTTP/1.1\r\nHost: a.example\r\n\r\n"
	for name, stream := range map[string]string{"content-length": head + string(body) + next, "chunked": chunked + next} {
		t.Run(name, func(t *testing.T) {
			rr := NewRequestReader(&chunkReader{s: stream, n: 3000})
			if _, _, err := rr.Next(); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			n, err := rr.CopyBody(&got)
			if err != nil || n != int64(got.Len()) {
				t.Fatalf("CopyBody = %d, %v", n, err)
			}
			if name == "content-length" && !bytes.Equal(got.Bytes(), body) {
				t.Fatalf("body differs (%d bytes, want %d)", got.Len(), len(body))
			}
			if name == "chunked" && got.String() != chunked[strings.Index(chunked, "\r\n\r\n")+4:] {
				t.Fatalf("chunked body differs (%d bytes)", got.Len())
			}
			h, _, err := rr.Next()
			if err != nil || h.Target != "/after" {
				t.Fatalf("next request after the body: %+v, %v", h, err)
			}
		})
	}
}

// TestRequestReaderTCP copies a body between two loopback TCP connections,
// the case in which io.Copy can splice.
func TestRequestReaderTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	body := bytes.Repeat([]byte{'x'}, 1<<20)
	stream := "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1048576\r\n\r\n" + string(body)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(stream))
	}()
	client, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// upstream: another connection pair
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	received := make(chan []byte)
	go func() {
		c, err := ln2.Accept()
		if err != nil {
			received <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		received <- b
	}()
	up, err := net.Dial("tcp", ln2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rr := NewRequestReader(client)
	_, raw, err := rr.Next()
	if err != nil {
		t.Fatal(err)
	}
	up.Write(raw)
	n, err := rr.CopyBody(up)
	if err != nil || n != int64(len(body)) {
		t.Fatalf("CopyBody = %d, %v", n, err)
	}
	up.Close()
	if got := <-received; string(got) != stream {
		t.Fatalf("upstream received %d bytes, want %d", len(got), len(stream))
	}
}

func TestRequestReaderUpgrade(t *testing.T) {
	for _, tc := range []struct{ head, rest string }{
		{"GET /ws HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "\x81\x85\x00\x00\x00\x00hello"},
		{"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", "\x16\x03\x01\x00\x05hello"},
	} {
		rr := NewRequestReader(strings.NewReader(tc.head + tc.rest))
		h, raw, err := rr.Next()
		if err != nil || !h.Upgrade || string(raw) != tc.head {
			t.Fatalf("Next = %+v, %q, %v", h, raw, err)
		}
		if n, err := rr.CopyBody(io.Discard); n != 0 || err != nil {
			t.Fatalf("CopyBody = %d, %v", n, err)
		}
		if got := string(rr.Buffered()); got != tc.rest {
			t.Fatalf("Buffered = %q, want %q", got, tc.rest)
		}
	}
}

func TestRequestReaderEnds(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         error
		requests     int
	}{
		{"empty", "", io.EOF, 0},
		{"clean", "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", io.EOF, 1},
		{"inside head", "GET / HTTP/1.1\r\nHost: a.ex", io.ErrUnexpectedEOF, 0},
		{"inside second head", "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nG", io.ErrUnexpectedEOF, 1},
		{"inside body", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 10\r\n\r\nabc", io.ErrUnexpectedEOF, 1},
		{"inside chunk", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", io.ErrUnexpectedEOF, 1},
		{"inside trailers", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\r\n", io.ErrUnexpectedEOF, 1},
		{"host changes to a bad one", "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", ErrMalformedRequest, 1},
		{"smuggled CL.TE", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG", ErrMalformedRequest, 0},
		{"garbage after body", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\n\r\nx\x00x", ErrNotHTTP, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.stream), iotest.OneByteReader(strings.NewReader(tc.stream))} {
				got, _, err := readAll(t, r)
				if !errors.Is(err, tc.want) || len(got) != tc.requests {
					t.Fatalf("%d requests, %v; want %d, %v", len(got), err, tc.requests, tc.want)
				}
			}
		})
	}
}

// badChunkedBodies are chunked bodies that break the framing rules, by what
// is wrong with them.
var badChunkedBodies = map[string]string{
	"bare LF after size":        "5\nhello\r\n0\r\n\r\n",
	"bare LF after data":        "5\r\nhello\n0\r\n\r\n",
	"no CRLF after data":        "5\r\nhelloX\r\n0\r\n\r\n",
	"data longer than size":     "3\r\nhello\r\n0\r\n\r\n",
	"size not hex":              "g\r\nhello\r\n0\r\n\r\n",
	"empty size":                "\r\nhello\r\n0\r\n\r\n",
	"0x prefix":                 "0x5\r\nhello\r\n0\r\n\r\n",
	"negative size":             "-5\r\nhello\r\n0\r\n\r\n",
	"size overflow":             "fffffffffffffffff\r\nhello\r\n0\r\n\r\n",
	"space after size":          "5 \r\nhello\r\n0\r\n\r\n",
	"junk after size":           "5 x\r\nhello\r\n0\r\n\r\n",
	"extension without name":    "5;\r\nhello\r\n0\r\n\r\n",
	"extension bad value":       "5;a=\r\nhello\r\n0\r\n\r\n",
	"extension unclosed quote":  "5;a=\"x\r\nhello\r\n0\r\n\r\n",
	"extension bare CR":         "5;a\rb\r\nhello\r\n0\r\n\r\n",
	"extension bare LF":         "5;a\nhello\r\n0\r\n\r\n",
	"chunk line too long":       "5;a=" + strings.Repeat("b", maxChunkLine) + "\r\nhello\r\n0\r\n\r\n",
	"trailer bare LF":           "0\r\nX: y\n\r\n",
	"trailer obs-fold":          "0\r\nX: y\r\n z\r\n\r\n",
	"trailer no colon":          "0\r\nXy\r\n\r\n",
	"trailer Content-Length":    "0\r\nContent-Length: 5\r\n\r\n",
	"trailer Host":              "0\r\nHost: b.example\r\n\r\n",
	"trailer Transfer_Encoding": "0\r\nTransfer_Encoding: chunked\r\n\r\n",
	"trailers too long":         "0\r\n" + strings.Repeat("X: "+strings.Repeat("y", 1000)+"\r\n", 17) + "\r\n",
}

func TestRequestReaderBadChunked(t *testing.T) {
	const head = "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
	for name, body := range badChunkedBodies {
		t.Run(name, func(t *testing.T) {
			rr := NewRequestReader(strings.NewReader(head + body + "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"))
			if _, _, err := rr.Next(); err != nil {
				t.Fatal(err)
			}
			_, err := rr.CopyBody(io.Discard)
			if !errors.Is(err, ErrMalformedRequest) {
				t.Fatalf("CopyBody = %v; want a malformed-request error", err)
			}
			if _, _, err2 := rr.Next(); err2 != err {
				t.Fatalf("Next after a framing error = %v; want the same error", err2)
			}
		})
	}
}

func TestRequestReaderBodyPending(t *testing.T) {
	rr := NewRequestReader(strings.NewReader("POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: b.example\r\n\r\n"))
	if _, _, err := rr.Next(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rr.Next(); err != ErrBodyPending {
		t.Fatalf("Next before CopyBody = %v; want ErrBodyPending", err)
	}
	if n, err := rr.CopyBody(io.Discard); n != 3 || err != nil {
		t.Fatalf("CopyBody = %d, %v", n, err)
	}
	if n, err := rr.CopyBody(io.Discard); n != 0 || err != nil {
		t.Fatalf("second CopyBody = %d, %v", n, err)
	}
	if h, _, err := rr.Next(); err != nil || h.Host != "b.example" {
		t.Fatalf("Next = %+v, %v", h, err)
	}
}

// TestRequestReaderWriteError checks that a failing writer stops the copy
// and the error sticks.
func TestRequestReaderWriteError(t *testing.T) {
	rr := NewRequestReader(strings.NewReader("POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\nabc"))
	if _, _, err := rr.Next(); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, err := rr.CopyBody(errWriter{boom}); err != boom {
		t.Fatalf("CopyBody = %v, want boom", err)
	}
	if _, _, err := rr.Next(); err != boom {
		t.Fatalf("Next = %v, want boom", err)
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }
