package proxy

import (
	"errors"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// maxPeek bounds how much of a stream the proxy looks at before deciding.
// A 16 KiB ClientHello cut into tiny TLS records needs more than 16 KiB on
// the wire, but everything peeked stays in the socket's receive buffer, which
// must still have window left for the client to send the rest.
const maxPeek = 64 << 10

// errPeekFull means the receive buffer held maxPeek bytes and the sniffers
// still wanted more.
var errPeekFull = errors.New("peeked the maximum without a decision")

// peek copies the bytes waiting in c's receive buffer into buf without
// consuming them (recvfrom with MSG_PEEK), as often as new bytes arrive,
// until enough reports that it has seen enough, buf is full, the peer has
// closed, or the deadline passes. It returns how many bytes buf holds.
//
// Peeking rather than reading leaves the whole stream, ClientHello included,
// in the kernel, so that the relay can later splice(2) it unchanged.
func peek(c *net.TCPConn, buf []byte, deadline time.Time, enough func([]byte) bool) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	defer c.SetReadDeadline(time.Time{})
	have := -1
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if rerr == unix.EAGAIN || rerr == unix.EINTR {
				return false
			}
			// Same bytes as last time: wait for the socket to become
			// readable again (Go's poller is edge-triggered, so this
			// sleeps until new data, the peer's FIN or the deadline).
			if rerr == nil && n == have && n > 0 {
				return false
			}
			return true
		})
		if err != nil {
			return max(have, 0), err
		}
		if rerr != nil {
			return max(have, 0), rerr
		}
		if n == 0 {
			return max(have, 0), io.EOF
		}
		if enough(buf[:n]) {
			return n, nil
		}
		if n == len(buf) {
			return n, errPeekFull
		}
		have = n
	}
}
