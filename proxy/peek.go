package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/sniff"
)

// maxPeek bounds how much of a stream the proxy looks at before deciding:
// the largest ClientHello the parser accepts (16 KiB) cut into 1-byte TLS
// records, which is about 96 KiB on the wire.
const maxPeek = sniff.MaxHelloWireSize

// firstPeek is the size of the buffer a connection's first bytes are
// peeked into; it grows (doubling) only for a stream that needs more.
// Real ClientHellos, post-quantum key shares included, fit.
const firstPeek = 4 << 10

// firstPeeks are pooled: most connections never need more.
var firstPeeks = sync.Pool{New: func() any { b := make([]byte, firstPeek); return &b }}

// growRcvbufAt is how much peeked data makes the proxy enlarge the socket's
// receive buffer: everything peeked stays in it, and the default buffer's
// window would close before a hello in tiny records is complete. Only such
// connections pay for it; the rest keep the kernel's autotuning.
const growRcvbufAt = 32 << 10

// grownRcvbuf is the receive buffer then asked for (the kernel doubles it
// for its bookkeeping).
const grownRcvbuf = 256 << 10

// How the peek waits for bytes it cannot parse anything from yet (see
// peek): after coalesceAfter parses that came to nothing, it waits for the
// bytes to grow by a quarter (at least coalesceMin), or for a timer that
// starts at firstRetry and doubles up to maxRetry, whichever comes first.
const (
	coalesceAfter = 4
	coalesceMin   = 64
	firstRetry    = 50 * time.Millisecond
	maxRetry      = time.Second
)

// errPeekFull means the receive buffer held maxPeek bytes and the sniffers
// still wanted more.
var errPeekFull = errors.New("peeked the maximum without a decision")

// errPeekBudget means the buffer had to grow and grow refused it: the
// connections not decided yet hold as many bytes as they may.
var errPeekBudget = errors.New("over the budget of bytes before a decision")

// peekBuf is the buffer of one peek, and the bytes it was charged for.
type peekBuf struct {
	b      []byte
	pooled *[]byte // b's, if it came from firstPeeks
}

func (pb *peekBuf) release() {
	if pb.pooled != nil {
		firstPeeks.Put(pb.pooled)
	}
	pb.b, pb.pooled = nil, nil
}

