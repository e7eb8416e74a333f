package proxy

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/doorman-net/doorman/proxy/sniff"
)

// upstreamDrain bounds how long, after a later request on a keep-alive
// connection is refused, the proxy waits for the upstream to finish the
// responses it owes for the earlier requests before writing the 403.
const upstreamDrain = 5 * time.Second

// upgradeAnswerTimeout bounds the wait for the server's answer to a
// WebSocket handshake or CONNECT request before the proxy knows whether
// the connection stays HTTP.
const upgradeAnswerTimeout = 30 * time.Second

// bodySlice is the most response body one splice moves before the bulk
// counter hears of it.
const bodySlice = 1 << 20

// httpResult is what relayHTTP reports for the decision line.
type httpResult struct {
	up, down   int64
	denied     string // why the connection was refused or cut, "" if it was not
	deniedName string
	// notes say what the relay refused on the way without ending the
	// connection ("h2c upgrade refused"), once each.
	notes []string
}

func (r *httpResult) note(s string) {
	if !slices.Contains(r.notes, s) {
		r.notes = append(r.notes, s)
	}
}

// relayHTTP relays a plaintext HTTP/1.x connection request by request, so
// that every request's Host is checked, not only the first (gost checks
// only the first, so a keep-alive connection could switch hosts).
//
// Requests pass through sniff.RequestReader and responses through
// sniff.ResponseReader, both framing exactly as RFC 9112 says, bytes
// unchanged. A head leaves in one write with the body bytes that arrived
// with it, so that a small message stays one segment (a runtime that pays
// per packet, gVisor's, paid for a second), and never waits for body bytes
// still to come: a streamed body flows as it arrives. Each forwarded request is queued, before its head is written
// upstream, with what its answer may do; each final response takes the
// oldest from the queue. So the proxy knows which request a response
// answers, and no byte inside a body can pass for a status line: the
// connection stops being HTTP only when the server answers a WebSocket
// handshake with 101 or a CONNECT with 2xx, and then becomes opaque in
// both directions. Any other request for a protocol switch (h2c above
// all, whose HTTP/2 requests would name any authority) is forwarded
// without its Upgrade and HTTP2-Settings fields, so the server answers in
// HTTP/1.1, as RFC 9110 7.8 lets it. A request the policy does not admit
// ends the connection with a 403 once the earlier responses are through;
// a response stream that cannot be framed, or that answers what was not
// asked, cuts the connection.
func (p *Proxy) relayHTTP(t *tracked) httpResult {
	c, up := t.client, t.upstream
	var res httpResult
	q := newExchanges()
	downDone := make(chan downResult, 1)
	go func() { downDone <- p.relayResponses(c, up, q) }()
	var down *downResult // set once downDone has been received

	rr := sniff.NewRequestReader(c)
	opaque := false
requests:
	for {
		head, raw, err := rr.Next()
		if err != nil {
			switch {
			case t.killReason() != "":
			case errors.Is(err, sniff.ErrH2CPreface):
				res.denied = "h2c prior knowledge after HTTP/1.x requests"
			case errors.Is(err, sniff.ErrMalformedRequest), errors.Is(err, sniff.ErrNotHTTP):
				res.denied = fmt.Sprintf("malformed request: %v", err)
			}
			break
		}
		name, nerr := normalizeSniffed(head.Name())
		if nerr != nil {
			res.denied, res.deniedName = nerr.Error(), head.Name()
			break
		}
		if d := decideHTTP(p.Policy(), name, t.dst); d.verdict == Deny {
			res.denied, res.deniedName = "request for "+nameOr(name, "no name")+": "+d.reason, nameOr(name, head.Name())
			break
		}
		t.setName(name)
		x := &exchange{method: head.Method, websocket: head.WebSocket}
		if head.WebSocket || head.Method == "CONNECT" {
			x.switched = make(chan bool, 1)
		}
		if head.UpgradeTo != "" && !head.WebSocket {
			raw = sniff.RemoveFields(raw, "Upgrade", "HTTP2-Settings")
			res.note(head.UpgradeTo + " upgrade refused")
		}
		if !q.push(x) {
			break // the responses have ended: nothing more can be answered
		}
		// The head and the body bytes read with it leave in one write;
		// the head does not wait for a body still to come.
		bn, err := rr.CopyBodyAfter(up, raw)
		res.up += bn
		if err != nil {
			if errors.Is(err, sniff.ErrMalformedRequest) {
				res.denied, res.deniedName = fmt.Sprintf("malformed request: %v", err), name
			}
			break
		}
		if x.switched == nil {
			continue
		}
		// Only a switch the server made (101 to a WebSocket handshake,
		// 2xx to CONNECT) ends HTTP: then the rest is opaque bytes. An
		// answer that declines leaves the connection HTTP, and the next
		// request's Host is checked like any other.
		timer := time.NewTimer(upgradeAnswerTimeout)
		select {
		case switched := <-x.switched:
			timer.Stop()
			if switched {
				opaque = true
				n, _ := up.Write(rr.Buffered())
				res.up += int64(n)
				bn, _ := pipe(up, c, p.bulk)
				res.up += bn
				break requests
			}
		case d := <-downDone:
			timer.Stop()
			down = &d
			break requests
		case <-timer.C:
			res.denied, res.deniedName = "no answer to an upgrade request", name
			break requests
		}
	}

	if res.denied == "" {
		if !opaque {
			up.CloseWrite()
		}
		if down == nil {
			d := <-downDone
			down = &d
		}
		res.down = down.written
		if down.fault != "" {
			res.denied, res.deniedName = down.fault, t.currentName()
		}
		return res
	}

	// Refuse: let the upstream finish the responses it owes, stop the
	// response side between two responses, then answer with the 403.
	empty, clientClosed := q.refuse()
	if down == nil {
		if empty {
			up.Close()
		} else {
			up.CloseWrite()
		}
		select {
		case d := <-downDone:
			down = &d
		case <-time.After(upstreamDrain):
			// Give up on the owed responses, also on a client that
			// does not read them.
			up.Close()
			c.SetWriteDeadline(time.Now())
			d := <-downDone
			down = &d
		}
	}
	res.down = down.written
	if down.fault != "" {
		res.note(down.fault)
	}
	if down.between && !clientClosed {
		denyHTTP(c, res.deniedName, p.sandbox, res.denied)
	}
	return res
}
