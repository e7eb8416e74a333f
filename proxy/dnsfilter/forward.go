package dnsfilter

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/resolver"
)

// forward sends the question of req to the upstreams in turn and returns
// the answer for the client under policy p, filling in r's upstream,
// reason and verdict.
func (f *Filter) forward(ctx context.Context, req *dns.Msg, r *record, p *conf.Policy) *dns.Msg {
	if len(f.upstreams) == 0 {
		r.fail("no upstream resolvers configured")
		return newReply(req, dns.RcodeServerFailure)
	}
	up := upstreamQuery(req)
	var (
		failures []string
		last     *dns.Msg // the last SERVFAIL, REFUSED or NOTIMP answer
	)
	for _, u := range f.upstreams {
		r.upstream = u
		up.Id = dns.Id()
		reply, err := f.exchange(ctx, up, u, r.proto)
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", u, err))
			continue
		}
		switch reply.Rcode {
		case dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeNotImplemented:
			failures = append(failures, fmt.Sprintf("%s: answered %s", u, dns.RcodeToString[reply.Rcode]))
			last = reply
			continue
		}
		return f.relay(reply, req, r, p)
	}
	if last != nil {
		r.reason += "; " + strings.Join(failures, "; ")
		return f.relay(last, req, r, p)
	}
	r.fail("no upstream answered: %s", strings.Join(failures, "; "))
	return newReply(req, dns.RcodeServerFailure)
}

// upstreamQuery builds the query sent upstream for req: its question as
// written and its RD, CD and AD bits, and, if req has EDNS, its UDP size
// (at most advertisedUDPSize) and DO bit without any option. The ID is
// set for each attempt.
func upstreamQuery(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.Opcode = dns.OpcodeQuery
	m.RecursionDesired = req.RecursionDesired
	m.CheckingDisabled = req.CheckingDisabled
	m.AuthenticatedData = req.AuthenticatedData
	m.Question = []dns.Question{req.Question[0]}
	if opt := req.IsEdns0(); opt != nil {
		size := min(max(opt.UDPSize(), dns.MinMsgSize), advertisedUDPSize)
		m.SetEdns0(size, opt.Do())
	}
	return m
}

// exchange sends m to the upstream u over proto ("udp" or "tcp") and
// returns its answer if it answers m, within the filter's timeout (see
// resolver.Exchange; over UDP through the filter's pool, see
// resolver.UDPPool, which sets m's ID).
func (f *Filter) exchange(ctx context.Context, m *dns.Msg, u netip.AddrPort, proto string) (*dns.Msg, error) {
	var reply *dns.Msg
	var err error
	if proto == "udp" {
		reply, err = f.udp.Exchange(ctx, m, u, f.timeout)
	} else {
		reply, err = resolver.Exchange(ctx, m, u, proto, f.timeout)
	}
	if err == context.Canceled { // Shutdown: the query was aborted
		return nil, fmt.Errorf("aborted: %w", err)
	}
	return reply, err
}

// relay turns an upstream answer into the client's under policy p: the
// client's ID and question, ECH removed and the addresses the guard
// refuses removed (and AD cleared if anything was), and the OPT record
// only if the client sent one, advertising the filter's UDP size. An A or
// AAAA question whose every answer of that type was private is refused
// instead (see Filter.denial), as a name not admitted is.
func (f *Filter) relay(reply, req *dns.Msg, r *record, p *conf.Policy) *dns.Msg {
	reply.Id = req.Id
	reply.Question = []dns.Question{req.Question[0]}
	if stripECH(reply) {
		reply.AuthenticatedData = false
		r.echRemoved = true
	}
	qtype := req.Question[0].Qtype
	had := countType(reply.Answer, qtype)
	if pa := f.stripPrivate(reply, p, r.admittedName); pa.removed > 0 {
		reply.AuthenticatedData = false
		r.privateRemoved = pa.removed
		if (qtype == dns.TypeA || qtype == dns.TypeAAAA) && had > 0 && countType(reply.Answer, qtype) == 0 {
			// The log names the addresses; the sandbox learns only
			// that they were private.
			r.deny("%s", pa.reason())
			return f.denial(req, fmt.Sprintf("every %s record of the answer is a private address", dns.Type(qtype)))
		}
	}
	opt := reply.IsEdns0()
	switch {
	case req.IsEdns0() == nil && opt != nil:
		removeOPT(reply)
	case req.IsEdns0() != nil && opt == nil:
		reply.SetEdns0(advertisedUDPSize, req.IsEdns0().Do())
	case opt != nil:
		opt.SetUDPSize(advertisedUDPSize)
	}
	return reply
}

// removeOPT removes every OPT record from m.
func removeOPT(m *dns.Msg) {
	kept := m.Extra[:0]
	for _, rr := range m.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			kept = append(kept, rr)
		}
	}
	m.Extra = kept
}
