package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/doorman-net/doorman/proxy/sniff"
)

// upstreamDrain bounds how long, after a later request on a keep-alive
// connection is refused, the proxy waits for the upstream to finish the
// responses it owes for the earlier requests before writing the 403.
const upstreamDrain = 5 * time.Second

// upgradeAnswerTimeout bounds the wait for the server's answer to an
// Upgrade or CONNECT request before the proxy knows whether the
// connection stays HTTP.
const upgradeAnswerTimeout = 30 * time.Second

type httpResult struct {
	up, down   int64
	denied     string // why a later request was refused, "" if none was
	deniedName string
}

// relayHTTP relays a plaintext HTTP/1.x connection request by request, so
// that every request's Host is checked, not only the first (gost checks
// only the first, so a keep-alive connection could switch hosts). Responses
// flow back by splice; requests pass through a parser that forwards each
// head and body unchanged. A request the policy does not admit ends the
// connection with a 403 once the earlier responses are through.
func (p *Proxy) relayHTTP(t *tracked) httpResult {
	c, up := t.client, t.upstream
	var res httpResult

	// Downstream: responses are copied as they come, watched only for
	// the status line that answers an Upgrade request. It does not
	// half-close the client while a refusal may still have to be written.
	var mu sync.Mutex
	refusing := false
	watch := &statusWatcher{w: c, bulk: p.bulk}
	downDone := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(watch, up)
		mu.Lock()
		if !refusing {
			c.CloseWrite()
		}
		mu.Unlock()
		downDone <- n
	}()

	rr := sniff.NewRequestReader(c)
	for {
		head, raw, err := rr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if t.killReason() == "" && !isClosedErr(err) {
				res.denied = fmt.Sprintf("malformed request: %v", err)
			}
			break
		}
		name, nerr := normalizeSniffed(head.Name())
		if nerr != nil {
			res.denied, res.deniedName = nerr.Error(), head.Name()
			break
		}
		if d := decide(p.Policy(), name, t.dst); d.verdict == Deny {
			res.denied, res.deniedName = "request for "+nameOr(name, "no name")+": "+d.reason, nameOr(name, head.Name())
			break
		}
		t.setName(name)
		if head.Upgrade {
			watch.arm()
		}
		n, err := up.Write(raw)
		res.up += int64(n)
		if err != nil {
			break
		}
		bn, err := rr.CopyBody(up)
		res.up += bn
		if err != nil {
			break
		}
		if head.Upgrade {
			// Only an upgrade the server accepted (101, or 2xx for
			// CONNECT) ends HTTP: then the rest is opaque bytes. A
			// declined one leaves the connection HTTP, and the next
			// request's Host is checked like any other.
			code, ok := watch.wait(upgradeAnswerTimeout)
			if !ok {
				res.denied, res.deniedName = "no answer to an upgrade request", name
				break
			}
			if code == 101 || (head.Method == "CONNECT" && code/100 == 2) {
				n, _ := up.Write(rr.Buffered())
				res.up += int64(n)
				bn, _ := io.Copy(up, c)
				res.up += bn
				break
			}
		}
	}

	if res.denied == "" {
		up.CloseWrite()
		watch.disarm()
		res.down = <-downDone
		return res
	}
	mu.Lock()
	refusing = true
	mu.Unlock()
	up.CloseWrite()
	select {
	case res.down = <-downDone:
	case <-time.After(upstreamDrain):
		up.Close()
		res.down = <-downDone
	}
	denyHTTP(c, res.deniedName, p.sandbox, res.denied)
	return res
}

func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed)
}
