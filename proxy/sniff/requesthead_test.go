package sniff

import (
	"errors"
	"strings"
	"testing"
)

// seedRequests are request heads used by the tests and as fuzz seeds.
var seedRequests = []string{
	"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET http://example.com:8080/x?y HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: t\r\n\r\n",
	"POST /upload HTTP/1.1\r\nHost: API.Example.com\r\nContent-Length: 5\r\n\r\nhello",
	"POST /c HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
	"GET /ws HTTP/1.1\r\nHost: [::1]:80\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
	"GET / HTTP/1.0\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: example.com\r\nHost: evil.example\r\n\r\n",
	"GET http://evil.example/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET / HTTP/1.1\nHost: example.com\n\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
}

func TestParseRequestHead(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want RequestHead
	}{
		{"origin-form", "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\n\r\n",
			RequestHead{Method: "GET", Target: "/a?b=c", Proto: "HTTP/1.1", Host: "example.com", ContentLength: -1}},
		{"host with port and case", "GET / HTTP/1.1\r\nhOsT:  API.Example.COM:8080 \r\n\r\n",
			RequestHead{Method: "GET", Target: "/", Proto: "HTTP/1.1", Host: "api.example.com", HostPort: "8080", ContentLength: -1}},
		{"host with trailing dot", "GET / HTTP/1.1\r\nHost: example.com.\r\n\r\n",
			RequestHead{Method: "GET", Target: "/", Proto: "HTTP/1.1", Host: "example.com", ContentLength: -1}},
		{"host with trailing dot and port", "GET / HTTP/1.1\r\nHost: API.example.com.:8080\r\n\r\n",
			RequestHead{Method: "GET", Target: "/", Proto: "HTTP/1.1", Host: "api.example.com", HostPort: "8080", ContentLength: -1}},
		{"absolute-form with trailing dot", "GET http://api.example.com./x HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
			RequestHead{Method: "GET", Target: "http://api.example.com./x", Proto: "HTTP/1.1", Host: "api.example.com", TargetHost: "api.example.com", ContentLength: -1}},
		{"IPv6 host", "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
			RequestHead{Method: "GET", Target: "/", Proto: "HTTP/1.1", Host: "::1", HostPort: "80", ContentLength: -1}},
		{"IPv6 host canonicalized", "GET / HTTP/1.1\r\nHost: [2001:DB8:0:0::1]\r\n\r\n",
			RequestHead{Method: "GET", Target: "/", Proto: "HTTP/1.1", Host: "2001:db8::1", ContentLength: -1}},
		{"IPv4 host", "GET / HTTP/1.1\r\nHost: 203.0.113.7:81\r\n\r\n",
			RequestHead{Method: "GET", Target: "/", Proto: "HTTP/1.1", Host: "203.0.113.7", HostPort: "81", ContentLength: -1}},
		{"absolute-form agreeing", "GET http://Example.com/x HTTP/1.1\r\nHost: example.COM:80\r\n\r\n",
			RequestHead{Method: "GET", Target: "http://Example.com/x", Proto: "HTTP/1.1", Host: "example.com", HostPort: "80", TargetHost: "example.com", ContentLength: -1}},
		{"absolute-form with port and query", "GET http://example.com:8080?q HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
			RequestHead{Method: "GET", Target: "http://example.com:8080?q", Proto: "HTTP/1.1", Host: "example.com", HostPort: "8080", TargetHost: "example.com", TargetPort: "8080", ContentLength: -1}},
		{"absolute-form https default port", "GET HTTPS://example.com:443/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
			RequestHead{Method: "GET", Target: "HTTPS://example.com:443/", Proto: "HTTP/1.1", Host: "example.com", TargetHost: "example.com", TargetPort: "443", ContentLength: -1}},
		{"absolute-form IPv6", "GET http://[2001:db8::1]:8080/ HTTP/1.1\r\nHost: [2001:db8:0::1]:8080\r\n\r\n",
			RequestHead{Method: "GET", Target: "http://[2001:db8::1]:8080/", Proto: "HTTP/1.1", Host: "2001:db8::1", HostPort: "8080", TargetHost: "2001:db8::1", TargetPort: "8080", ContentLength: -1}},
		{"HTTP/1.0 without Host", "GET / HTTP/1.0\r\n\r\n",
			RequestHead{Method: "GET", Target: "/", Proto: "HTTP/1.0", ContentLength: -1, Close: true}},
		{"HTTP/1.0 absolute-form without Host", "GET http://example.com/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			RequestHead{Method: "GET", Target: "http://example.com/", Proto: "HTTP/1.0", TargetHost: "example.com", ContentLength: -1}},
		{"content length", "POST / HTTP/1.1\r\nHost: h.example\r\nContent-Length: 42\r\nconnection: Close\r\n\r\n",
			RequestHead{Method: "POST", Target: "/", Proto: "HTTP/1.1", Host: "h.example", ContentLength: 42, Close: true}},
		{"repeated equal content lengths", "POST / HTTP/1.1\r\nHost: h.example\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n",
			RequestHead{Method: "POST", Target: "/", Proto: "HTTP/1.1", Host: "h.example", ContentLength: 7}},
		{"chunked", "POST / HTTP/1.1\r\nHost: h.example\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n\r\n",
			RequestHead{Method: "POST", Target: "/", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1, Chunked: true}},
		{"websocket", "GET /ws HTTP/1.1\r\nHost: h.example\r\nConnection: keep-alive, Upgrade\r\nUpgrade: WebSocket\r\n\r\n",
			RequestHead{Method: "GET", Target: "/ws", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1, Upgrade: true, UpgradeTo: "WebSocket", WebSocket: true}},
		{"websocket without connection option", "GET /ws HTTP/1.1\r\nHost: h.example\r\nUpgrade: websocket\r\n\r\n",
			RequestHead{Method: "GET", Target: "/ws", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1, UpgradeTo: "websocket"}},
		{"websocket with POST", "POST /ws HTTP/1.1\r\nHost: h.example\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
			RequestHead{Method: "POST", Target: "/ws", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1, Upgrade: true, UpgradeTo: "websocket"}},
		{"websocket in HTTP/1.0", "GET /ws HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
			RequestHead{Method: "GET", Target: "/ws", Proto: "HTTP/1.0", ContentLength: -1, Upgrade: true, UpgradeTo: "websocket", Close: true}},
		{"websocket or h2c", "GET /ws HTTP/1.1\r\nHost: h.example\r\nConnection: upgrade\r\nUpgrade: websocket, h2c\r\n\r\n",
			RequestHead{Method: "GET", Target: "/ws", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1, Upgrade: true, UpgradeTo: "websocket, h2c"}},
		{"two upgrade fields", "GET /ws HTTP/1.1\r\nHost: h.example\r\nConnection: upgrade\r\nUpgrade: websocket\r\nUpgrade: websocket\r\n\r\n",
			RequestHead{Method: "GET", Target: "/ws", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1, Upgrade: true, UpgradeTo: "websocket, websocket"}},
		{"h2c", "GET / HTTP/1.1\r\nHost: h.example\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
			RequestHead{Method: "GET", Target: "/", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1, Upgrade: true, UpgradeTo: "h2c"}},
		{"upgrade header without connection option", "GET /ws HTTP/1.1\r\nHost: h.example\r\nUpgrade: h2c\r\n\r\n",
			RequestHead{Method: "GET", Target: "/ws", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1, UpgradeTo: "h2c"}},
		{"connect", "CONNECT Example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
			RequestHead{Method: "CONNECT", Target: "Example.com:443", Proto: "HTTP/1.1", Host: "example.com", HostPort: "443", TargetHost: "example.com", TargetPort: "443", ContentLength: -1, Upgrade: true}},
		{"connect, Host without port", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n",
			RequestHead{Method: "CONNECT", Target: "example.com:443", Proto: "HTTP/1.1", Host: "example.com", TargetHost: "example.com", TargetPort: "443", ContentLength: -1, Upgrade: true}},
		{"options asterisk", "OPTIONS * HTTP/1.1\r\nHost: h.example\r\n\r\n",
			RequestHead{Method: "OPTIONS", Target: "*", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1}},
		{"lowercase method and odd header values", "m-search /x HTTP/1.1\r\nHost: h.example\r\nX-A: \t v\xc3\xa4l\tue \r\nX-Empty:\r\n\r\n",
			RequestHead{Method: "m-search", Target: "/x", Proto: "HTTP/1.1", Host: "h.example", ContentLength: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "BODY"
			got, err := ParseRequestHead([]byte(tc.in + body))
			tc.want.Len = len(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("ParseRequestHead(%q)\n got %+v, %v\nwant %+v", tc.in, got, err, tc.want)
			}
			for n := range len(tc.in) {
				if _, err := ParseRequestHead([]byte(tc.in[:n])); err != ErrIncomplete {
					t.Fatalf("first %d bytes: %v; want ErrIncomplete", n, err)
				}
			}
		})
	}
}

