package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
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
		reply, err := f.exchange(ctx, up, u.String(), r.proto)
		if err == nil {
			err = checkReply(up, reply)
		}
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

// exchange sends m to the upstream addr over proto ("udp" or "tcp") and
// reads its answer, within the filter's timeout. Over UDP, answers with
// another ID are skipped (they may be late answers to earlier queries, or
// forged); over TCP one is an error.
func (f *Filter) exchange(ctx context.Context, m *dns.Msg, addr, proto string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c := dns.Client{
		Net:     proto,
		Timeout: f.timeout,
		// Read whole datagrams when the query has no EDNS (an OPT
		// record sets the size otherwise); pack truncates for the
		// client.
		UDPSize: dns.MaxMsgSize,
	}
	conn, err := c.DialContext(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// Shutdown's cancel must not wait for the read deadline.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	reply, _, err := c.ExchangeWithConnContext(ctx, m, conn)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return nil, fmt.Errorf("aborted: %w", context.Canceled)
		case ctx.Err() != nil, errors.As(err, &ne) && ne.Timeout():
			return nil, fmt.Errorf("no answer within %v", f.timeout)
		}
		return nil, err
	}
	return reply, nil
}

// checkReply makes sure reply answers query: the same ID, a response to
// a QUERY, and the same one question (the name compared ignoring case).
// It keeps an answer for another name, forged or confused, from passing
// as the answer for an admitted one.
func checkReply(query, reply *dns.Msg) error {
	switch {
	case reply.Id != query.Id:
		return fmt.Errorf("answer has ID %d, the query had %d", reply.Id, query.Id)
	case !reply.Response:
		return errors.New("answer is not a response (QR bit clear)")
	case reply.Opcode != dns.OpcodeQuery:
		return fmt.Errorf("answer has opcode %s, want QUERY", opcodeString(reply.Opcode))
	case len(reply.Question) != 1:
		return fmt.Errorf("answer has %d questions, want 1", len(reply.Question))
	}
	q, a := query.Question[0], reply.Question[0]
	if !strings.EqualFold(q.Name, a.Name) || q.Qtype != a.Qtype || q.Qclass != a.Qclass {
		return fmt.Errorf("answer is for %s %s %s, not the question asked (%s %s %s)",
			a.Name, dns.Class(a.Qclass), dns.Type(a.Qtype), q.Name, dns.Class(q.Qclass), dns.Type(q.Qtype))
	}
	return nil
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
	if pa := f.stripPrivate(reply, p); pa.removed > 0 {
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
