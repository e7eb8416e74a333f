package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/sniff"
)

// VerdictError marks a connection the policy allowed but that failed
// upstream (the name did not resolve, the host refused): the client gets a
// reset, as if the host itself had refused.
const VerdictError Verdict = decisionlog.Error

// sniffed is what the first bytes of a stream say.
type sniffed struct {
	proto sniff.Protocol
	name  string // normalized name, "" if none
	// ech: the ClientHello carried encrypted_client_hello, so name is
	// only the public name of the front that decrypts the real one (or
	// the client sent GREASE ECH, as Chrome does on every connection).
	ech  bool
	head *sniff.RequestHead
	err  error // why the bytes did not yield a name, if they did not
	// limited names the cap that stopped the sniff (the connections
	// not decided yet held all the bytes they may), "" if none.
	limited string
}

// sniffBytes classifies the bytes peeked so far. It returns
// sniff.ErrIncomplete while more bytes could change the answer, and then
// how long b must at least grow before they can (0 if it cannot say).
func sniffBytes(b []byte) (sniffed, int, error) {
	proto, err := sniff.Detect(b)
	if err != nil {
		return sniffed{}, 0, err
	}
	s := sniffed{proto: proto}
	switch proto {
	case sniff.ProtoTLS:
		hello, err := sniff.ParseClientHello(b)
		if errors.Is(err, sniff.ErrIncomplete) {
			return s, sniff.HelloNeeds(b), err
		}
		if err != nil {
			s.err = fmt.Errorf("ClientHello: %w", err)
			break
		}
		s.ech = hello.ECH
		s.name, s.err = normalizeSniffed(hello.ServerName)
	case sniff.ProtoHTTP:
		head, err := sniff.ParseRequestHead(b)
		if errors.Is(err, sniff.ErrIncomplete) {
			return s, 0, err
		}
		if err != nil {
			s.err = fmt.Errorf("HTTP request: %w", err)
			break
		}
		s.head = &head
		s.name, s.err = normalizeSniffed(head.Name())
	case sniff.ProtoH2C:
		s.err = errors.New("h2c prior knowledge names no host")
	}
	return s, 0, nil
}

// normalizeSniffed turns a sniffed SNI or Host into a policy name. IP
// literals are not names: such connections are decided by address.
func normalizeSniffed(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	if _, err := netip.ParseAddr(trimBrackets(name)); err == nil {
		return "", nil
	}
	n, err := conf.NormalizeName(name)
	if err != nil {
		return "", fmt.Errorf("name %q: %w", name, err)
	}
	return n, nil
}

func trimBrackets(s string) string {
	if len(s) > 1 && s[0] == '[' && s[len(s)-1] == ']' {
		return s[1 : len(s)-1]
	}
	return s
}

// handle serves one redirected connection from accept to close, on its
// own goroutine: the path of a proxy without the relay loop, and of
// connections the loop's accept hands over (see accept.go). It returns
// true if it handed the connection to the relay loop, which then accounts
// for its end (see connDone); false if the connection has ended.
func (p *Proxy) handle(c *net.TCPConn) (handedOff bool) {
	rec := Record{Sandbox: p.sandbox, Start: time.Now(), Proto: "unknown"}
	rec.Client, _ = netip.ParseAddrPort(c.RemoteAddr().String())
	rec.Client = netip.AddrPortFrom(rec.Client.Addr().Unmap(), rec.Client.Port())
	dst, err := p.origDst(c)
	if err != nil {
		rec.Verdict, rec.Reason = Deny, err.Error()
		p.log(rec)
		denyReset(c)
		return false
	}
	rec.Dst = dst
	// TCP keepalive: net.Listener turns it on for every accepted conn.

	pol := p.Policy()
	if !needsSniff(pol, dst) {
		return p.decided(c, rec, sniffed{}, pol)
	}
	if n := p.pending.Add(1); p.maxPending > 0 && n > p.maxPending {
		p.pending.Add(-1)
		p.refuseOverCap(c, decisionlog.LimitPending, p.maxPending)
		return false
	}
	return p.sniffThenDecide(c, rec, pol)
}

