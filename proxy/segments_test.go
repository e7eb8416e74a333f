package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
)

// These tests hold the plaintext relay to the number of TCP segments it
// makes of a message: a message whose head and body arrived together
// leaves in one write, so that a small one stays one segment (a runtime
// that pays per packet, gVisor's, paid for the second), while a head is
// never held back for body bytes that have not arrived.

// dataSegsIn is the number of segments carrying data that c has received
// (TCP_INFO tcpi_data_segs_in).
func dataSegsIn(t *testing.T, c net.Conn) uint32 {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("TCP_INFO: %v", serr)
	}
	return info.Data_segs_in
}

// A small request and a small response, each sent in one write (one
// segment on loopback), reach the other end through the proxy in one
// segment each, whatever their framing; before the head and the body were
// coalesced, each took two.
func TestHTTPSmallMessagesOneSegment(t *testing.T) {
	for _, tc := range []struct {
		name, request, response, body string
	}{
		{
			name:     "content-length",
			request:  "POST /a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 6\r\n\r\nhello\n",
			response: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nhello\n",
			body:     "hello\n",
		},
		{
			name:     "chunked",
			request:  "POST /b HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n0\r\n\r\n",
			response: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n0\r\n\r\n",
			body:     "hello\n",
		},
		{
			name:     "no body",
			request:  "GET /c HTTP/1.1\r\nHost: api.test\r\n\r\n",
			response: "HTTP/1.1 204 No Content\r\n\r\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
			upSegs := make(chan uint32, 3)
			up := e.startScripted(apiAddr, func(u *upstreamConn) {
				for range 3 {
					if u.next() == nil {
						return
					}
					upSegs <- dataSegsIn(t, u.c)
					u.send(tc.response)
				}
				u.next()
			})
			c := e.dial(up.addr)
			c.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(c)
			method, _, _ := strings.Cut(tc.request, " ")
			// The counts are totals since the connection opened: the
			// upstream receives nothing but the requests, the client
			// nothing but the responses, one at a time.
			for i := range uint32(3) {
				if _, err := io.WriteString(c, tc.request); err != nil {
					t.Fatal(err)
				}
				if resp, body := readResponse(t, br, method); body != tc.body {
					t.Fatalf("response %d: %d %q, want %q", i, resp.StatusCode, body, tc.body)
				}
				if got := dataSegsIn(t, c); got != i+1 {
					t.Errorf("%d responses reached the client in %d segments, want %d", i+1, got, i+1)
				}
				select {
				case got := <-upSegs:
					if got != i+1 {
						t.Errorf("%d requests reached the upstream in %d segments, want %d", i+1, got, i+1)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("request %d: the upstream did not read it", i)
				}
			}
			c.CloseWrite()
			up.wait(t)
		})
	}
}

// A head goes out at once even when its body has not arrived (or only a
// part of a chunk-size line has), and a streamed body's first chunk goes
// out as soon as it is read: the coalescing never waits. The upstream
// sends the rest of its response only once the client has received
// mustSee (the head, or the head and the first chunk), and gives up
// waiting after heldFor.
func TestHTTPHeadNotHeldForBody(t *testing.T) {
	const heldFor = 5 * time.Second
	const chunkedHead = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, tc := range []struct {
		name        string
		first, rest string // the upstream's response, in two writes
		mustSee     string // what the client must have before the rest is sent
		closes      bool   // the body runs until the upstream closes
	}{
		{
			name:    "content-length, body later",
			first:   "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n",
			rest:    "hello\n",
			mustSee: "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n",
		},
		{
			name:    "chunked, half a chunk-size line",
			first:   chunkedHead + "6\r",
			rest:    "\nhello\n\r\n0\r\n\r\n",
			mustSee: chunkedHead,
		},
		{
			name:    "chunked, first chunk streamed",
			first:   chunkedHead + "3\r\nhel\r\n",
			rest:    "3\r\nlo\n\r\n0\r\n\r\n",
			mustSee: chunkedHead + "3\r\nhel\r\n",
		},
		{
			name:    "close-delimited, body later",
			first:   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",
			rest:    "hello\n",
			mustSee: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",
			closes:  true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
			release := make(chan struct{})
			held := make(chan bool, 1)
			up := e.startScripted(apiAddr, func(u *upstreamConn) {
				if u.next() == nil {
					return
				}
				u.send(tc.first)
				select {
				case <-release:
					held <- false
				case <-time.After(heldFor):
					held <- true
				}
				u.send(tc.rest)
				if !tc.closes {
					u.next()
				}
			})
			c := e.dial(up.addr)
			c.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
			seen := make(chan string, 1)
			go func() {
				got := make([]byte, len(tc.mustSee))
				n, _ := io.ReadFull(c, got)
				seen <- string(got[:n])
				close(release)
			}()
			select {
			case wasHeld := <-held:
				if wasHeld {
					t.Fatalf("the client had not received %q %v after the upstream sent it: held back for the body", tc.mustSee, heldFor)
				}
			case <-time.After(2 * heldFor):
				t.Fatal("the upstream did not get to send its response")
			}
			if got := <-seen; got != tc.mustSee {
				t.Fatalf("the client received %q first, want %q", got, tc.mustSee)
			}
			want := strings.TrimPrefix(tc.first+tc.rest, tc.mustSee)
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
				t.Fatalf("then %q, %v; want %q", got, err, want)
			}
			if tc.closes {
				if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
					t.Fatalf("after a close-delimited body: %d bytes, %v; want EOF", n, err)
				}
			}
			c.CloseWrite()
			up.wait(t)
		})
	}
}

// A request's head goes upstream at once even when its body has not
// arrived: the client sends the body only once the upstream has read the
// head (as a client waiting for 100 Continue does, without the 100).
func TestHTTPRequestHeadNotHeldForBody(t *testing.T) {
	const heldFor = 5 * time.Second
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	gotHead := make(chan struct{})
	up := e.startScripted(apiAddr, func(u *upstreamConn) {
		req := u.head()
		if req == nil {
			return
		}
		close(gotHead)
		body, _ := io.ReadAll(req.Body)
		u.send(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
		u.next()
	})
	c := e.dial(up.addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: api.test\r\nContent-Length: 6\r\n\r\n")
	select {
	case <-gotHead:
	case <-time.After(heldFor):
		t.Fatalf("the upstream had not read the request head %v after the client sent it: held back for the body", heldFor)
	}
	io.WriteString(c, "hello\n")
	if resp, body := readResponse(t, bufio.NewReader(c), "POST"); resp.StatusCode != 200 || body != "hello\n" {
		t.Fatalf("answered %d %q, want the body echoed", resp.StatusCode, body)
	}
	c.CloseWrite()
	up.wait(t)
}
