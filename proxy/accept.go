package proxy

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/internal/rawsys"
	"github.com/doorman-net/doorman/proxy/relayloop"
	"github.com/doorman-net/doorman/proxy/sniff"
)

// Accepting on the relay loop. A connection's life before its decision
// used to be a goroutine of its own from accept on: the runtime's accept
// (and its four TCP keepalive options), its registration in the
// netpoller, a park until the ClientHello arrived and a wake, a peek
// buffer, and, for a relayed connection, a detach from the runtime again.
// Where it can, the proxy now accepts on the relay loop instead: the
// listening sockets are watched by the loop, accept4(2) hands over bare
// descriptors, and each new connection is watched (edge-triggered, with
// the events its pair will need, so that the registration goes over to
// the pair) until its first bytes arrive, which are peeked into the
// loop's one scratch buffer. Most connections say everything in their
// first segment or two, so the decision is made there, on the loop,
// without a goroutine or a buffer of their own, and the loop dials the
// upstream (dialloop.go). A connection that has sent nothing yet costs
// the proxy its sniffing record and nothing else.
//
// The loop looks at a connection's bytes only a few times (fastLooks): a
// connection that trickles its first bytes, or is anything but the common
// case, is handed to the goroutine path (handle's sniffThenDecide, peek),
// whose defences against trickled hellos are unchanged; so is a silent one
// at its sniff deadline, which then decides it as it always did. So are the
// caps: the pending connections and the bytes peeked are counted the same
// way on both paths.

// fastLooks bounds the looks at a connection's first bytes on the loop
// before it moves to the goroutine path.
const fastLooks = 3

// acceptBatch bounds the connections accepted from one listener in one go,
// so that one busy listener does not starve the loop's pairs.
const acceptBatch = 64

// scratchSize is the loop's peek buffer: real ClientHellos, post-quantum
// key shares included, fit many times over; a longer first flight moves to
// the goroutine path.
const scratchSize = 16 << 10

// loopAccept is the proxy's state for accepting on the relay loop; only
// the loop's goroutine touches it but for the listeners, which Shutdown
// closes through the loop.
type loopAccept struct {
	scratch []byte
	// waiting holds the connections waiting for their first bytes, oldest
	// first (they all wait the sniff timeout at most), and timer fires for the
	// oldest.
	waiting      sniffQueue
	timer        *time.Timer
	timerPending bool
}

// sniffing is a connection the loop accepted, from its accept until it
// is a pair or leaves the loop.
type sniffing struct {
	fd      int
	rec     Record
	pol     *conf.Policy
	watch   *relayloop.Watcher // its socket's registration, nil once it left the loop
	looks   int
	pending bool  // counted in p.pending
	charged int64 // bytes counted in p.pendingBytes
	decided bool  // its first bytes were decided (or it went to the goroutine path)
	queued  bool  // in loopAccept.waiting
	until   time.Time
	// prev and next link it in loopAccept.waiting.
	prev, next *sniffing
}

// sniffQueue is a doubly linked list of sniffing connections.
type sniffQueue struct{ head, tail *sniffing }

func (q *sniffQueue) push(s *sniffing) {
	s.prev, s.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = s
	} else {
		q.head = s
	}
	q.tail = s
}

