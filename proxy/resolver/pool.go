package resolver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Defaults of UDPPool.
const (
	DefaultPoolSize   = 4
	DefaultPoolMaxAge = 10 * time.Second
)

// UDPPool exchanges UDP queries over a few long-lived sockets per server
// rather than one socket per query, as a forwarder that relays a
// sandbox's queries must: each socket that talks to a server is a
// conntrack entry of the proxy's namespace (the host's) for the kernel's
// UDP timeout (nf_conntrack_udp_timeout, 30 s) after its last packet,
// and that table (nf_conntrack_max, 65536 on a host of 2 to 4 GiB) is
// shared by every sandbox's proxy and the host itself. One socket a query
// let one sandbox's DNS filter, at its default rate, hold some 30,000
// entries; over a pool it holds a few per server. A socket takes new
// queries for MaxAge and is then replaced by one on another ephemeral
// port, so that whoever would forge an answer still has to guess a port
// that changes, besides the query's random ID. Its methods are safe for
// concurrent use; the zero value is ready, with the defaults.
type UDPPool struct {
	// Size is the sockets per server (default DefaultPoolSize); MaxAge
	// how long one takes new queries (default DefaultPoolMaxAge).
	Size   int
	MaxAge time.Duration

	mu     sync.Mutex
	socks  map[netip.AddrPort][]*poolConn
	closed bool
}

// poolConn is one socket of a pool, connected to its server, with the
// queries waiting for its answers by ID.
type poolConn struct {
	c    *net.UDPConn
	born time.Time

	mu      sync.Mutex
	waiting map[uint16]chan poolReply
	retired bool // takes no new queries; closed once none waits
	dead    error
}

// poolReply is what the reader hands a waiting query: an answer's bytes,
// or why none will come.
type poolReply struct {
	b   []byte
	err error
}

// errPoolClosed is Exchange's error after Close.
var errPoolClosed = errors.New("resolver: pool closed")

// Exchange sends m to server over one of the pool's sockets, with a
// random ID not in use on that socket (set in m), and returns the reply
// if it answers m (see checkReply), all within timeout. A reply with an
// ID no query waits for is dropped. A cancelled ctx makes it return
// context.Canceled at once; when timeout passes first, the error says so.
func (p *UDPPool) Exchange(ctx context.Context, m *dns.Msg, server netip.AddrPort, timeout time.Duration) (*dns.Msg, error) {
	pc, ch, err := p.conn(server, m)
	if err != nil {
		return nil, err
	}
	defer pc.unregister(m.Id)
	out, err := m.Pack()
	if err != nil {
		return nil, err
	}
	if _, err := pc.c.Write(out); err != nil {
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		reply := new(dns.Msg)
		if err := reply.Unpack(r.b); err != nil {
			return nil, err
		}
		if err := checkReply(m, reply); err != nil {
			return nil, err
		}
		return reply, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, context.Canceled
		}
		return nil, fmt.Errorf("no answer within %v", timeout)
	case <-timer.C:
		return nil, fmt.Errorf("no answer within %v", timeout)
	}
}

// Close closes every socket; queries waiting fail, and Exchange fails
// from then on.
func (p *UDPPool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, socks := range p.socks {
		for _, pc := range socks {
			if pc != nil {
				pc.c.Close()
			}
		}
	}
	p.socks = nil
}

// conn registers m (see register) on a socket to server that takes new
// queries: one of the pool's, picked at random, or a new one in place of
// one that is missing, dead or older than MaxAge (which is retired). The
// pool's lock is held throughout, so that no socket is retired, and
// closed, between its choice and the registration.
func (p *UDPPool) conn(server netip.AddrPort, m *dns.Msg) (*poolConn, chan poolReply, error) {
	size, maxAge := p.Size, p.MaxAge
	if size <= 0 {
		size = DefaultPoolSize
	}
	if maxAge <= 0 {
		maxAge = DefaultPoolMaxAge
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, errPoolClosed
	}
	if p.socks == nil {
		p.socks = map[netip.AddrPort][]*poolConn{}
	}
	socks := p.socks[server]
	if socks == nil {
		socks = make([]*poolConn, size)
		p.socks[server] = socks
	}
	i := rand.IntN(len(socks))
	if pc := socks[i]; pc != nil {
		if pc.usable(maxAge) {
			ch, err := pc.register(m)
			return pc, ch, err
		}
		pc.retire()
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
	if err != nil {
		socks[i] = nil
		return nil, nil, err
	}
	pc := &poolConn{c: c, born: time.Now(), waiting: map[uint16]chan poolReply{}}
	socks[i] = pc
	go pc.read()
	ch, err := pc.register(m)
	return pc, ch, err
}

// usable reports whether pc takes new queries.
func (pc *poolConn) usable(maxAge time.Duration) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.dead == nil && !pc.retired && time.Since(pc.born) < maxAge
}

// retire stops pc taking new queries, and closes it once none waits.
func (pc *poolConn) retire() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.retired = true
	if len(pc.waiting) == 0 {
		pc.c.Close()
	}
}

// register gives m a random ID that no query waiting on pc has, and
// returns the channel its answer comes on.
func (pc *poolConn) register(m *dns.Msg) (chan poolReply, error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.dead != nil {
		return nil, pc.dead
	}
	for {
		id := dns.Id()
		if _, taken := pc.waiting[id]; taken {
			continue
		}
		m.Id = id
		ch := make(chan poolReply, 1)
		pc.waiting[id] = ch
		return ch, nil
	}
}

// unregister forgets the query with ID id; a retired socket closes with
// its last one.
func (pc *poolConn) unregister(id uint16) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	delete(pc.waiting, id)
	if pc.retired && len(pc.waiting) == 0 {
		pc.c.Close()
	}
}

// read hands each datagram to the query waiting for its ID, until the
// socket is closed. An ICMP error the server's host sent back (read as
// ECONNREFUSED) fails the queries waiting then: their server does not
// listen, and the caller may try the next one at once.
func (pc *poolConn) read() {
	buf := make([]byte, dns.MaxMsgSize)
	for {
		n, err := pc.c.Read(buf)
		if err != nil && isRefused(err) {
			pc.fail(err, false)
			continue
		}
		if err != nil {
			pc.fail(err, true)
			return
		}
		if n < 2 {
			continue
		}
		id := binary.BigEndian.Uint16(buf)
		pc.mu.Lock()
		if ch, ok := pc.waiting[id]; ok {
			select {
			case ch <- poolReply{b: append([]byte(nil), buf[:n]...)}:
			default: // answered already
			}
		}
		pc.mu.Unlock()
	}
}

// isRefused reports whether err is the ICMP port unreachable a
// connected UDP socket reads as ECONNREFUSED.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// fail hands err to every query waiting on pc; dead marks pc unusable.
func (pc *poolConn) fail(err error, dead bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if dead {
		pc.dead = fmt.Errorf("resolver: socket to %v: %w", pc.c.RemoteAddr(), err)
		err = pc.dead
	}
	for _, ch := range pc.waiting {
		select {
		case ch <- poolReply{err: err}:
		default:
		}
	}
}
