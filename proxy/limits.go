package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/sniff"
)

// The caps of one proxy (see Config) keep one sandbox from taking what
// its neighbours need of the host it shares with them: descriptors and
// memory (connections), CPU and memory for connections that trickle
// their first bytes (pending connections and their bytes), and the
// ephemeral ports of the host's namespace, from which every proxy dials
// (connections per upstream). What exceeds a cap is refused in the
// client's own protocol, so that it says what happened: a TLS client
// gets a fatal internal_error alert, an HTTP client a 503, anything else
// a reset. Each refusal is a limit line (decisionlog.Limit), which the
// daemon's Aggregator collapses to two lines an interval.

// tlsInternalError is a TLS alert record: fatal (2), internal_error (80),
// what a server says when it cannot go on for reasons of its own.
var tlsInternalError = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 80}

// maxRefusing bounds the connections over a cap being refused at once: a
// refusal waits up to lingerAfterDeny for the first bytes, to answer in
// their protocol, and as long again for the client to read it. Past it,
// a connection over a cap is reset at once.
const maxRefusing = 64

// refuseOverCap refuses c, over the cap limit of value max, in the
// protocol of its first bytes: what it sent already, or what it sends
// within lingerAfterDeny.
func (p *Proxy) refuseOverCap(c *net.TCPConn, limit string, max int64) {
	var b [16]byte
	n, _ := peekSome(c, b[:], time.Now().Add(lingerAfterDeny))
	proto, _ := sniff.Detect(b[:n])
	p.refuseLimited(c, proto, limit, max)
}

// refuseLimited refuses c, whose protocol is proto, over the cap limit,
// and logs it.
func (p *Proxy) refuseLimited(c *net.TCPConn, proto sniff.Protocol, limit string, max int64) {
	p.limited.Add(1)
	decisionlog.Limit{Sandbox: p.sandbox, Limit: limit, Max: max}.Log(context.Background(), p.logger)
	switch proto {
	case sniff.ProtoTLS:
		c.SetWriteDeadline(time.Now().Add(lingerAfterDeny))
		c.Write(tlsInternalError)
		closeGracefully(c)
	case sniff.ProtoHTTP:
		body := fmt.Sprintf("doorman: sandbox %q is at its limit of %d (%s); try again later\n", p.sandbox, max, limit)
		resp := fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\nX-Doorman-Sandbox: %s\r\n\r\n%s",
			len(body), p.sandbox, body)
		c.SetWriteDeadline(time.Now().Add(lingerAfterDeny))
		io.WriteString(c, resp)
		closeGracefully(c)
	default:
		denyReset(c)
	}
}

// refuseAtAccept refuses a connection accepted over the connection cap,
// on a goroutine of its own, or resets it at once if maxRefusing are
// being refused already.
func (p *Proxy) refuseAtAccept(c *net.TCPConn) {
	if p.refusing.Add(1) > maxRefusing {
		p.refusing.Add(-1)
		p.limited.Add(1)
		decisionlog.Limit{Sandbox: p.sandbox, Limit: decisionlog.LimitConnections, Max: p.maxConns}.Log(context.Background(), p.logger)
		denyReset(c)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.refusing.Add(-1)
		p.refuseOverCap(c, decisionlog.LimitConnections, p.maxConns)
	}()
}

// peekSome peeks at what c has sent, into b, waiting until deadline for
// a first byte.
func peekSome(c *net.TCPConn, b []byte, deadline time.Time) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	c.SetReadDeadline(deadline)
	defer c.SetReadDeadline(time.Time{})
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err != nil {
		return 0, err
	}
	return max(n, 0), rerr
}

// growPending charges n more bytes to the connections not decided yet,
// unless that would take them past the cap.
func (p *Proxy) growPending(n int) bool {
	if p.maxPendingBytes <= 0 {
		p.pendingBytes.Add(int64(n))
		return true
	}
	for {
		cur := p.pendingBytes.Load()
		if cur+int64(n) > p.maxPendingBytes {
			return false
		}
		if p.pendingBytes.CompareAndSwap(cur, cur+int64(n)) {
			return true
		}
	}
}

// timeWait is how long the kernel keeps a connection the proxy closed
// first (TCP_TIMEWAIT_LEN): its source port stays taken for that
// destination until then.
const timeWait = 60 * time.Second