func TestRemoveFields(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET / HTTP/1.1\r\nHost: h.example\r\n\r\n", "GET / HTTP/1.1\r\nHost: h.example\r\n\r\n"},
		{"GET / HTTP/1.1\r\nHost: h.example\r\nConnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nHTTP2-SETTINGS: AAMA\r\nAccept: */*\r\n\r\n",
			"GET / HTTP/1.1\r\nHost: h.example\r\nConnection: Upgrade, HTTP2-Settings\r\nAccept: */*\r\n\r\n"},
		{"GET / HTTP/1.1\r\nUpgrade: a\r\nHost: h.example\r\nUpgrade: b\r\n\r\n", "GET / HTTP/1.1\r\nHost: h.example\r\n\r\n"},
		{"GET /Upgrade: HTTP/1.1\r\nX-Upgrade: a\r\nUpgrade-Insecure-Requests: 1\r\nHost: h.example\r\nX: Upgrade: b\r\n\r\n",
			"GET /Upgrade: HTTP/1.1\r\nX-Upgrade: a\r\nUpgrade-Insecure-Requests: 1\r\nHost: h.example\r\nX: Upgrade: b\r\n\r\n"},
	} {
		if _, err := ParseRequestHead([]byte(tc.in)); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		got := RemoveFields([]byte(tc.in), "Upgrade", "HTTP2-Settings")
		if string(got) != tc.want {
			t.Errorf("RemoveFields(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
		if h, err := ParseRequestHead(got); err != nil || h.UpgradeTo != "" || h.Len != len(got) {
			t.Errorf("RemoveFields(%q) left %+v, %v", tc.in, h, err)
		}
	}
}

func TestParseRequestHeadErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		is   error  // errors.Is target
		text string // substring of the message
	}{
		{"duplicate Host", "GET / HTTP/1.1\r\nHost: a.example\r\nhost: b.example\r\n\r\n", ErrMalformedRequest, `second Host header "b.example"`},
		{"missing Host in 1.1", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", ErrMalformedRequest, "without Host"},
		{"empty Host", "GET / HTTP/1.1\r\nHost: \r\n\r\n", ErrMalformedRequest, "empty host"},
		{"Host with userinfo", "GET / HTTP/1.1\r\nHost: allowed.example@evil.example\r\n\r\n", ErrMalformedRequest, "byte 0x40"},
		{"Host with path", "GET / HTTP/1.1\r\nHost: a.example/x\r\n\r\n", ErrMalformedRequest, "byte 0x2f"},
		{"Host with NUL", "GET / HTTP/1.1\r\nHost: a.example\x00.evil\r\n\r\n", ErrMalformedRequest, "control byte 0x00"},
		{"Host with two colons", "GET / HTTP/1.1\r\nHost: ::1\r\n\r\n", ErrMalformedRequest, "empty host"},
		{"Host bad port", "GET / HTTP/1.1\r\nHost: a.example:99999\r\n\r\n", ErrMalformedRequest, "port"},
		{"Host empty port", "GET / HTTP/1.1\r\nHost: a.example:\r\n\r\n", ErrMalformedRequest, "port"},
		{"Host bad IPv4", "GET / HTTP/1.1\r\nHost: 127.1\r\n\r\n", ErrMalformedRequest, "not an IPv4 address"},
		{"Host two trailing dots", "GET / HTTP/1.1\r\nHost: a.example..\r\n\r\n", ErrMalformedRequest, "empty label"},
		{"Host a dot alone", "GET / HTTP/1.1\r\nHost: .\r\n\r\n", ErrMalformedRequest, "empty label"},
		{"Host two dots alone", "GET / HTTP/1.1\r\nHost: ..:80\r\n\r\n", ErrMalformedRequest, "empty label"},
		{"Host IPv6 with zone", "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n", ErrMalformedRequest, "not an IPv6 address"},
		{"Host IPv4 in brackets", "GET / HTTP/1.1\r\nHost: [127.0.0.1]\r\n\r\n", ErrMalformedRequest, "not an IPv6 address"},
		{"Transfer_Encoding", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer_Encoding: chunked\r\n\r\n", ErrMalformedRequest, "with '_' for '-'"},
		{"absolute-form disagreeing", "GET http://evil.example/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n", ErrHostMismatch, `names host "evil.example", Host header is "allowed.example"`},
		{"absolute-form port disagreeing", "GET http://allowed.example:8080/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n", ErrHostMismatch, "port 8080"},
		{"absolute-form https vs Host :80", "GET https://a.example/ HTTP/1.1\r\nHost: a.example:80\r\n\r\n", ErrHostMismatch, "port 443"},
		{"absolute-form with userinfo", "GET http://allowed.example@evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", ErrMalformedRequest, "userinfo"},
		{"absolute-form other scheme", "GET ftp://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, `scheme "ftp"`},
		{"absolute-form empty host", "GET http:///x HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "empty host"},
		{"target without slash", "GET a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "neither a path nor an absolute URI"},
		{"target with fragment", "GET /#x HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "byte 0x23"},
		{"target with UTF-8", "GET /\xc3\xa4 HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "byte 0xc3"},
		{"asterisk with GET", "GET * HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "only OPTIONS"},
		{"CONNECT disagreeing", "CONNECT evil.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n", ErrHostMismatch, "evil.example"},
		{"CONNECT port disagreeing", "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:22\r\n\r\n", ErrHostMismatch, "port 443"},
		{"CONNECT without port", "CONNECT a.example HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "no port"},
		{"CONNECT origin-form", "CONNECT / HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "not host:port"},
		{"CONNECT with body", "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\n", ErrMalformedRequest, "CONNECT request with a body"},
		{"CL and TE", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", ErrMalformedRequest, "both Content-Length and Transfer-Encoding"},
		{"TE and CL", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", ErrMalformedRequest, "both Transfer-Encoding and Content-Length"},
		{"conflicting CL headers", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", ErrMalformedRequest, "conflicting Content-Length values 3 and 4"},
		{"CL list", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3, 3\r\n\r\n", ErrMalformedRequest, "not a number"},
		{"CL not a number", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: +3\r\n\r\n", ErrMalformedRequest, "not a number"},
		{"CL empty", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length:\r\n\r\n", ErrMalformedRequest, "not a number"},
		{"CL too large", "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 9999999999999999999\r\n\r\n", ErrMalformedRequest, "at most 18 digits"},
		{"Content_Length", "POST / HTTP/1.1\r\nHost: a.example\r\nContent_Length: 3\r\n\r\n", ErrMalformedRequest, "with '_' for '-'"},
		{"TE not chunked last", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", ErrMalformedRequest, "coding after chunked"},
		{"TE chunked twice", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ErrMalformedRequest, "coding after chunked"},
		{"TE without chunked", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip\r\n\r\n", ErrMalformedRequest, "does not end in chunked"},
		{"TE empty element", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: , chunked\r\n\r\n", ErrMalformedRequest, "empty or parameterized"},
		{"TE with parameter", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", ErrMalformedRequest, "empty or parameterized"},
		{"TE xchunked", "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: xchunked\r\n\r\n", ErrMalformedRequest, "does not end in chunked"},
		{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", ErrMalformedRequest, "HTTP/1.0"},
		{"bare LF", "GET / HTTP/1.1\nHost: a.example\n\n", ErrMalformedRequest, "bare LF"},
		{"bare LF in header", "GET / HTTP/1.1\r\nHost: a.example\nX: y\r\n\r\n", ErrMalformedRequest, "bare LF"},
		{"bare LF at end", "GET / HTTP/1.1\r\nHost: a.example\r\n\n", ErrMalformedRequest, "bare LF"},
		{"bare CR", "GET / HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n", ErrMalformedRequest, "bare CR"},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a.example\r\nX: a\r\n b\r\n\r\n", ErrMalformedRequest, "obs-fold"},
		{"space before colon", "GET / HTTP/1.1\r\nHost : evil.example\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "whitespace before its colon"},
		{"no colon", "GET / HTTP/1.1\r\nHost a.example\r\n\r\n", ErrMalformedRequest, "no colon"},
		{"empty header name", "GET / HTTP/1.1\r\n: x\r\n\r\n", ErrMalformedRequest, "empty name"},
		{"control in value", "GET / HTTP/1.1\r\nHost: a.example\r\nX: a\x01b\r\n\r\n", ErrMalformedRequest, "control byte 0x01"},
		{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "only HTTP/1.0 and HTTP/1.1"},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ErrH2CPreface, "h2c with prior knowledge"},
		{"HTTP/2 version", "GET / HTTP/2.0\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "only HTTP/1.0 and HTTP/1.1"},
		{"HTTP/0.9", "GET /\r\n\r\n", ErrMalformedRequest, "no HTTP version"},
		{"double space", "GET  / HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "empty request target"},
		{"trailing space", "GET / HTTP/1.1 \r\nHost: a.example\r\n\r\n", ErrMalformedRequest, "only HTTP/1.0"},
		{"leading empty line", "\r\nGET / HTTP/1.1\r\nHost: a.example\r\n\r\n", ErrNotHTTP, ""},
		{"RTSP", "DESCRIBE / RTSP/1.0\r\n\r\n", ErrNotHTTP, "RTSP"},
		{"SSH banner", "SSH-2.0-OpenSSH_9.2\r\n", ErrNotHTTP, ""},
		{"binary", "\x16\x03\x01\x02\x00", ErrNotHTTP, "byte 0x16"},
		{"too large", "GET / HTTP/1.1\r\nHost: a.example\r\nX: " + strings.Repeat("a", MaxHeadSize) + "\r\n\r\n", ErrMalformedRequest, "longer than 16384"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRequestHead([]byte(tc.in))
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("ParseRequestHead(%q) = %+v, %v; want an error wrapping %v containing %q", tc.in, got, err, tc.is, tc.text)
			}
		})
	}
}

// TestParseRequestHeadEarlyErrors checks that a bad line is reported before
// the head is complete, so the proxy need not wait for more.
func TestParseRequestHeadEarlyErrors(t *testing.T) {
	for _, in := range []string{
		"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n",
		"GET / HTTP/1.1\nHost",
		"GET / HTTP/3\r\n",
		"\x00\x01",
		"GE\r",
	} {
		if _, err := ParseRequestHead([]byte(in)); err == nil || err == ErrIncomplete {
			t.Errorf("ParseRequestHead(%q) = %v; want an error now", in, err)
		}
	}
}

func TestParseRequestHeadMaxSize(t *testing.T) {
	head := "GET / HTTP/1.1\r\nHost: a.example\r\nX: "
	head += strings.Repeat("a", MaxHeadSize-len(head)-4) + "\r\n\r\n"
	if len(head) != MaxHeadSize {
		t.Fatal(len(head))
	}
	if h, err := ParseRequestHead([]byte(head + "more")); err != nil || h.Len != MaxHeadSize {
		t.Fatalf("head of MaxHeadSize: %+v, %v", h, err)
	}
	long := head[:len(head)-4] + "a\r\n\r\n"
	if _, err := ParseRequestHead([]byte(long[:MaxHeadSize])); !errors.Is(err, ErrMalformedRequest) {
		t.Fatalf("MaxHeadSize bytes without the end of the head: %v", err)
	}
	if _, err := ParseRequestHead([]byte(long[:MaxHeadSize-1])); err != ErrIncomplete {
		t.Fatalf("MaxHeadSize-1 bytes: %v", err)
	}
}

func TestRequestHeadName(t *testing.T) {
	for in, want := range map[string]string{
		"GET / HTTP/1.1\r\nHost: A.example\r\n\r\n":                     "a.example",
		"GET http://b.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n":     "b.example",
		"GET http://c.example/ HTTP/1.0\r\n\r\n":                        "c.example",
		"CONNECT d.example:443 HTTP/1.1\r\nHost: d.example:443\r\n\r\n": "d.example",
		"GET / HTTP/1.0\r\n\r\n":                                        "",
	} {
		h, err := ParseRequestHead([]byte(in))
		if err != nil || h.Name() != want {
			t.Errorf("%q: Name() = %q, %v; want %q", in, h.Name(), err, want)
		}
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Protocol
		err  error
	}{
		{"", ProtoUnknown, ErrIncomplete},
		{"\x16", ProtoUnknown, ErrIncomplete},
		{"\x16\x03", ProtoTLS, nil},
		{"\x16\x03\x01\x02\x00\x01", ProtoTLS, nil},
		{"\x16\x02", ProtoUnknown, nil},
		{"\x17\x03\x03", ProtoUnknown, nil},
		{"G", ProtoUnknown, ErrIncomplete},
		{"GET", ProtoUnknown, ErrIncomplete},
		{"GET ", ProtoHTTP, nil},
		{"GET / HTTP/1.1\r\n", ProtoHTTP, nil},
		{"M-SEARCH * HTTP/1.1\r\n", ProtoHTTP, nil},
		{"BASELINE-CONTROL / HTTP/1.1\r\n", ProtoHTTP, nil},
		{"get / HTTP/1.1\r\n", ProtoUnknown, nil},
		{" GET", ProtoUnknown, nil},
		{"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", ProtoUnknown, nil},
		{"ABCDEFGHIJKLMNOPQRST", ProtoUnknown, ErrIncomplete},
		{"ABCDEFGHIJKLMNOPQRST ", ProtoHTTP, nil},
		{"ABCDEFGHIJKLMNOPQRSTU", ProtoUnknown, nil},
		{"P", ProtoUnknown, ErrIncomplete},
		{"PRI", ProtoUnknown, ErrIncomplete},
		{"PRI ", ProtoUnknown, ErrIncomplete},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r", ProtoUnknown, ErrIncomplete},
		{h2Preface, ProtoH2C, nil},
		{h2Preface + "\x00\x00\x12\x04", ProtoH2C, nil},
		{"PRI / HTTP/1.1\r\n", ProtoHTTP, nil},
		{"PRI * HTTP/2.0\r\n\r\nXX", ProtoHTTP, nil},
		{"\x00\x00\x00", ProtoUnknown, nil},
	} {
		got, err := Detect([]byte(tc.in))
		if got != tc.want || err != tc.err {
			t.Errorf("Detect(%q) = %v, %v; want %v, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	for p, s := range map[Protocol]string{ProtoUnknown: "unknown", ProtoTLS: "tls", ProtoHTTP: "http", ProtoH2C: "h2c", 42: "unknown"} {
		if p.String() != s {
			t.Errorf("Protocol(%d).String() = %q, want %q", int(p), p.String(), s)
		}
	}
}

// TestDetectGoldenHellos checks that every captured hello is TLS from its
// second byte on.
func TestDetectGoldenHellos(t *testing.T) {
	for _, h := range goldenHellos(t) {
		for n := 2; n <= len(h.data); n += 97 {
			if p, err := Detect(h.data[:n]); p != ProtoTLS || err != nil {
				t.Fatalf("%s: Detect(first %d bytes) = %v, %v", h.name, n, p, err)
			}
		}
	}
}

func TestIsTokenChar(t *testing.T) {
	const tchars = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	for c := range 256 {
		if want := strings.IndexByte(tchars, byte(c)) >= 0; isTokenChar(byte(c)) != want {
			t.Errorf("isTokenChar(0x%02x) = %v, want %v", c, !want, want)
		}
	}
}
