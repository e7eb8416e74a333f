package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/internal/rawsys"
	"github.com/doorman-net/doorman/proxy/relayloop"
)

// Dialing on the relay loop. A spliced connection decided on the loop
// whose upstream addresses are known without a DNS round trip (the
// original destination, or a name in the resolver's cache) is dialed by
// the loop too: a non-blocking connect(2), watched for the socket to
// become writable, then SO_ERROR. The addresses are chosen as
// dialUpstream chooses them (the guard, the cap per upstream, in order),
// and a failure is reported the same way; only the dial itself differs
// from the goroutine path's net.Dialer, which also registers the socket in
// the runtime's netpoller, parks and wakes a goroutine, sets the same
// socket options, and is then detached from the runtime again. A name not
// in the cache is resolved and dialed on a goroutine (dialThenRelay).

// Upstream socket options, as net.Dialer{KeepAlive: 15 s} sets them.
const upstreamKeepAlive = 15 // seconds

// connecting is a spliced connection whose upstream the loop is dialing.
type connecting struct {
	client    *sniffing // the client's socket, watched
	rec       Record
	s         sniffed
	d         decision
	permitted []netip.Addr // addresses left to try
	tried     int          // addresses tried or at their cap
	full      int          // addresses at their cap
	errs      []error
	ufd       int            // the attempt's socket, -1 between attempts
	to        netip.AddrPort // the attempt's upstream, its slot held
	watch     *relayloop.Watcher
	timer     *time.Timer
	done      bool // connected, or given up
}

// dialOnLoop starts dialing the upstream of a spliced connection on the
// loop. It returns false, having done nothing, if the upstream's addresses
// need a DNS round trip.
func (p *Proxy) dialOnLoop(client *sniffing, rec Record, s sniffed, d decision) bool {
	pol, fd := client.pol, client.fd
	var addrs []netip.Addr
	if d.dialName == "" {
		addrs = []netip.Addr{rec.Dst.Addr()}
	} else if addrs = p.resolver.cached("ip", d.dialName); addrs == nil {
		return false
	}
	permitted, err := p.permittedUpstreams(pol, d, rec.Dst, addrs)
	if err != nil {
		client.unwatch()
		p.onGoroutine(fd, func(c *net.TCPConn) bool { p.dialFailed(c, rec, s, err); return false })
		return true
	}
	p.dialedOnLoop.Add(1)
	cn := &connecting{client: client, rec: rec, s: s, d: d, permitted: permitted, ufd: -1}
	cn.timer = time.AfterFunc(p.dialTimeout, func() {
		if l := p.relayLoop(); l != nil {
			l.Run(func() { p.dialTimedOut(cn) })
		}
	})
	p.nextAttempt(cn)
	return true
}

// nextAttempt dials the next address of cn that is below its cap, or
// gives up when none is left.
func (p *Proxy) nextAttempt(cn *connecting) {
	l := p.relayLoop()
	for l != nil && len(cn.permitted) > 0 {
		a := cn.permitted[0]
		cn.permitted = cn.permitted[1:]
		cn.tried++
		to := netip.AddrPortFrom(a, cn.rec.Dst.Port())
		if !p.upstreams.acquire(to, time.Now()) {
			cn.full++
			continue
		}
		ufd, err := p.connect(to)
		if err != nil {
			p.upstreams.release(to, false, time.Now())
			cn.errs = append(cn.errs, fmt.Errorf("dial tcp %v: %w", to, err))
			continue
		}
		cn.ufd, cn.to = ufd, to
		// Watched as a pair's side is, so that the pair can take the
		// registration over.
		w, err := l.Watch(ufd, relayloop.PairEvents, func(_ *relayloop.Watcher, ev uint32) {
			if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
				p.connectReady(cn, ev)
			}
		})
		if err != nil {
			p.attemptFailed(cn, err)
			continue
		}
		cn.watch = w
		return
	}
	p.giveUp(cn)
}

// connect makes a non-blocking socket with the options the goroutine
// path's dialer sets and starts connecting it to to.
func (p *Proxy) connect(to netip.AddrPort) (int, error) {
	if p.dialGuard != nil {
		if err := p.dialGuard(to); err != nil {
			return -1, err
		}
	}
	fd, err := rawsys.Socket(to.Addr())
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	rawsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	rawsys.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	rawsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, upstreamKeepAlive)
	rawsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, upstreamKeepAlive)
	if err := rawsys.Connect(fd, to); err != nil && err != unix.EINPROGRESS {
		rawsys.Close(fd)
		return -1, os.NewSyscallError("connect", err)
	}
	return fd, nil
}