// needsSniff reports whether a connection to dst must show its name:
// not in mode none, nor where an address rule admits the destination
// whatever the name (server-speaks-first protocols would otherwise wait out
// the sniff deadline). Mode open sniffs so that the log names every host.
func needsSniff(pol *conf.Policy, dst netip.AddrPort) bool {
	_, addrAllowed := pol.MatchAddr(dst.Addr(), dst.Port())
	return pol.Mode == conf.ModeOpen || (pol.Mode == conf.ModeAllowlist && !addrAllowed)
}

// sniffThenDecide sniffs c, counted as pending already, until
// rec.Start plus the sniff timeout, and goes on as decided does.
func (p *Proxy) sniffThenDecide(c *net.TCPConn, rec Record, pol *conf.Policy) (handedOff bool) {
	s := p.sniff(c, rec.Start.Add(p.sniffTimeout))
	p.pending.Add(-1)
	if s.limited != "" {
		p.refuseLimited(c, s.proto, s.limited, p.maxPendingBytes)
		return false
	}
	return p.decided(c, rec, s, pol)
}

// judge decides a connection by what its first bytes said, and records
// the verdict in rec.
func judge(rec *Record, s sniffed, pol *conf.Policy) decision {
	rec.Proto, rec.Name, rec.ECH = s.proto.String(), s.name, s.ech
	d := decide(pol, s.name, rec.Dst)
	if s.proto == sniff.ProtoHTTP {
		d = decideHTTP(pol, s.name, rec.Dst)
	}
	if d.verdict == Deny && s.err != nil {
		d.reason += " (" + s.err.Error() + ")"
	}
	rec.Verdict, rec.Rule, rec.Reason = d.verdict, d.rule, d.reason
	return d
}

// decided goes on from what c's first bytes said: it refuses c, serves
// it as an inspected host, or dials its upstream and relays it.
func (p *Proxy) decided(c *net.TCPConn, rec Record, s sniffed, pol *conf.Policy) (handedOff bool) {
	d := judge(&rec, s, pol)
	if d.verdict == Deny {
		p.log(rec)
		p.refuse(c, s, d.reason)
		return false
	}
	if s.proto == sniff.ProtoTLS && pol.InspectFor(s.name) != nil {
		p.serveInspected(c, &rec, d, rec.Dst)
		return false
	}
	up, rt, err := p.dialFor(pol, d, rec.Dst)
	if err != nil {
		p.dialFailed(c, rec, s, err)
		return false
	}
	slot := rt.slot
	rec.Upstream, _ = netip.ParseAddrPort(up.RemoteAddr().String())
	t := p.trackRelayed(&tracked{client: c, upstream: up, dst: rec.Dst, upAddr: rec.Upstream, realAddr: rt.real, name: s.name}, pol)

	if s.proto == sniff.ProtoHTTP && s.head != nil {
		r := p.relayHTTP(t)
		rec.BytesUp, rec.BytesDn = r.up, r.down
		if r.denied != "" {
			rec.Verdict, rec.Reason, rec.Name = Deny, r.denied, r.deniedName
		}
		for _, n := range r.notes {
			rec.Reason += "; " + n
		}
		p.relayEnded(t, rec, slot, true)
		return false
	}
	if p.handOff(t, rec, slot) {
		return true
	}
	up2, down, upstreamFirst := relay(c, up, p.bulk)
	rec.BytesUp, rec.BytesDn = up2, down
	p.relayEnded(t, rec, slot, !upstreamFirst)
	return false
}

// dialFor dials the upstream of decision d within the dial timeout.
func (p *Proxy) dialFor(pol *conf.Policy, d decision, dst netip.AddrPort) (*net.TCPConn, route, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.dialTimeout)
	defer cancel()
	return p.dialUpstream(ctx, pol, d, dst)
}

