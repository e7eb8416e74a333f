package proxy

import (
	"fmt"
	"io"
	"net"
	"time"
)

// tlsAccessDenied is a TLS alert record: fatal (2), access_denied (49).
// The record version 3.3 is what every TLS 1.2 and 1.3 peer accepts.
var tlsAccessDenied = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49}

// lingerAfterDeny bounds how long a denied connection is drained after the
// refusal is written, so the client reads the alert or 403 before the close
// instead of a reset that would discard it.
const lingerAfterDeny = time.Second

// denyTLS sends a fatal access_denied alert and closes gracefully.
func denyTLS(c *net.TCPConn) {
	c.SetWriteDeadline(time.Now().Add(lingerAfterDeny))
	c.Write(tlsAccessDenied)
	closeGracefully(c)
}

// denyHTTP answers a plaintext request with a 403 whose body names the host
// and the sandbox, and closes gracefully.
func denyHTTP(c *net.TCPConn, host, sandbox, reason string) {
	body := fmt.Sprintf("doorman: access to %q is denied by the policy of sandbox %q (%s)\n", host, sandbox, reason)
	if host == "" {
		body = fmt.Sprintf("doorman: this request is denied by the policy of sandbox %q (%s)\n", sandbox, reason)
	}
	resp := fmt.Sprintf("HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Doorman-Sandbox: %s\r\n\r\n%s",
		len(body), sandbox, body)
	c.SetWriteDeadline(time.Now().Add(lingerAfterDeny))
	io.WriteString(c, resp)
	closeGracefully(c)
}

// denyReset refuses a connection of an unknown protocol with a TCP reset.
func denyReset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// closeGracefully sends FIN and reads what the client still sends (briefly),
// so that unread input does not turn the close into a reset that would hide
// the refusal from the client.
func closeGracefully(c *net.TCPConn) {
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(lingerAfterDeny))
	io.Copy(io.Discard, c)
	c.Close()
}
