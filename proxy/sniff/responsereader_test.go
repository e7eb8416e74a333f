package sniff

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"
)

// seedResponses are response streams used by the tests and as fuzz seeds,
// each with the methods of the requests they answer, in order.
var seedResponses = []struct{ methods, stream string }{
	{"GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
	{"GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"},
	{"HEAD GET", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"},
	{"POST", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"},
	{"GET GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 77\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil the close\r\nHTTP/1.1 101 x\r\n\r\n"},
	{"GET", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello"},
	{"CONNECT", "HTTP/1.1 200 Connection established\r\n\r\n\x16\x03\x01"},
	{"GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"},
	{"GET", "HTTP/1.1 200 OK\nContent-Length: 0\n\n"},
	{"GET GET", "HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
}

func TestParseResponseHead(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want ResponseHead
	}{
		{"plain", "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 200, ContentLength: 42}},
		{"no reason", "HTTP/1.1 204\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 204, ContentLength: -1}},
		{"empty reason", "HTTP/1.1 404 \r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 404, ContentLength: -1}},
		{"reason with tabs and obs-text", "HTTP/1.1 200 O\tK \xe2\x9c\x93\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 200, ContentLength: -1}},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nServer: x\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.0", StatusCode: 200, ContentLength: -1, Close: true}},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.0", StatusCode: 200, ContentLength: 1}},
		{"close", "HTTP/1.1 500 Oops\r\nconnection: foo, Close\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 500, ContentLength: -1, Close: true}},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\ntransfer-encoding: Chunked\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 200, ContentLength: -1, TransferEncoding: "gzip, Chunked", Chunked: true}},
		{"transfer-encoding wins", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 200, ContentLength: 3, TransferEncoding: "chunked", Chunked: true}},
		{"repeated equal lengths", "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 200, ContentLength: 7}},
		{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 101, ContentLength: -1, Upgrade: "websocket"}},
		{"advertised upgrades", "HTTP/1.1 200 OK\r\nUpgrade: h2,h2c\r\nUpgrade: x\r\nContent-Length: 0\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 200, ContentLength: 0, Upgrade: "h2,h2c, x"}},
		{"599", "HTTP/1.1 599 x\r\n\r\n",
			ResponseHead{Proto: "HTTP/1.1", StatusCode: 599, ContentLength: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseResponseHead([]byte(tc.in + "BODY"))
			tc.want.Len = len(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("ParseResponseHead(%q)\n got %+v, %v\nwant %+v", tc.in, got, err, tc.want)
			}
			for n := range len(tc.in) {
				if _, err := ParseResponseHead([]byte(tc.in[:n])); err != ErrIncomplete {
					t.Fatalf("first %d bytes: %v; want ErrIncomplete", n, err)
				}
			}
		})
	}
}

func TestParseResponseHeadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, text string
		// early is the length of the prefix that already fails, 0 if
		// only the whole head does.
		early int
	}{
		{"not a response", "GET / HTTP/1.1\r\n\r\n", `status line "G" does not start with HTTP/1.0`, 1},
		{"lowercase", "http/1.1 200 OK\r\n\r\n", "offset 0", 1},
		{"HTTP/2", "HTTP/2 200\r\n\r\n", "offset 5", 6},
		{"HTTP/1.2", "HTTP/1.2 200 OK\r\n\r\n", "offset 7", 8},
		{"two spaces", "HTTP/1.1  200 OK\r\n\r\n", "offset 9", 10},
		{"status 600", "HTTP/1.1 600 x\r\n\r\n", "offset 9", 10},
		{"status 099", "HTTP/1.1 099 x\r\n\r\n", "offset 9", 10},
		{"two-digit status", "HTTP/1.1 20 OK\r\n\r\n", "offset 11", 12},
		{"four-digit status", "HTTP/1.1 2000 OK\r\n\r\n", "after the status code", 13},
		{"short", "HTTP/1.1 20\r\n\r\n", "too short", 0},
		{"empty line first", "\r\nHTTP/1.1 200 OK\r\n\r\n", "too short", 2},
		{"control in reason", "HTTP/1.1 200 O\x00K\r\n\r\n", "control byte 0x00", 15},
		{"bare CR in reason", "HTTP/1.1 200 O\rK\r\n\r\n", "control byte 0x0d", 16},
		{"bare LF after status", "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", "bare LF", 0},
		{"bare LF in headers", "HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n", "bare LF", 0},
		{"bare CR in header", "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "bare CR", 0},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", "obs-fold", 0},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n", "whitespace before its colon", 0},
		{"no colon", "HTTP/1.1 200 OK\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n", "no colon", 0},
		{"control in value", "HTTP/1.1 200 OK\r\nX: a\x01\r\n\r\n", "control byte 0x01", 0},
		{"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", "conflicting Content-Length values 3 and 4", 0},
		{"length list", "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\n", "not a number", 0},
		{"negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "not a number", 0},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n", "not a number", 0},
		{"huge length", "HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n", "at most 18 digits", 0},
		{"empty length", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", "not a number", 0},
		{"invalid length next to chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n", "not a number", 0},
		{"invalid length on 304", "HTTP/1.1 304 Not Modified\r\nContent-Length: x\r\n\r\n", "not a number", 0},
		{"TE in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0 response", 0},
		{"coding after chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", "coding after chunked", 0},
		{"chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "coding after chunked", 0},
		{"empty coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip,,chunked\r\n\r\n", "empty or parameterized", 0},
		{"coding with parameter", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", "empty or parameterized", 0},
		{"too long", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", MaxHeadSize) + "\r\n\r\n", "longer than", 0},
		{"status line too long", "HTTP/1.1 200 " + strings.Repeat("a", MaxHeadSize), "longer than", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseResponseHead([]byte(tc.in))
			if !errors.Is(err, ErrMalformedResponse) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("ParseResponseHead(%q) = %v; want a malformed-response error saying %q", clip([]byte(tc.in)), err, tc.text)
			}
			// Every prefix: ErrIncomplete, then (from tc.early on, if set)
			// exactly the final error.
			failed := false
			for n := range len(tc.in) {
				_, perr := ParseResponseHead([]byte(tc.in[:n]))
				switch {
				case perr == ErrIncomplete && (failed || tc.early > 0 && n >= tc.early):
					t.Fatalf("first %d bytes: ErrIncomplete; want the final error %v", n, err)
				case perr != ErrIncomplete && !sameError(perr, err):
					t.Fatalf("first %d bytes: %v; want ErrIncomplete or the final error %v", n, perr, err)
				case perr != ErrIncomplete && n < tc.early:
					t.Fatalf("first %d bytes: %v, before the fault", n, perr)
				}
				failed = perr != ErrIncomplete
			}
		})
	}
}

func TestResponseFraming(t *testing.T) {
	for _, tc := range []struct {
		head   string
		method string
		want   Framing
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "GET", FramingLength},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD", FramingNone},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "HEAD", FramingNone},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", FramingChunked},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", FramingChunked},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n", "GET", FramingClose},
		{"HTTP/1.1 200 OK\r\n\r\n", "GET", FramingClose},
		{"HTTP/1.0 200 OK\r\n\r\n", "POST", FramingClose},
		{"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", "GET", FramingNone},
		{"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", FramingNone},
		{"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "GET", FramingNone},
		{"HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\n", "POST", FramingNone},
		{"HTTP/1.1 103 Early Hints\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", FramingNone},
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", "GET", FramingSwitch},
		{"HTTP/1.1 101 Switching Protocols\r\nContent-Length: 5\r\n\r\n", "HEAD", FramingSwitch},
		{"HTTP/1.1 200 Connection established\r\nContent-Length: 5\r\n\r\n", "CONNECT", FramingSwitch},
		{"HTTP/1.1 204 OK\r\n\r\n", "CONNECT", FramingSwitch},
		{"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 5\r\n\r\n", "CONNECT", FramingLength},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "connect", FramingLength}, // methods are case-sensitive
	} {
		h, err := ParseResponseHead([]byte(tc.head))
		if err != nil {
			t.Fatalf("%q: %v", tc.head, err)
		}
		if got := h.Framing(tc.method); got != tc.want {
			t.Errorf("%q to %s: framing %v, want %v", tc.head, tc.method, got, tc.want)
		}
	}
}

type readResponse struct {
	status  int
	framing Framing
	body    string
}

// readResponses runs a ResponseReader over r, answering requests with the
// given methods in turn (GET once they run out), to the end, and returns
// what it saw and the exact bytes it passed on.
func readResponses(t *testing.T, r io.Reader, methods []string) ([]readResponse, string, error) {
	t.Helper()
	rr := NewResponseReader(r)
	var out []readResponse
	var passed bytes.Buffer
	for i := 0; ; {
		method := "GET"
		if i < len(methods) {
			method = methods[i]
		}
		if err := rr.Wait(); err != nil {
			return out, passed.String(), err
		}
		h, raw, err := rr.Next(method)
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
		f := h.Framing(method)
		out = append(out, readResponse{h.StatusCode, f, body.String()})
		if err != nil {
			return out, passed.String(), err
		}
		if f == FramingSwitch {
			return out, passed.String(), ErrSwitched
		}
		if !h.Interim() {
			i++
		}
	}
}

// readers returns readers of s that cut it in various ways.
func readers(s string) map[string]io.Reader {
	return map[string]io.Reader{
		"whole":     strings.NewReader(s),
		"one byte":  iotest.OneByteReader(strings.NewReader(s)),
		"half":      iotest.HalfReader(strings.NewReader(s)),
		"data+EOF":  iotest.DataErrReader(strings.NewReader(s)),
		"7 at once": &chunkReader{s: s, n: 7},
	}
}

func TestResponseReaderPipelined(t *testing.T) {
	fake := "\r\nHTTP/1.1 101 Fake\r\n\r\nxxxx"
	chunkedBody := fmt.Sprintf("5;name=value\r\nhello\r\n%x\r\n%s\r\n0\r\nX-Checksum: abc\r\n\r\n", len(fake), fake)
	stream := "HTTP/1.1 100 Continue\r\n\r\n" +
		"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 36\r\n\r\n" + "HTTP/1.1 101 Switching Protocols\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nTransfer-Encoding: chunked\r\n\r\n" + // answers HEAD
		"HTTP/1.1 204 No Content\r\nContent-Length: 12\r\n\r\n" +
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody +
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + "until the close\r\nHTTP/1.1 101 x\r\n\r\n"
	methods := []string{"POST", "HEAD", "GET", "DELETE", "GET", "GET", "GET"}
	want := []readResponse{
		{100, FramingNone, ""},
		{103, FramingNone, ""},
		{200, FramingLength, "HTTP/1.1 101 Switching Protocols\r\n\r\n"},
		{200, FramingNone, ""},
		{204, FramingNone, ""},
		{304, FramingNone, ""},
		{200, FramingLength, ""},
		{200, FramingChunked, chunkedBody},
		{200, FramingClose, "until the close\r\nHTTP/1.1 101 x\r\n\r\n"},
	}
	for name, r := range readers(stream) {
		t.Run(name, func(t *testing.T) {
			got, passed, err := readResponses(t, r, methods)
			if err != io.EOF {
				t.Fatalf("ended with %v, want io.EOF", err)
			}
			if len(got) != len(want) {
				t.Fatalf("got %d responses, want %d: %+v", len(got), len(want), got)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("response %d: got %+v, want %+v", i, got[i], want[i])
				}
			}
			if passed != stream {
				t.Errorf("bytes passed on differ from the stream:\n%q\n%q", passed, stream)
			}
		})
	}
}

func TestResponseReaderSwitch(t *testing.T) {
	for _, tc := range []struct{ method, head, rest string }{
		{"GET", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "\x81\x05helloHTTP/1.1 200 OK\r\n\r\n"},
		{"CONNECT", "HTTP/1.1 200 Connection established\r\nContent-Length: 10\r\n\r\n", "\x16\x03\x01\x00\x05hello"},
	} {
		for name, r := range readers(tc.head + tc.rest) {
			rr := NewResponseReader(r)
			h, raw, err := rr.Next(tc.method)
			if err != nil || string(raw) != tc.head || h.Framing(tc.method) != FramingSwitch {
				t.Fatalf("%s: Next = %+v, %q, %v", name, h, raw, err)
			}
			if n, err := rr.CopyBody(io.Discard); n != 0 || err != nil {
				t.Fatalf("%s: CopyBody after a switch = %d, %v", name, n, err)
			}
			if _, _, err := rr.Next("GET"); err != ErrSwitched {
				t.Fatalf("%s: Next after a switch = %v, want ErrSwitched", name, err)
			}
			if err := rr.Wait(); err != ErrSwitched {
				t.Fatalf("%s: Wait after a switch = %v, want ErrSwitched", name, err)
			}
			rest, _ := io.ReadAll(io.MultiReader(bytes.NewReader(rr.Buffered()), r))
			if string(rest) != tc.rest {
				t.Fatalf("%s: after the head: %q, want %q", name, rest, tc.rest)
			}
		}
	}
}

func TestResponseReaderEnds(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         error
		responses    int
	}{
		{"empty", "", io.EOF, 0},
		{"clean", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", io.EOF, 1},
		{"close-delimited", "HTTP/1.1 200 OK\r\n\r\nall of it", io.EOF, 1},
		{"inside head", "HTTP/1.1 200 OK\r\nContent-Len", io.ErrUnexpectedEOF, 0},
		{"inside second head", "HTTP/1.1 204 No Content\r\n\r\nH", io.ErrUnexpectedEOF, 1},
		{"inside body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", io.ErrUnexpectedEOF, 1},
		{"inside chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", io.ErrUnexpectedEOF, 1},
		{"inside trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\r\n", io.ErrUnexpectedEOF, 1},
		{"garbage after body", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxx\x00", ErrMalformedResponse, 1},
		{"too much body", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nok\r\n", ErrMalformedResponse, 1},
		{"body after 204", "HTTP/1.1 204 No Content\r\n\r\nbody", ErrMalformedResponse, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, r := range readers(tc.stream) {
				got, _, err := readResponses(t, r, nil)
				if !errors.Is(err, tc.want) || len(got) != tc.responses {
					t.Fatalf("%s: %d responses, %v; want %d, %v", name, len(got), err, tc.responses, tc.want)
				}
			}
		})
	}
}

func TestResponseReaderBadChunked(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	for name, body := range badChunkedBodies {
		t.Run(name, func(t *testing.T) {
			rr := NewResponseReader(strings.NewReader(head + body + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
			if _, _, err := rr.Next("GET"); err != nil {
				t.Fatal(err)
			}
			_, err := rr.CopyBody(io.Discard)
			if !errors.Is(err, ErrMalformedResponse) || errors.Is(err, ErrMalformedRequest) {
				t.Fatalf("CopyBody = %v; want a malformed-response error", err)
			}
			if _, _, err2 := rr.Next("GET"); err2 != err {
				t.Fatalf("Next after a framing error = %v; want the same error", err2)
			}
			if err2 := rr.Wait(); err2 != err {
				t.Fatalf("Wait after a framing error = %v; want the same error", err2)
			}
		})
	}
}

func TestResponseReaderBodyPending(t *testing.T) {
	rr := NewResponseReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
	if err := rr.Wait(); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if _, _, err := rr.Next("GET"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rr.Next("GET"); err != ErrBodyPending {
		t.Fatalf("Next before CopyBody = %v; want ErrBodyPending", err)
	}
	if err := rr.Wait(); err != ErrBodyPending {
		t.Fatalf("Wait before CopyBody = %v; want ErrBodyPending", err)
	}
	if n, err := rr.CopyBody(io.Discard); n != 3 || err != nil {
		t.Fatalf("CopyBody = %d, %v", n, err)
	}
	if n, err := rr.CopyBody(io.Discard); n != 0 || err != nil {
		t.Fatalf("second CopyBody = %d, %v", n, err)
	}
	if h, _, err := rr.Next("GET"); err != nil || h.ContentLength != 0 {
		t.Fatalf("Next = %+v, %v", h, err)
	}
	if err := rr.Wait(); err != io.EOF {
		t.Fatalf("Wait at the end = %v, want io.EOF", err)
	}
}

func TestResponseReaderWriteError(t *testing.T) {
	rr := NewResponseReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"))
	if _, _, err := rr.Next("GET"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, err := rr.CopyBody(errWriter{boom}); err != boom {
		t.Fatalf("CopyBody = %v, want boom", err)
	}
	if _, _, err := rr.Next("GET"); err != boom {
		t.Fatalf("Next = %v, want boom", err)
	}
}

// TestResponseReaderTCP copies long bodies between two loopback TCP
// connections, where io.Copy can splice, and checks every byte arrives.
func TestResponseReaderTCP(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for name, stream := range map[string]string{
		"content-length": fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body) +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"chunked": fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body) +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"close-delimited": "HTTP/1.1 200 OK\r\n\r\n" + string(body),
	} {
		t.Run(name, func(t *testing.T) {
			server, proxyUp := tcpConns(t)
			proxyDown, client := tcpConns(t)
			go func() {
				server.Write([]byte(stream))
				server.Close()
			}()
			received := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(client)
				received <- b
			}()
			if _, err := readResponsesTo(proxyUp, proxyDown); err != io.EOF {
				t.Fatalf("relaying the responses: %v", err)
			}
			proxyDown.Close()
			if got := <-received; string(got) != stream {
				t.Fatalf("client received %d bytes, want %d", len(got), len(stream))
			}
		})
	}
}

// readResponsesTo relays GET responses from src to dst until src ends.
func readResponsesTo(src io.Reader, dst io.Writer) (int, error) {
	rr := NewResponseReader(src)
	for n := 0; ; n++ {
		_, raw, err := rr.Next("GET")
		if err != nil {
			return n, err
		}
		if _, err := dst.Write(raw); err != nil {
			return n, err
		}
		if _, err := rr.CopyBody(dst); err != nil {
			return n, err
		}
	}
}

// tcpConns returns both ends of a loopback TCP connection.
func tcpConns(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
