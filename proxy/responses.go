package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/doorman-net/doorman/proxy/sniff"
)

// exchange is a request forwarded upstream whose final response has not
// been relayed yet.
type exchange struct {
	method string
	// websocket: the request is a WebSocket handshake, which a 101 may
	// answer.
	websocket bool
	// switched, for a WebSocket handshake or a CONNECT, receives whether
	// the final answer switched the connection (the rest is opaque) or
	// left it HTTP. nil for other requests.
	switched chan bool
}

// maxPipelined bounds the requests forwarded and not answered yet on one
// connection; the request side waits for answers beyond it, so that a
// client pipelining tiny requests to a slow server cannot make the queue
// grow without bound.
const maxPipelined = 1024

// exchanges is the queue of forwarded requests, oldest first, shared by
// the two directions of one connection.
type exchanges struct {
	mu   sync.Mutex
	room *sync.Cond // signalled when the queue shrinks or the responses end
	q    []*exchange
	// refusing: the request side refuses a request once the responses
	// owed are through; the response side then stops.
	refusing bool
	// clientClosed: the response side has half-closed the client's end
	// (the responses ended), so no 403 can follow.
	clientClosed bool
	// ended: the response side has returned; nothing more is answered.
	ended bool
}

func newExchanges() *exchanges {
	q := &exchanges{}
	q.room = sync.NewCond(&q.mu)
	return q
}

// push queues x, waiting while maxPipelined requests are outstanding; the
// request side calls it before it writes x's head. It returns false if
// the response side has ended.
func (q *exchanges) push(x *exchange) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.q) >= maxPipelined && !q.ended {
		q.room.Wait()
	}
	if q.ended {
		return false
	}
	q.q = append(q.q, x)
	return true
}

// end records that the response side has returned.
func (q *exchanges) end() {
	q.mu.Lock()
	q.ended = true
	q.room.Broadcast()
	q.mu.Unlock()
}

// front returns the oldest request not answered yet, nil if none is.
func (q *exchanges) front() *exchange {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.q) == 0 {
		return nil
	}
	return q.q[0]
}

// pop drops the oldest request, answered, and reports whether the
// response side should stop: the queue is empty and a refusal waits.
func (q *exchanges) pop() (stop bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.q[0] = nil
	q.q = q.q[1:]
	q.room.Signal()
	return q.refusing && len(q.q) == 0
}

// refuse marks the connection as refusing and reports whether no request
// is outstanding and whether the client's end is already half-closed.
func (q *exchanges) refuse() (empty, clientClosed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refusing = true
	return len(q.q) == 0, q.clientClosed
}

// stopping reports whether a refusal waits.
func (q *exchanges) stopping() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.refusing
}

// closeClient half-closes c, the client's end, at the end of the
// responses, unless a refusal is to be written there.
func (q *exchanges) closeClient(c *net.TCPConn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.refusing {
		c.CloseWrite()
		q.clientClosed = true
	}
}

// downResult is how the response side ended.
type downResult struct {
	written int64
	// fault says why the response stream could not be relayed and the
	// connection was cut; "" if it was not.
	fault string
	// between: it stopped between two responses, so the client can read
	// a 403 that follows as a response of its own.
	between bool
}

