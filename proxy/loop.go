package proxy

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/relayloop"
)

// An established spliced connection (TLS, or anything that is not
// plaintext HTTP) is handed to the proxy's relay loop (package relayloop),
// which carries it from one goroutine until both ends are done: the
// connection then holds no goroutine, no stack and, while idle, no pipe.
// The handler's goroutine returns as soon as the loop has it. Where the
// loop cannot run, the connection is relayed by its own two goroutines as
// before (relay.go).

// relayLoop returns the proxy's relay loop, started on first use, or nil if
// it cannot run here or the proxy is shutting down.
func (p *Proxy) relayLoop() *relayloop.Loop {
	p.loopMu.Lock()
	defer p.loopMu.Unlock()
	if p.loop != nil || p.noLoop {
		return p.loop
	}
	l, err := relayloop.New(relayloop.Options{Written: p.bulk.add})
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
	l := p.relayLoop()
	if l == nil {
		return false
	}
	// From here on nobody may close t.client and t.upstream but this
	// function: kill and expire find t.pair, or t.killed tells us.
	t.mu.Lock()
	client, upstream := t.client, t.upstream
	cfd, err := relayloop.Detach(client)
	if err != nil {
		t.mu.Unlock()
		return false
	}
	ufd, err := relayloop.Detach(upstream)
	if err != nil {
		// The client's socket is ours now; there is no going back.
		t.mu.Unlock()
		closeFD(cfd)
		p.relayEnded(t, rec, slot, true)
		p.connDone()
		return true
	}
	t.client, t.upstream = nil, nil
	pair, err := l.Add(cfd, ufd, func(r relayloop.Result) {
		rec.BytesUp, rec.BytesDn = r.AToB, r.BToA
		p.relayEnded(t, rec, slot, !r.BEndedFirst)
		p.connDone()
	})
	if err != nil {
		t.mu.Unlock()
		closeFD(cfd)
		closeFD(ufd)
		p.relayEnded(t, rec, slot, true)
		p.connDone()
		return true
	}
	t.pair = pair
	killed, expired := t.killed != "", t.expired != ""
	t.mu.Unlock()
	switch {
	case killed:
		pair.Abort()
	case expired:
		pair.Close()
	}
	return true
}

// closeFD closes a descriptor Detach returned.
func closeFD(fd int) { unix.Close(fd) }
