package inspect

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"golang.org/x/sync/semaphore"
)

// A body a rule or a rule set reads is read whole into memory: what one
// request, and all of a sandbox's together, may hold that way is bounded
// here.

// bodyBufStart is the most a body buffer takes before the bytes that
// fill it arrive: a declared length is a claim, and a client that
// declares the limit and sends a trickle holds only what it sent.
const bodyBufStart = 64 << 10

// bodyIdleTimeout is how long a body read whole to be judged may go
// without a byte: it holds its buffer, and its share of maxHeldBodies,
// while it is read.
const bodyIdleTimeout = 30 * time.Second

// watchIdle makes each read of r's body fail once s.bodyIdle passes
// without a byte, through the connection's (HTTP/2: the stream's) read
// deadline, until done is called once the body is read whole: done
// clears the deadline, so that none outlives the read (net/http clears
// an HTTP/1.1 connection's too before it reads on while the response
// streams).
func (s *Server) watchIdle(w http.ResponseWriter, r *http.Request) (done func()) {
	if r.Body == nil || r.Body == http.NoBody {
		return func() {}
	}
	rc := http.NewResponseController(w)
	body := r.Body
	r.Body = &idleBody{ReadCloser: body, rc: rc, idle: s.bodyIdle}
	return func() {
		rc.SetReadDeadline(time.Time{})
		r.Body = body
	}
}

// idleBody is a request body read whole to be judged (see watchIdle).
type idleBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.idle))
	return b.ReadCloser.Read(p)
}

// maxHeldBodies bounds the bytes of request bodies a Server holds at
// once to judge them (read whole, and decoded): the largest one a host
// may set (conf's max-body bound, 64 MiB), or a rule set's 32 MiB and
// its decoding. Past it a request gets 503 rather than the proxy its
// cgroup's OOM kill, which would end the sandbox's every connection.
const maxHeldBodies = 64 << 20

// errBodiesHeld is a body that would take the bodies held past
// maxHeldBodies.
var errBodiesHeld = fmt.Errorf("the sandbox's requests in flight hold %d MiB of bodies being judged, the most doorman holds at once; try again", maxHeldBodies>>20)

// bodyHold is what one request holds of a Server's body bound: taken as
// its buffers grow, given back when its handler returns.
type bodyHold struct {
	sem *semaphore.Weighted
	n   int64
}

// take takes n bytes more of the bound, if it has them.
func (h *bodyHold) take(n int64) bool {
	if h == nil || n <= 0 {
		return true
	}
	if !h.sem.TryAcquire(n) {
		return false
	}
	h.n += n
	return true
}

// release gives back what h took.
func (h *bodyHold) release() {
	if h != nil && h.n > 0 {
		h.sem.Release(h.n)
		h.n = 0
	}
}

// readBody reads at most limit+1 bytes of a request's body, all of its
// declared length if it has one (which the caller checked against limit),
// its buffer taken from hold.
func readBody(r *http.Request, limit int64, hold *bodyHold) ([]byte, error) {
	return readUpTo(r.Body, r.ContentLength, limit, hold)
}

// readUpTo reads body: exactly declared bytes if declared >= 0 (fewer
// is io.ErrUnexpectedEOF), else at most limit+1. Its buffer grows with
// the bytes read, from bodyBufStart, never past what may be read, and
// each growth is taken from hold first (errBodiesHeld if it cannot be).
func readUpTo(body io.Reader, declared, limit int64, hold *bodyHold) ([]byte, error) {
	n := limit + 1
	if declared >= 0 {
		n = declared
	}
	start := min(n, bodyBufStart)
	if !hold.take(start) {
		return nil, errBodiesHeld
	}
	buf := make([]byte, 0, start)
	lr := io.LimitReader(body, n)
	for {
		if len(buf) == cap(buf) {
			grow := min(int64(cap(buf)), n-int64(len(buf)))
			if !hold.take(grow) {
				return nil, errBodiesHeld
			}
			old := cap(buf)
			buf = slices.Grow(buf, int(grow))
			hold.take(int64(cap(buf)-old) - grow) // what append rounded up, if the bound has room
		}
		m, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if declared >= 0 && int64(len(buf)) < declared {
		return nil, io.ErrUnexpectedEOF
	}
	return buf, nil
}