// waitSlots divide timeWait into the periods upstreamUse counts closes by.
const waitSlots = 6

// upstreamSlots counts this proxy's connections to each upstream address
// and port, open or closed by the proxy less than timeWait ago, against
// the cap Config.MaxPerUpstream.
//
// The kernel picks a connection's source port among the ephemeral ports
// not in use for the same destination (address and port): one sandbox
// holding many connections to one upstream, or churning them (each one the
// proxy closes first stays in TIME_WAIT for a minute), would leave its
// neighbours' proxies, which dial from the same namespace and address,
// with "cannot assign requested address" for that upstream. Bounding each
// sandbox's share of that range bounds what one can take from the others.
type upstreamSlots struct {
	max int // 0: no cap

	mu   sync.Mutex
	dsts map[netip.AddrPort]*upstreamUse
}

// upstreamUse is the use of one upstream.
type upstreamUse struct {
	open   int
	closed [waitSlots]int   // closes by the proxy, per period
	period [waitSlots]int64 // the period each count is of
}

// periodOf is the period of t: timeWait/waitSlots long.
func periodOf(t time.Time) int64 { return t.UnixNano() / int64(timeWait/waitSlots) }

// inUse counts the open connections and those closed within timeWait.
func (u *upstreamUse) inUse(now int64) int {
	n := u.open
	for i := range u.closed {
		if u.period[i] > now-waitSlots {
			n += u.closed[i]
		}
	}
	return n
}

// acquire counts a new connection to ap, unless the cap is reached.
func (s *upstreamSlots) acquire(ap netip.AddrPort, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.dsts[ap]
	if u == nil {
		u = &upstreamUse{}
		if s.dsts == nil {
			s.dsts = make(map[netip.AddrPort]*upstreamUse)
		}
		s.dsts[ap] = u
	}
	if s.max > 0 && u.inUse(periodOf(now)) >= s.max {
		return false
	}
	u.open++
	return true
}

// release ends a connection to ap that acquire counted; closedFirst says
// the proxy closed it before the upstream did, so that its port stays
// taken for timeWait.
func (s *upstreamSlots) release(ap netip.AddrPort, closedFirst bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.dsts[ap]
	if u == nil {
		return
	}
	u.open--
	if closedFirst && s.max > 0 {
		per := periodOf(now)
		i := per % waitSlots
		if u.period[i] != per {
			u.period[i], u.closed[i] = per, 0
		}
		u.closed[i]++
	}
	if u.inUse(periodOf(now)) == 0 {
		delete(s.dsts, ap)
	}
}

// sweep forgets the upstreams with nothing open or waiting.
func (s *upstreamSlots) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	per := periodOf(now)
	for ap, u := range s.dsts {
		if u.inUse(per) == 0 {
			delete(s.dsts, ap)
		}
	}
}

// limitError is a connection refused by a cap on its way upstream.
type limitError struct {
	limit string
	max   int64
}

func (e *limitError) Error() string {
	return fmt.Sprintf("over the %s cap of %d", e.limit, e.max)
}

// idleFor returns how long c has carried no data either way, as the kernel
// counts it (TCP_INFO), or 0 if it cannot tell.
func idleFor(c *net.TCPConn) time.Duration {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var info *unix.TCPInfo
	rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err != nil || info == nil {
		return 0
	}
	return time.Duration(min(info.Last_data_recv, info.Last_data_sent)) * time.Millisecond
}

// housekeeping closes the relayed connections idle for p.idleTimeout and
// forgets the upstreams whose ports are free again, until Shutdown.
func (p *Proxy) housekeeping(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-p.stopHousekeeping:
			return
		case now := <-t.C:
			p.upstreams.sweep(now)
			if p.idleTimeout > 0 {
				p.closeIdle()
			}
		}
	}
}

// closeIdle closes the relayed connections that carried no byte either
// way for the idle timeout. Their verdict stays allow; the reason says
// why they ended.
func (p *Proxy) closeIdle() {
	p.mu.Lock()
	all := make([]*tracked, 0, len(p.conns))
	for t := range p.conns {
		all = append(all, t)
	}
	p.mu.Unlock()
	for _, t := range all {
		if t.idleFor() >= p.idleTimeout {
			t.expire(decisionlog.ReasonIdle + p.idleTimeout.String())
		}
	}
}
