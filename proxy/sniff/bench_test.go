package sniff

import (
	"io"
	"strings"
	"testing"
)

// BenchmarkServerName parses Go's default (post-quantum, ~1.5 KB)
// ClientHello in one record, the common case.
func BenchmarkServerName(b *testing.B) {
	data := goldenHellos(b)[0].data
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ServerName(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServerNameSplit parses the same hello cut into 1-byte records.
func BenchmarkServerNameSplit(b *testing.B) {
	data := resplit(b, goldenHellos(b)[0].data, func(int) int { return 1 })
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ServerName(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServerNameIncomplete is the cost of a peek that stops one byte
// short of the hello.
func BenchmarkServerNameIncomplete(b *testing.B) {
	data := goldenHellos(b)[0].data
	data = data[:len(data)-1]
	b.ReportAllocs()
	for b.Loop() {
		ServerName(data)
	}
}

const benchHead = "GET /api/v1/items?limit=10 HTTP/1.1\r\nHost: api.example.com\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36\r\n" +
	"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n" +
	"Accept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n" +
	"Connection: keep-alive\r\nCookie: session=0123456789abcdef; theme=dark\r\n\r\n"

func BenchmarkParseRequestHead(b *testing.B) {
	data := []byte(benchHead)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequestHead(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestReader frames pipelined requests with bodies.
func BenchmarkRequestReader(b *testing.B) {
	stream := strings.Repeat(pipelinedStream[:strings.LastIndex(pipelinedStream, "GET /four")], 100)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	r := strings.NewReader(stream)
	for b.Loop() {
		r.Reset(stream)
		rr := NewRequestReader(r)
		for {
			if _, _, err := rr.Next(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
			if _, err := rr.CopyBody(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkResponseReader frames keep-alive responses: an interim one,
// bodies by length and chunked, a HEAD answer.
func BenchmarkResponseReader(b *testing.B) {
	one := "HTTP/1.1 100 Continue\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
	methods := []string{"POST", "GET", "HEAD"}
	stream := strings.Repeat(one, 100)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	r := strings.NewReader(stream)
	for b.Loop() {
		r.Reset(stream)
		rr := NewResponseReader(r)
		for i := 0; ; {
			h, _, err := rr.Next(methods[i%len(methods)])
			if err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
			if _, err := rr.CopyBody(io.Discard); err != nil {
				b.Fatal(err)
			}
			if !h.Interim() {
				i++
			}
		}
	}
}
