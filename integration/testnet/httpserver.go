package testnet

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
)

// Fake101Path is a path every Host's HTTP servers answer in two steps, for
// tests of a proxy that watches responses for the end of HTTP: the
// response head (200, with a Content-Length) goes out at once; its body,
// a status line "HTTP/1.1 101 Switching Protocols" with upgrade headers,
// only once the client's next request on the connection has arrived.
// A proxy that takes any "HTTP/1.1 101" line in the response stream for
// the answer to an upgrade request then sees it while that next request
// (a WebSocket upgrade, say) is outstanding. The server goes on answering
// the connection's requests as usual; none of them is upgraded.
const Fake101Path = "/fake-101"

// fake101Body is the body served at Fake101Path.
const fake101Body = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"

// fake101Timeout bounds how long the server waits for the next request.
const fake101Timeout = 30 * time.Second

// serveFake101 takes over the connection of a request for Fake101Path.
func (h *Host) serveFake101(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cannot take over this connection", http.StatusInternalServerError)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(fake101Timeout))
	fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", len(fake101Body))
	if rw.Flush() != nil {
		return
	}
	next, err := http.ReadRequest(rw.Reader)
	if err != nil {
		return
	}
	rw.WriteString(fake101Body)
	if rw.Flush() != nil {
		return
	}
	// Then plain HTTP/1.1, one request after another, on this connection.
	for req := next; ; {
		h.count(req.Host)
		_, _ = io.Copy(io.Discard, req.Body)
		body := fmt.Sprintf("%s %s %s %s\n", h.name, conn.LocalAddr(), req.Method, req.URL.Path)
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n%s: %s\r\n%s: %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s",
			HeaderHost, req.Host, HeaderRemote, conn.RemoteAddr(), HeaderProto, req.Proto, len(body), body)
		if rw.Flush() != nil {
			return
		}
		if req, err = http.ReadRequest(rw.Reader); err != nil {
			return
		}
	}
}

// h2cUpgrade hands requests that ask to upgrade to h2c (RFC 7540 3.2:
// Upgrade: h2c, Connection: Upgrade, HTTP2-Settings) to x/net's h2c, which
// answers 101 and serves the connection as HTTP/2 with next; every other
// request goes to next directly.
func h2cUpgrade(next http.Handler) http.Handler {
	upgrade := h2c.NewHandler(next, &http2.Server{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && httpguts.HeaderValuesContainsToken(r.Header["Upgrade"], "h2c") {
			upgrade.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