// relayResponses relays the upstream's responses to the client, pairing
// each with the oldest request in q, until the upstream ends, the
// connection switches protocols, or a refusal waits and nothing is owed.
func (p *Proxy) relayResponses(c, up *net.TCPConn, q *exchanges) (res downResult) {
	w := &bulkWriter{c: c, bulk: p.bulk}
	defer func() {
		res.written = w.n
		q.end()
	}()
	cut := func(why string) downResult {
		c.SetLinger(0)
		c.Close()
		up.Close()
		return downResult{fault: why}
	}
	rr := sniff.NewResponseReader(up)
	for {
		if err := rr.Wait(); err != nil {
			// The upstream closed (or was closed) between responses.
			q.closeClient(c)
			return downResult{between: true}
		}
		x := q.front()
		if x == nil {
			if q.stopping() {
				return downResult{between: true}
			}
			// A server answers what it received, and every request is
			// queued before it is written.
			return cut("response framing: a response with no request outstanding")
		}
		head, raw, err := rr.Next(x.method)
		if err != nil {
			if errors.Is(err, sniff.ErrMalformedResponse) {
				return cut(fmt.Sprintf("response framing: %v", err))
			}
			q.closeClient(c) // closed inside a head: nothing of it was written
			return downResult{between: true}
		}
		if head.StatusCode == 101 {
			switch {
			case !x.websocket:
				return cut(fmt.Sprintf("response framing: 101 Switching Protocols to a %s request that asked for no WebSocket upgrade", x.method))
			case !strings.EqualFold(head.Upgrade, "websocket"):
				return cut(fmt.Sprintf("response framing: 101 Switching Protocols to %q, not websocket", head.Upgrade))
			}
		}
		framing := head.Framing(x.method)
		if framing == sniff.FramingSwitch && q.stopping() {
			// A switch after the request side gave up waiting for it
			// (no answer in time): the refusal stands.
			return downResult{}
		}
		if head.Interim() {
			// An interim response has no body, and the final one may
			// be long in coming (100 Continue waits for the request's
			// body): it goes out alone, now.
			if _, err := w.Write(raw); err != nil {
				return downResult{}
			}
			continue
		}
		if framing == sniff.FramingSwitch {
			// The head and the new protocol's first bytes, if any came
			// with it, in one write.
			if _, err := w.Write(append(append(make([]byte, 0, len(raw)+len(rr.Buffered())), raw...), rr.Buffered()...)); err != nil {
				return downResult{}
			}
			if x.switched != nil {
				x.switched <- true
			}
			q.pop()
			n, _ := pipe(c, up, p.bulk)
			w.n += n
			return downResult{}
		}
		if x.switched != nil {
			x.switched <- false
		}
		// The head leaves with the body bytes read with it, in one
		// write (one segment for a small response, where two cost a
		// runtime that pays per packet, gVisor's, more than the host
		// kernel), and never waits for body bytes still to come.
		if _, err := rr.CopyBodyAfter(w, raw); err != nil {
			if errors.Is(err, sniff.ErrMalformedResponse) {
				return cut(fmt.Sprintf("response framing: %v", err))
			}
			return downResult{}
		}
		if framing == sniff.FramingClose {
			// The body ran until the upstream closed: so does the
			// connection.
			q.closeClient(c)
			return downResult{}
		}
		if q.pop() {
			return downResult{between: true}
		}
	}
}

// bulkWriter writes responses to the client's connection and counts the
// bytes for the bulk scheduler. It keeps io.Copy's splice: ReadFrom hands
// the connection to the client's *net.TCPConn in slices of at most
// bodySlice bytes, counting each.
type bulkWriter struct {
	c    *net.TCPConn
	bulk *bulkSched
	n    int64 // bytes written
}

func (w *bulkWriter) Write(b []byte) (int, error) {
	n, err := w.c.Write(b)
	w.n += int64(n)
	w.bulk.add(int64(n))
	return n, err
}

// ReadFrom copies r to the connection until r ends (or, for an
// *io.LimitedReader, until its limit), splicing where r is a TCP
// connection.
func (w *bulkWriter) ReadFrom(r io.Reader) (int64, error) {
	src, budget := r, int64(-1)
	if lr, ok := r.(*io.LimitedReader); ok {
		if lr.N <= 0 {
			return 0, nil
		}
		src, budget = lr.R, lr.N
		defer func() { lr.N = budget }()
	}
	var total int64
	for budget != 0 {
		want := int64(bodySlice)
		if budget > 0 {
			want = min(want, budget)
		}
		n, err := w.c.ReadFrom(&io.LimitedReader{R: src, N: want})
		total += n
		w.n += n
		w.bulk.add(n)
		if budget > 0 {
			budget -= n
		}
		if err != nil || n < want {
			return total, err
		}
	}
	return total, nil
}
