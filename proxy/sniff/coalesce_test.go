package sniff

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// writeLog records each Write call's bytes.
type writeLog struct{ writes []string }

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// gated is a connection that holds only the first at bytes of a stream at
// first. The read past them, which on a connection would wait, records
// how many writes w had seen by then; it then returns the rest (released).
type gated struct {
	s        *strings.Reader
	at       int
	read     int
	w        *writeLog
	atBlock  int // writes w had seen when the read past at came
	blocked  bool
	released string
}

func (g *gated) Read(p []byte) (int, error) {
	if g.read >= g.at && !g.blocked {
		g.blocked, g.atBlock = true, len(g.w.writes)
		g.s = strings.NewReader(g.released)
	}
	if !g.blocked {
		p = p[:min(len(p), g.at-g.read)]
	}
	n, err := g.s.Read(p)
	g.read += n
	return n, err
}

// CopyBodyAfter writes a message's head and the body bytes read with it in
// one Write; a message without a body, its head alone; and the head
// before it blocks for body bytes still to come.
func TestCopyBodyAfterCoalesces(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		at           int      // bytes the connection has before it blocks; 0: all
		want         []string // the writes
		wantBlocked  int      // writes made before the read that blocks
	}{
		{
			name:   "content-length",
			stream: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
			want:   []string{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
		},
		{
			name:   "chunked",
			stream: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want:   []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		},
		{
			name:   "no body",
			stream: "HTTP/1.1 204 No Content\r\n\r\n",
			want:   []string{"HTTP/1.1 204 No Content\r\n\r\n"},
		},
		{
			name:        "content-length, body later",
			stream:      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
			at:          len("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
			want:        []string{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "hello"},
			wantBlocked: 1,
		},
		{
			name:        "chunked, half a size line",
			stream:      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			at:          len("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r"),
			want:        []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n"},
			wantBlocked: 1,
		},
		{
			name:        "chunked, first chunk then later",
			stream:      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
			at:          len("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n"),
			want:        []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n", "3\r\nllo\r\n0\r\n\r\n"},
			wantBlocked: 1,
		},
		{
			name:        "close-delimited, body later",
			stream:      "HTTP/1.1 200 OK\r\n\r\nuntil the close",
			at:          len("HTTP/1.1 200 OK\r\n\r\n"),
			want:        []string{"HTTP/1.1 200 OK\r\n\r\n", "until the close"},
			wantBlocked: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &writeLog{}
			var r io.Reader = strings.NewReader(tc.stream)
			var g *gated
			if tc.at > 0 {
				g = &gated{s: strings.NewReader(tc.stream[:tc.at]), at: tc.at, w: w, released: tc.stream[tc.at:]}
				r = g
			}
			rr := NewResponseReader(r)
			_, raw, err := rr.Next("GET")
			if err != nil {
				t.Fatal(err)
			}
			n, err := rr.CopyBodyAfter(w, raw)
			if err != nil || n != int64(len(tc.stream)) {
				t.Fatalf("CopyBodyAfter = %d, %v; want %d, nil", n, err, len(tc.stream))
			}
			if strings.Join(w.writes, "\x00") != strings.Join(tc.want, "\x00") {
				t.Fatalf("writes %q, want %q", w.writes, tc.want)
			}
			if g != nil && g.atBlock != tc.wantBlocked {
				t.Fatalf("%d writes before the read that waits for more, want %d (the head held back)", g.atBlock, tc.wantBlocked)
			}
		})
	}
}

// The same for requests: a request with a small body goes out in one
// write, one without a body (or whose body has not come) its head alone.
func TestRequestCopyBodyAfterCoalesces(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         []string
	}{
		{"content-length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
			[]string{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"}},
		{"chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			[]string{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}},
		{"no body", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", []string{"GET / HTTP/1.1\r\nHost: a\r\n\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := NewRequestReader(strings.NewReader(tc.stream))
			_, raw, err := rr.Next()
			if err != nil {
				t.Fatal(err)
			}
			w := &writeLog{}
			if n, err := rr.CopyBodyAfter(w, raw); err != nil || n != int64(len(tc.stream)) {
				t.Fatalf("CopyBodyAfter = %d, %v", n, err)
			}
			if strings.Join(w.writes, "\x00") != strings.Join(tc.want, "\x00") {
				t.Fatalf("writes %q, want %q", w.writes, tc.want)
			}
		})
	}
	// Expect: 100-continue: the client sends nothing more until answered.
	w := &writeLog{}
	head := "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
	g := &gated{s: strings.NewReader(head), at: len(head), w: w, released: "hello"}
	rr := NewRequestReader(g)
	_, raw, err := rr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rr.CopyBodyAfter(w, raw); err != nil {
		t.Fatal(err)
	}
	if g.atBlock != 1 || !bytes.Equal([]byte(w.writes[0]), []byte(head)) {
		t.Fatalf("%d writes (%q) before the read that waits for the body, want the head alone", g.atBlock, w.writes)
	}
}
