package dnsfilter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// Limits of the TCP side. A sandbox that opens more connections waits for
// one to close; the idle timeout keeps a silent one from holding its slot.
const (
	maxTCPConns    = 64
	tcpIdleTimeout = 10 * time.Second
	tcpIOTimeout   = 5 * time.Second // to read the rest of a query, to write an answer
)

// maxUDPPacket is the read buffer of the UDP side: the largest datagram, so
// that nothing is cut short silently.
const maxUDPPacket = 65535

// ServeUDP answers the queries that arrive on pc until pc is closed or
// Shutdown is called; it then returns ErrClosed. A *net.UDPConn replies from
// the address each query was sent to, whatever pc is bound to.
func (f *Filter) ServeUDP(pc net.PacketConn) error {
	if !f.register(func() { f.packetConns[pc] = struct{}{} }) {
		pc.Close()
		return ErrClosed
	}
	defer f.unregister(func() { delete(f.packetConns, pc) })

	uc, _ := pc.(*net.UDPConn)
	if uc != nil {
		setPacketInfo(uc)
	}
	buf := make([]byte, maxUDPPacket)
	var backoff time.Duration
	for {
		var (
			n       int
			from    net.Addr
			session *dns.SessionUDP
			err     error
		)
		if uc != nil {
			n, session, err = dns.ReadFromSessionUDP(uc, buf)
			if session != nil {
				from = session.RemoteAddr()
			}
		} else {
			n, from, err = pc.ReadFrom(buf)
		}
		if err != nil {
			if f.endsServing(err, &backoff, decisionlog.MsgDNSRead, "udp") {
				return ErrClosed
			}
			continue
		}
		backoff = 0
		if !f.rate.allow(time.Now()) {
			// Answered here, without a goroutine or a slot: a flood
			// costs little more than reading it.
			if answer := f.overRate(buf[:n], "udp"); answer != nil {
				if session != nil {
					dns.WriteToSessionUDP(uc, answer, session)
				} else {
					pc.WriteTo(answer, from)
				}
			}
			continue
		}
		if !f.acquire() {
			return ErrClosed
		}
		query := bytes.Clone(buf[:n])
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.release()
			answer := f.answer(f.ctx, query, addrPort(from), "udp")
			if answer == nil {
				return
			}
			if session != nil {
				dns.WriteToSessionUDP(uc, answer, session)
			} else {
				pc.WriteTo(answer, from)
			}
		}()
	}
}

// endsServing reports whether err, from a read or an accept, means the
// listener was closed or Shutdown called. Otherwise (out of file
// descriptors and the like) it logs err with message msg and waits before
// the next try: 5 ms, doubling with each failure in a row up to a second
// (*backoff, which the caller zeroes on a success).
func (f *Filter) endsServing(err error, backoff *time.Duration, msg, proto string) bool {
	if f.isClosed() || errors.Is(err, net.ErrClosed) {
		return true
	}
	*backoff = min(max(2**backoff, 5*time.Millisecond), time.Second)
	f.logger.Error(msg, decisionlog.SandboxKey, f.sandbox, decisionlog.ProtoKey, proto, decisionlog.ErrKey, err)
	time.Sleep(*backoff)
	return false
}

// ServeTCP answers the queries on the connections accepted from ln until ln
// is closed or Shutdown is called; it then returns ErrClosed. Queries on
// one connection are answered in order.
func (f *Filter) ServeTCP(ln net.Listener) error {
	if !f.register(func() { f.listeners[ln] = struct{}{} }) {
		ln.Close()
		return ErrClosed
	}
	defer f.unregister(func() { delete(f.listeners, ln) })

	var backoff time.Duration
	for {
		select {
		case f.tcpSlots <- struct{}{}:
		case <-f.done:
			return ErrClosed
		}
		c, err := ln.Accept()
		if err != nil {
			<-f.tcpSlots
			if f.endsServing(err, &backoff, decisionlog.MsgDNSAccept, "tcp") {
				return ErrClosed
			}
			continue
		}
		backoff = 0
		if !f.register(func() { f.conns[c] = struct{}{} }) {
			<-f.tcpSlots
			c.Close()
			return ErrClosed
		}
		go func() {
			defer f.unregister(func() { delete(f.conns, c) })
			defer func() { <-f.tcpSlots }()
			defer c.Close()
			f.serveConn(c)
		}()
	}
}

// serveConn answers the length-prefixed queries on one TCP connection until
// the client closes it, stays idle too long, or sends something that gets
// no answer.
func (f *Filter) serveConn(c net.Conn) {
	client := addrPort(c.RemoteAddr())
	var prefix [2]byte
	for {
		if err := f.setReadDeadline(c, tcpIdleTimeout); err != nil {
			return
		}
		if _, err := io.ReadFull(c, prefix[:1]); err != nil {
			return
		}
		if err := f.setReadDeadline(c, tcpIOTimeout); err != nil {
			return
		}
		if _, err := io.ReadFull(c, prefix[1:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(prefix[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		var answer []byte
		if f.rate.allow(time.Now()) {
			if !f.acquire() {
				return
			}
			answer = f.answer(f.ctx, query, client, "tcp")
			f.release()
		} else {
			answer = f.overRate(query, "tcp")
		}
		if answer == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(tcpIOTimeout))
		msg := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(answer)), uint16(len(answer)))
		if _, err := c.Write(append(msg, answer...)); err != nil {
			return
		}
	}
}

// setReadDeadline sets c's read deadline d from now, unless Shutdown was
// called: then it leaves the deadline Shutdown set and fails.
func (f *Filter) setReadDeadline(c net.Conn, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	return c.SetReadDeadline(time.Now().Add(d))
}

// register runs add under the lock and counts one more goroutine for
// Shutdown to wait for, unless Shutdown was called.
func (f *Filter) register(add func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	add()
	f.wg.Add(1)
	return true
}

// unregister undoes register.
func (f *Filter) unregister(remove func()) {
	f.mu.Lock()
	remove()
	f.mu.Unlock()
	f.wg.Done()
}

// setPacketInfo asks the kernel for each datagram's destination address, so
// that WriteToSessionUDP can reply from it. It is best effort: a socket of
// one family refuses the other family's option.
func setPacketInfo(uc *net.UDPConn) {
	ipv4.NewPacketConn(uc).SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true)
	ipv6.NewPacketConn(uc).SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
}

// addrPort returns a's address and port, or the zero value.
func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