func (q *sniffQueue) remove(s *sniffing) {
	if s.prev != nil {
		s.prev.next = s.next
	} else if q.head == s {
		q.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else if q.tail == s {
		q.tail = s.prev
	}
	s.prev, s.next = nil, nil
}

// serveOnLoop has the relay loop accept on ln. It returns false, with ln
// untouched, if the loop cannot (it is not running, ln is no TCP
// listener, or a stand-in for SO_ORIGINAL_DST needs a *net.TCPConn).
func (p *Proxy) serveOnLoop(ln net.Listener) (bool, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok || p.origDstFD == nil {
		return false, nil
	}
	l := p.relayLoop()
	if l == nil {
		return false, nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false, nil
	}
	if p.accept == nil {
		p.accept = &loopAccept{scratch: make([]byte, scratchSize)}
	}
	p.mu.Unlock()
	lfd, err := relayloop.Detach(tl)
	if err != nil {
		return true, err
	}
	// Accepted sockets inherit TCP_NODELAY from the listening one: set
	// once here, it costs a connection no setsockopt(2). (The runtime's
	// accept sets it on each; segments relayed in pieces, a TLS
	// handshake's, must not wait for the client's acknowledgements.)
	// Connections already queued were made without it: until the queue
	// has been drained once, each accepted socket gets it itself.
	if err := rawsys.SetsockoptInt(lfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		closeFD(lfd)
		return true, os.NewSyscallError("setsockopt TCP_NODELAY", err)
	}
	// Only the loop's goroutine touches st. The listener is watched
	// edge-triggered: each wake accepts until accept4 says EAGAIN, or
	// acceptBatch connections and then asks the loop to go on later.
	st := &listenState{fd: lfd}
	if local, err := rawsys.Getsockname(lfd); err == nil {
		st.port = local.Port()
	}
	var ready func(w *relayloop.Watcher, _ uint32)
	ready = func(w *relayloop.Watcher, _ uint32) {
		if p.acceptReady(st, w) {
			l.Run(func() {
				if !w.Stopped() {
					ready(w, 0)
				}
			})
		}
	}
	w, err := l.Watch(lfd, listenEvents, ready)
	if err != nil {
		closeFD(lfd)
		return true, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Run(func() { w.Stop(); closeFD(lfd) })
		return true, nil
	}
	p.loopListeners = append(p.loopListeners, loopListener{w: w, fd: lfd})
	p.mu.Unlock()
	return true, nil
}

// loopListener is a listening socket the relay loop accepts on.
type loopListener struct {
	w  *relayloop.Watcher
	fd int
}

// stopLoopListeners stops accepting on the loop's listeners and closes
// them; it waits until the loop has done so.
func (p *Proxy) stopLoopListeners() {
	p.mu.Lock()
	lns := p.loopListeners
	p.loopListeners = nil
	p.mu.Unlock()
	p.loopMu.Lock()
	l := p.loop
	p.loopMu.Unlock()
	if len(lns) == 0 || l == nil {
		return
	}
	done := make(chan struct{})
	l.Run(func() {
		for _, ln := range lns {
			ln.w.Stop()
			closeFD(ln.fd)
		}
		close(done)
	})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// listenEvents is what a listening socket is watched for.
const listenEvents = unix.EPOLLIN | unix.EPOLLET

// listenState is the loop's state of one listening socket.
type listenState struct {
	fd int
	// port is the listening socket's port, the local port of every
	// socket it accepts (0 if getsockname failed: see originalDstFD).
	port uint16
	// backoff is the pause after the last failed accept.
	backoff time.Duration
	// drained: accept4 has said EAGAIN once since the listening socket
	// got TCP_NODELAY, so every connection accepted from now on
	// inherits it.
	drained bool
}

// acceptReady accepts what st's listening socket holds, on the loop. It
// returns true if it stopped at acceptBatch connections with more perhaps
// waiting: the caller runs it again later (edge-triggered, the listener
// will not say so again).
func (p *Proxy) acceptReady(st *listenState, w *relayloop.Watcher) (more bool) {
	var sa unix.RawSockaddrAny
	for range acceptBatch {
		fd, err := rawsys.Accept4(st.fd, &sa)
		switch {
		case err == unix.EAGAIN:
			st.backoff, st.drained = 0, true
			return false
		case err == unix.EINTR || err == unix.ECONNABORTED:
			continue
		case err != nil:
			// Out of file descriptors and the like: pause this
			// listener, keep serving the rest. Watched again, it
			// reports the connections still waiting.
			st.backoff = min(max(2*st.backoff, 5*time.Millisecond), time.Second)
			p.logger.Error(decisionlog.MsgAccept, decisionlog.SandboxKey, p.sandbox, decisionlog.ErrKey, err)
			w.Modify(0)
			time.AfterFunc(st.backoff, func() {
				if l := p.relayLoop(); l != nil {
					l.Run(func() {
						if !w.Stopped() {
							w.Modify(listenEvents)
						}
					})
				}
			})
			return false
		}
		st.backoff = 0
		if !st.drained {
			rawsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		}
		p.acceptedOnLoop(fd, rawsys.SockaddrAddrPort(&sa), st.port)
	}
	return true
}

// acceptedOnLoop starts a connection the loop accepted. Its socket is
// watched from now on with the events a pair's side needs, so that the
// registration can go over to the pair it becomes (AddWatched) without
// another epoll_ctl(2).
func (p *Proxy) acceptedOnLoop(fd int, client netip.AddrPort, listenPort uint16) {
	if p.maxConns > 0 && p.held.Load() >= p.maxConns {
		if c, err := fileConn(fd); err == nil {
			p.refuseAtAccept(c)
		}
		return
	}
	p.held.Add(1)
	p.wg.Add(1)
	// TCP_NODELAY came from the listening socket (serveOnLoop).
	rec := Record{Sandbox: p.sandbox, Start: time.Now(), Proto: "unknown", Client: client}
	dst, err := p.origDstFD(fd, client, listenPort)
	if err != nil {
		rec.Verdict, rec.Reason = Deny, err.Error()
		p.log(rec)
		resetFD(fd)
		p.connDone()
		return
	}
	rec.Dst = dst
	pol := p.Policy()
	s := &sniffing{fd: fd, rec: rec, pol: pol, until: rec.Start.Add(p.sniffTimeout)}
	sniff := needsSniff(pol, dst)
	if sniff {
		if n := p.pending.Add(1); p.maxPending > 0 && n > p.maxPending {
			p.pending.Add(-1)
			p.onGoroutine(fd, func(c *net.TCPConn) bool {
				p.refuseOverCap(c, decisionlog.LimitPending, p.maxPending)
				return false
			})
			return
		}
		s.pending = true
	}
	l := p.relayLoop()
	if l == nil {
		p.toGoroutine(s)
		return
	}
	w, err := l.Watch(fd, relayloop.PairEvents, func(_ *relayloop.Watcher, ev uint32) { p.sniffEvent(s, ev) })
	if err != nil {
		p.toGoroutine(s)
		return
	}
	s.watch = w
	if !sniff {
		p.decideOnLoop(s, sniffed{})
		return
	}
	// Registration reports what is ready already: the first bytes, if
	// they came with the connection, are looked at from sniffEvent.
	a := p.accept
	a.waiting.push(s)
	s.queued = true
	if !a.timerPending {
		p.armSniffTimer(time.Until(a.waiting.head.until))
	}
}

// sniffEvent handles an event on a connection watched since its accept:
// while it has not been decided, new bytes (or their end) are looked at;
// once it has, events wait for the pair it becomes, which relays what came
// meanwhile when it takes the registration over.
func (p *Proxy) sniffEvent(s *sniffing, ev uint32) {
	if s.decided || ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
		return
	}
	p.look(s)
}

// look peeks at what s has sent so far, and decides it, waits for more,
// or hands it to the goroutine path.
func (p *Proxy) look(s *sniffing) {
	a := p.accept
	var n int
	var err error
	for {
		n, err = rawsys.Peek(s.fd, a.scratch)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EAGAIN {
		return // nothing yet: the next bytes wake it
	}
	if err != nil || n <= 0 {
		// The end of the stream or an error: the goroutine path says
		// what that means.
		p.toGoroutine(s)
		return
	}
	s.looks++
	p.parses.Add(1)
	if more := int64(n) - s.charged; more > 0 {
		if !p.growPending(int(more)) {
			p.toGoroutine(s) // which refuses it past the cap
			return
		}
		s.charged += more
	}
	sn, _, serr := sniffBytes(a.scratch[:n])
	if serr == nil {
		p.decideOnLoop(s, sn)
		return
	}
	if !errors.Is(serr, sniff.ErrIncomplete) || s.looks >= fastLooks || n >= len(a.scratch) {
		p.toGoroutine(s)
	}
}

// armSniffTimer wakes the loop after d to move the connections whose sniff
// deadline passed to the goroutine path.
func (p *Proxy) armSniffTimer(d time.Duration) {
	a := p.accept
	a.timerPending = true
	expire := func() {
		if l := p.relayLoop(); l != nil {
			l.Run(p.expireWaiting)
		}
	}
	if a.timer == nil {
		a.timer = time.AfterFunc(d, expire)
	} else {
		a.timer.Reset(d)
	}
}

// expireWaiting moves the connections whose sniff deadline passed to the
// goroutine path, on the loop, which decides them without a name.
func (p *Proxy) expireWaiting() {
	a := p.accept
	a.timerPending = false
	now := time.Now()
	for a.waiting.head != nil && !a.waiting.head.until.After(now) {
		p.toGoroutine(a.waiting.head)
	}
	if a.waiting.head != nil {
		p.armSniffTimer(a.waiting.head.until.Sub(now))
	}
}

// settle ends s's sniffing on the loop: it leaves the queue of waiting
// connections and what it was charged as pending is given back.
func (p *Proxy) settle(s *sniffing) {
	s.decided = true
	if s.queued {
		p.accept.waiting.remove(s)
		s.queued = false
	}
	if s.pending {
		p.pending.Add(-1)
		p.pendingBytes.Add(-s.charged)
		s.pending, s.charged = false, 0
	}
}

// unwatch takes s's socket out of the loop's epoll set, for a path that
// leaves the loop.
func (s *sniffing) unwatch() {
	if s.watch != nil {
		s.watch.Stop()
		s.watch = nil
	}
}

// toGoroutine hands s, not decided yet, to the goroutine path.
func (p *Proxy) toGoroutine(s *sniffing) {
	wasPending := s.pending
	p.settle(s)
	s.unwatch()
	rec, pol := s.rec, s.pol
	if !wasPending {
		p.onGoroutine(s.fd, func(c *net.TCPConn) bool { return p.decided(c, rec, sniffed{}, pol) })
		return
	}
	p.pending.Add(1) // sniffThenDecide counts it off
	p.onGoroutine(s.fd, func(c *net.TCPConn) bool { return p.sniffThenDecide(c, rec, pol) })
}

// onGoroutine runs f with fd as a *net.TCPConn on a goroutine of its
// own, and accounts for the connection's end unless f handed it to the
// relay loop. fd must not be in the loop's epoll set.
func (p *Proxy) onGoroutine(fd int, f func(*net.TCPConn) bool) {
	c, err := fileConn(fd)
	if err != nil {
		p.connDone()
		return
	}
	go func() {
		if !f(c) {
			p.connDone()
		}
	}()
}

// decideOnLoop goes on from what s's first bytes said, as decided does.
// A connection that is to be spliced is dialed by the loop, or where its
// name needs resolving on a goroutine of its own, and becomes a pair; the
// rest (refusals, plaintext HTTP, inspected hosts) go on on the goroutine
// path.
func (p *Proxy) decideOnLoop(s *sniffing, sn sniffed) {
	p.settle(s)
	p.decidedOnLoop.Add(1)
	rec, pol := s.rec, s.pol
	d := judge(&rec, sn, pol)
	if d.verdict == Deny || sn.proto == sniff.ProtoHTTP || (sn.proto == sniff.ProtoTLS && pol.InspectFor(sn.name) != nil) {
		s.unwatch()
		p.onGoroutine(s.fd, func(c *net.TCPConn) bool { return p.decided(c, rec, sn, pol) })
		return
	}
	if p.dialOnLoop(s, rec, sn, d) {
		return
	}
	s.unwatch()
	go p.dialThenRelay(s.fd, rec, sn, d, pol)
}

// dialThenRelay dials the upstream of a spliced connection whose client
// socket is fd, and relays the two on the loop.
func (p *Proxy) dialThenRelay(fd int, rec Record, s sniffed, d decision, pol *conf.Policy) {
	up, rt, err := p.dialFor(pol, d, rec.Dst)
	if err != nil {
		c, cerr := fileConn(fd)
		if cerr == nil {
			p.dialFailed(c, rec, s, err)
		}
		p.connDone()
		return
	}
	rec.Upstream, _ = netip.ParseAddrPort(up.RemoteAddr().String())
	t := p.trackRelayed(&tracked{upstream: up, dst: rec.Dst, upAddr: rec.Upstream, realAddr: rt.real, name: s.name}, pol)
	p.relayRaw(t, fd, rec, rt.slot)
}

// fileConn makes fd, a connected TCP socket detached from the runtime, a
// *net.TCPConn again (fd itself is closed: the conn holds a copy).
func fileConn(fd int) (*net.TCPConn, error) {
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, errors.New("not a TCP connection")
	}
	return tc, nil
}
