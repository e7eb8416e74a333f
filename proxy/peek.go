package proxy

import (
	"errors"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/sniff"
)

// maxPeek bounds how much of a stream the proxy looks at before deciding:
// the largest ClientHello the parser accepts (16 KiB) cut into 1-byte TLS
// records, which is about 96 KiB on the wire.
const maxPeek = sniff.MaxHelloWireSize

// growRcvbufAt is how much peeked data makes the proxy enlarge the socket's
// receive buffer: everything peeked stays in it, and the default buffer's
// window would close before a hello in tiny records is complete. Only such
// connections pay for it; the rest keep the kernel's autotuning.
const growRcvbufAt = 32 << 10

// grownRcvbuf is the receive buffer then asked for (the kernel doubles it
// for its bookkeeping).
const grownRcvbuf = 256 << 10

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
	grown := false
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
		if n >= growRcvbufAt && !grown {
			grown = true
			rc.Control(func(fd uintptr) {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, grownRcvbuf)
			})
		}
		have = n
	}
}