// peek copies the bytes waiting in c's receive buffer into a buffer without
// consuming them (recvfrom with MSG_PEEK), as often as enough asks for
// more, until enough reports that it has seen enough, maxPeek bytes are
// there, the peer has closed, or the deadline passes. It returns the bytes
// peeked; grow, given the size a larger buffer needs on top of the bytes
// already charged, says whether it may have it (see Proxy's pending
// bytes), and if not peek returns errPeekBudget.
//
// Peeking rather than reading leaves the whole stream, ClientHello
// included, in the kernel, so that the relay can later splice(2) it
// unchanged. But every peek copies all the bytes again, so peek does not
// look on every segment: enough also says how many bytes it needs at
// least before it can say more (sniff.HelloNeeds for a ClientHello), and
// peek sets the socket's SO_RCVLOWAT to that, so the kernel wakes it only
// then. Where enough cannot say (an HTTP head, whose end is a blank line),
// peek waits for a quarter more bytes once a few looks came to nothing.
// Either wait also ends on a timer (50 ms, doubling to a second), so that
// a client that sent all it will send before the answer (a malformed
// header, a partial request) is decided on that instead of the deadline.
// The mark goes back to 1 before peek returns.
func peek(c *net.TCPConn, deadline time.Time, grow func(int) bool, enough func([]byte) (done bool, need int)) (*peekBuf, int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, 0, err
	}
	if !grow(firstPeek) {
		return nil, 0, errPeekBudget
	}
	pooled := firstPeeks.Get().(*[]byte)
	buf := &peekBuf{b: *pooled, pooled: pooled}
	w := &peekWait{rc: rc, lowat: 1, retry: firstRetry}
	incremental := setPeekOff(rc, 0)
	defer func() {
		c.SetReadDeadline(time.Time{})
		w.setLowat(1)
		if incremental {
			setPeekOff(rc, -1)
		}
	}()
	have := 0 // bytes in buf
	looked := false
	grown := false
	for {
		if err := c.SetReadDeadline(w.until(deadline)); err != nil {
			return buf, have, err
		}
		var rerr error
		budget, eof := true, false
		n := have
		err := rc.Read(func(fd uintptr) bool {
			// The kernel wakes a reader before the mark when the
			// receive buffer is under pressure, which a stream of tiny
			// segments puts it under: count the bytes before copying
			// any, and wait on if there are not enough yet.
			if w.lowat > 1 {
				if queued, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil && queued < w.lowat {
					return false
				}
			}
			for full := false; ; {
				// With SO_PEEK_OFF the kernel peeks from where the last
				// peek ended: only new bytes are copied.
				base := 0
				if incremental {
					base = n
				}
				if full || base == len(buf.b) {
					// The buffer is full and the socket may hold more.
					if len(buf.b) >= maxPeek {
						break
					}
					queued, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
					if err != nil || queued <= n {
						break
					}
					size := min(maxPeek, max(2*len(buf.b), queued))
					if !grow(size - len(buf.b)) {
						budget = false
						return true
					}
					nb := make([]byte, size)
					copy(nb, buf.b[:n])
					buf.release()
					buf.b = nb
				}
				m, _, e := unix.Recvfrom(int(fd), buf.b[base:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
				if e == unix.EINTR {
					continue
				}
				if rerr = e; e != nil {
					break
				}
				if m == 0 {
					eof = incremental || n == 0
					break
				}
				n = base + m
				if n < len(buf.b) {
					break
				}
				full = true
			}
			if rerr == unix.EAGAIN {
				rerr = nil
				if n == have {
					return false
				}
				return true
			}
			// Same bytes as last time: wait for the socket to become
			// readable again (Go's poller is edge-triggered, so this
			// sleeps until new data, the peer's FIN or the deadline).
			if rerr == nil && !eof && n == have && looked {
				return false
			}
			return true
		})
		if !budget {
			return buf, n, errPeekBudget
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && w.retrying(deadline) {
			have = n
			continue
		}
		if err != nil {
			return buf, n, err
		}
		if rerr != nil {
			return buf, n, rerr
		}
		if eof {
			return buf, n, io.EOF
		}
		have, looked = n, true
		done, need := enough(buf.b[:n])
		if done {
			return buf, n, nil
		}
		if n >= maxPeek {
			return buf, n, errPeekFull
		}
		if n >= growRcvbufAt && !grown {
			grown = true
			rc.Control(func(fd uintptr) {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, grownRcvbuf)
			})
		}
		w.next(n, need)
	}
}

// setPeekOff sets the socket's SO_PEEK_OFF (-1: off) and reports whether
// the kernel took it: TCP sockets have it from Linux 6.10 on.
func setPeekOff(rc interface{ Control(func(uintptr)) error }, off int) bool {
	ok := false
	rc.Control(func(fd uintptr) {
		ok = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEEK_OFF, off) == nil
	})
	return ok
}

// peekWait is how a peek waits between two looks (see peek).
type peekWait struct {
	rc      interface{ Control(func(uintptr)) error }
	lowat   int           // the socket's SO_RCVLOWAT as set
	looks   int           // looks that came to nothing
	retry   time.Duration // the timer of the next wait, if it coalesces
	retryAt time.Time     // when that wait ends, zero if it does not coalesce
}

// next sets up the wait after a look at n bytes that came to nothing;
// need is what the sniffer needs at least (0: it cannot say).
func (w *peekWait) next(n, need int) {
	w.looks++
	target := 1
	switch {
	case need > n:
		target = need
	case w.looks >= coalesceAfter:
		target = n + max(n/4, coalesceMin)
	}
	target = min(target, maxPeek)
	w.setLowat(target)
	w.retryAt = time.Time{}
	if target > n+1 {
		w.retryAt = time.Now().Add(w.retry)
	}
}

// until is the read deadline of the next wait.
func (w *peekWait) until(deadline time.Time) time.Time {
	if !w.retryAt.IsZero() && w.retryAt.Before(deadline) {
		return w.retryAt
	}
	return deadline
}

// retrying reports whether a wait that hit its read deadline only ended
// its timer, and the peek should look again: the next timer is twice as
// long, and the mark goes back to 1 so that any new byte ends the wait.
func (w *peekWait) retrying(deadline time.Time) bool {
	if w.retryAt.IsZero() || !time.Now().Before(deadline) {
		return false
	}
	w.retry = min(2*w.retry, maxRetry)
	w.retryAt = time.Time{}
	w.setLowat(1)
	return true
}

// setLowat sets the socket's SO_RCVLOWAT to v, if it is not that.
func (w *peekWait) setLowat(v int) {
	if v == w.lowat {
		return
	}
	w.rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, v) == nil {
			w.lowat = v
		}
	})
}