// connectReady runs when cn's socket reported ev, writable or failed:
// connected, or failed. A failed connect reports an error (and a
// hang-up), so a socket that reports neither is connected without a
// getsockopt(2) for SO_ERROR.
func (p *Proxy) connectReady(cn *connecting, ev uint32) {
	if cn.done || cn.ufd < 0 {
		return
	}
	var err error
	if ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		var soerr int
		soerr, err = rawsys.GetsockoptInt(cn.ufd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err == nil && soerr != 0 {
			err = os.NewSyscallError("connect", unix.Errno(soerr))
		}
	}
	if err != nil {
		p.attemptFailed(cn, err)
		p.nextAttempt(cn)
		return
	}
	cn.done = true
	cn.timer.Stop()
	real, err := p.checkRewriteFD(cn)
	if err != nil {
		p.rewriteRefused(cn, err)
		return
	}
	rec := cn.rec
	rec.Upstream = cn.to
	t := p.trackRelayed(&tracked{dst: rec.Dst, upAddr: cn.to, realAddr: real, name: cn.s.name}, cn.client.pol)
	cw, uw := cn.client.watch, cn.watch
	p.pairUp(t, rec, cn.to, func(done func(relayloop.Result)) (*relayloop.Pair, error) {
		return p.relayLoop().AddWatched(cw, uw, done)
	}, func() {
		cw.Stop()
		uw.Stop()
		closeFD(cn.client.fd)
		closeFD(cn.ufd)
	})
}

// checkRewriteFD is checkRewrite for cn's connected socket; without a
// Destinations it makes no system call.
func (p *Proxy) checkRewriteFD(cn *connecting) (netip.AddrPort, error) {
	if p.realDst == nil {
		return cn.to, nil
	}
	local, err := rawsys.Getsockname(cn.ufd)
	if err != nil {
		return cn.to, fmt.Errorf("cannot tell where the host sends the connection to %v: getsockname: %w", cn.to, err)
	}
	return p.checkRewrite(cn.client.pol, cn.d.dialName, local, cn.to)
}

// rewriteRefused closes cn's connected upstream, which the host sends
// where the guard refuses (or cannot tell where), and refuses the client
// as dialFailed does with err.
func (p *Proxy) rewriteRefused(cn *connecting, err error) {
	cn.watch.Stop()
	rawsys.Close(cn.ufd)
	cn.ufd = -1
	p.upstreams.release(cn.to, true, time.Now())
	rec, s := cn.rec, cn.s
	cn.client.unwatch()
	p.onGoroutine(cn.client.fd, func(c *net.TCPConn) bool { p.dialFailed(c, rec, s, err); return false })
}

// attemptFailed ends cn's attempt at cn.to.
func (p *Proxy) attemptFailed(cn *connecting, err error) {
	if cn.watch != nil {
		cn.watch.Stop()
		cn.watch = nil
	}
	rawsys.Close(cn.ufd)
	cn.ufd = -1
	p.upstreams.release(cn.to, false, time.Now())
	cn.errs = append(cn.errs, fmt.Errorf("dial tcp %v: %w", cn.to, err))
}

// dialTimedOut ends a dial that took the dial timeout, as the goroutine
// path's context does: no further address is tried.
func (p *Proxy) dialTimedOut(cn *connecting) {
	if cn.done {
		return
	}
	if cn.ufd >= 0 {
		p.attemptFailed(cn, os.ErrDeadlineExceeded)
	}
	cn.permitted = nil
	p.giveUp(cn)
}

// giveUp refuses cn's client as dialUpstream's caller does when no address
// could be dialed.
func (p *Proxy) giveUp(cn *connecting) {
	if cn.done {
		return
	}
	cn.done = true
	cn.timer.Stop()
	var err error
	switch {
	case cn.tried > 0 && cn.full == cn.tried:
		err = &limitError{limit: decisionlog.LimitPerUpstream, max: int64(p.upstreams.max)}
	case len(cn.errs) == 0:
		err = errors.New("the proxy is shutting down")
	default:
		err = fmt.Errorf("dial %s port %d: %w", nameOr(cn.d.dialName, cn.rec.Dst.Addr().String()), cn.rec.Dst.Port(), errors.Join(cn.errs...))
	}
	rec, s := cn.rec, cn.s
	cn.client.unwatch()
	p.onGoroutine(cn.client.fd, func(c *net.TCPConn) bool { p.dialFailed(c, rec, s, err); return false })
}