// dialFailed refuses c, whose upstream could not be dialed (err from
// dialUpstream), and logs why. The client learns that the upstream is not
// permitted, not which private address the name has.
func (p *Proxy) dialFailed(c *net.TCPConn, rec Record, s sniffed, err error) {
	var refused *refusedError
	var limited *limitError
	switch {
	case errors.As(err, &limited):
		// A cap, not a decision: a limit line, no connection line.
		p.refuseLimited(c, s.proto, limited.limit, limited.max)
		return
	case errors.As(err, &refused):
		rec.Reason = err.Error()
		rec.Verdict, rec.Upstream = Deny, refused.upstream()
		p.log(rec)
		p.refuse(c, s, "upstream not permitted")
		return
	}
	rec.Reason = err.Error()
	rec.Verdict = VerdictError
	p.log(rec)
	denyReset(c)
}

// trackRelayed tracks t, an established connection decided under pol. A
// policy change between the decision and track would have missed it:
// it is decided again against the policy now in force.
func (p *Proxy) trackRelayed(t *tracked, pol *conf.Policy) *tracked {
	p.track(t)
	if now := p.Policy(); now != pol {
		if why := p.lostPermission(now, t); why != "" {
			t.kill(decisionlog.ReasonPolicyChanged + why)
		}
	}
	return t
}

// relayEnded closes a relayed connection's ends and writes its line. The
// upstream's source port stays taken for a minute if the proxy closed
// first (closedFirst), which it did unless the upstream's end came first
// or the proxy cut the connection.
func (p *Proxy) relayEnded(t *tracked, rec Record, slot netip.AddrPort, closedFirst bool) {
	if t.client != nil {
		t.client.Close()
	}
	if t.upstream != nil {
		t.upstream.Close()
	}
	if why := t.killReason(); why != "" {
		rec.Verdict, rec.Reason, closedFirst = Deny, why, true
	} else if why := t.expireReason(); why != "" {
		rec.Reason, closedFirst = why, true
	}
	p.untrack(t)
	p.upstreams.release(slot, closedFirst, time.Now())
	p.log(rec)
}

// sniff peeks at the first bytes until they name a host, prove there is none,
// or the deadline passes.
func (p *Proxy) sniff(c *net.TCPConn, deadline time.Time) sniffed {
	var s sniffed
	var serr error = sniff.ErrIncomplete
	var charged int64
	grow := func(n int) bool {
		if !p.growPending(n) {
			return false
		}
		charged += int64(n)
		return true
	}
	buf, n, err := peek(c, deadline, grow, func(b []byte) (bool, int) {
		var need int
		p.parses.Add(1)
		s, need, serr = sniffBytes(b)
		return !errors.Is(serr, sniff.ErrIncomplete), need
	})
	if buf != nil {
		defer buf.release()
		if errors.Is(err, errPeekBudget) {
			s.proto, _ = sniff.Detect(buf.b[:n])
		}
	}
	defer p.pendingBytes.Add(-charged)
	if err == nil {
		return s
	}
	switch {
	case errors.Is(err, errPeekBudget):
		s.limited = decisionlog.LimitPendingBytes
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.err = fmt.Errorf("no name within %v", p.sniffTimeout)
	case errors.Is(err, errPeekFull):
		s.err = fmt.Errorf("no name in the first %d bytes", maxPeek)
	default:
		s.err = fmt.Errorf("reading the first bytes: %w", err)
	}
	s.name = ""
	return s
}

// refuse makes a denial visible in the client's own protocol.
func (p *Proxy) refuse(c *net.TCPConn, s sniffed, reason string) {
	switch s.proto {
	case sniff.ProtoTLS:
		denyTLS(c)
	case sniff.ProtoHTTP:
		host := s.name
		if s.head != nil && host == "" {
			host = s.head.Name()
		}
		denyHTTP(c, host, p.sandbox, reason)
	default:
		denyReset(c)
	}
}
