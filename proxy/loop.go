package proxy

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/internal/rawsys"
	"github.com/doorman-net/doorman/proxy/relayloop"
)

// An established spliced connection (TLS, or anything that is not
// plaintext HTTP) is handed to the proxy's relay loop (package relayloop),
// which carries it from one goroutine until both ends are done: the
// connection then holds no goroutine, no stack and, while idle, no pipe.
// The handler's goroutine returns as soon as the loop has it. Where the
// loop cannot run, the connection is relayed by its own two goroutines as
// before (relay.go).

// RelayPipes bounds the splice pipes the relay loop holds at once: a
// relayed direction holds one only while it has bytes in flight, and one
// that needs one while all are taken waits for it (see
// relayloop.Options.MaxPipes). With up to relayloop's pool of free pipes
// beside them (relayloop.MaxFreePipes), the loop's pipes take at most
// 2*(RelayPipes+relayloop.MaxFreePipes) descriptors, whatever the number
// of connections.
const RelayPipes = 256

// relayLoop returns the proxy's relay loop, started on first use, or nil if
// it cannot run here or the proxy is shutting down.
func (p *Proxy) relayLoop() *relayloop.Loop {
	p.loopMu.Lock()
	defer p.loopMu.Unlock()
	if p.loop != nil || p.noLoop {
		return p.loop
	}
	l, err := relayloop.New(relayloop.Options{Written: p.bulk.add, MaxPipes: RelayPipes})
	if err != nil {
		p.logger.Warn("relay loop unavailable, relaying with a goroutine per direction", "error", err.Error())
		p.noLoop = true
		return nil
	}
	p.loop = l
	return l
}

// closeRelayLoop stops the relay loop once no connection needs it.
func (p *Proxy) closeRelayLoop() {
	p.loopMu.Lock()
	l := p.loop
	p.loop, p.noLoop = nil, true
	p.loopMu.Unlock()
	if l != nil {
		l.Close()
	}
}

// handOff gives t's two connections to the relay loop, which writes rec's
// line when they end and releases the upstream slot. It returns false if
// the loop cannot take them; t is then as it was.
func (p *Proxy) handOff(t *tracked, rec Record, slot netip.AddrPort) bool {
	if p.relayLoop() == nil {
		return false
	}
	// From here on nobody may close t.client but this function: kill and
	// expire find it nil, or t.killed tells relayRaw.
	t.mu.Lock()
	cfd, err := relayloop.Detach(t.client)
	if err != nil {
		t.mu.Unlock()
		return false
	}
	t.client = nil
	t.mu.Unlock()
	p.relayRaw(t, cfd, rec, slot)
	return true
}

// relayRaw relays between the client's socket cfd, detached from the
// runtime, and t.upstream, on the relay loop, which writes rec's line when
// both have ended and accounts for the connection's end. It owns cfd:
// whatever happens, the connection is ended or relayed.
func (p *Proxy) relayRaw(t *tracked, cfd int, rec Record, slot netip.AddrPort) {
	l := p.relayLoop()
	t.mu.Lock()
	var ufd int
	var err error
	if l == nil || t.upstream == nil {
		err = relayloop.ErrClosed
	} else if ufd, err = relayloop.Detach(t.upstream); err == nil {
		t.upstream = nil
	}
	killed := t.killed != ""
	t.mu.Unlock()
	if err != nil {
		// Killed meanwhile, or shutting down.
		if killed {
			resetFD(cfd)
		} else {
			closeFD(cfd)
		}
		p.relayEnded(t, rec, slot, true)
		p.connDone()
		return
	}
	p.pairOnLoop(t, cfd, ufd, rec, slot)
}

// pairOnLoop relays between the sockets cfd (the client's) and ufd (the
// upstream's, at slot), both detached from the runtime, on the relay loop,
// which writes rec's line when both have ended and accounts for the
// connection's end. It owns both descriptors.
func (p *Proxy) pairOnLoop(t *tracked, cfd, ufd int, rec Record, slot netip.AddrPort) {
	l := p.relayLoop()
	if l == nil {
		closeFD(cfd)
		closeFD(ufd)
		p.relayEnded(t, rec, slot, true)
		p.connDone()
		return
	}
	p.pairUp(t, rec, slot, func(done func(relayloop.Result)) (*relayloop.Pair, error) {
		return l.Add(cfd, ufd, done)
	}, func() {
		closeFD(cfd)
		closeFD(ufd)
	})
}

// pairUp makes t a pair of the relay loop with add, whose done function
// writes rec's line and accounts for the connection's end; if add fails,
// drop closes the sockets and the connection ends at once.
func (p *Proxy) pairUp(t *tracked, rec Record, slot netip.AddrPort, add func(func(relayloop.Result)) (*relayloop.Pair, error), drop func()) {
	// Not under t.mu: add may end the pair at once (AddWatched relays
	// what is queued), and done takes t.mu. A kill meanwhile finds no
	// pair and leaves t.killed for the check below.
	pair, err := add(func(r relayloop.Result) {
		rec.BytesUp, rec.BytesDn = r.AToB, r.BToA
		// On the loop while the log's writes are quick: a raw write
		// holds the proxy's one P as long from here as from a
		// goroutine, and the goroutine costs its creation and a pass
		// of the scheduler per connection.
		if p.linesOnLoop != nil && p.linesOnLoop() {
			p.relayEnded(t, rec, slot, !r.BEndedFirst)
			p.connDone()
			return
		}
		// Off the loop otherwise: the line's write can wait on the
		// disk (a writer the kernel throttles for dirty pages, a slow
		// filesystem), and the loop carries every other connection
		// of the sandbox.
		go func() {
			p.relayEnded(t, rec, slot, !r.BEndedFirst)
			p.connDone()
		}()
	})
	if err != nil {
		drop()
		p.relayEnded(t, rec, slot, true)
		p.connDone()
		return
	}
	t.mu.Lock()
	t.pair = pair
	killed, expired := t.killed != "", t.expired != ""
	t.mu.Unlock()
	switch {
	case killed:
		pair.Abort()
	case expired:
		pair.Close()
	}
}

// resetFD closes a socket Detach returned with a reset.
func resetFD(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	rawsys.Close(fd)
}

// closeFD closes a descriptor Detach returned.
func closeFD(fd int) { rawsys.Close(fd) }
