package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Exchange sends m to server over network ("udp" or "tcp") as it is, its
// ID included, and returns the reply if it answers m (see checkReply),
// all within timeout. The Stub asks with it, and the DNS filter forwards
// over TCP with it (over UDP through a UDPPool).
//
// Over UDP, replies with another ID are skipped while it waits (they may
// be late answers to earlier queries, or forged); over TCP one is an
// error. Over UDP a whole datagram is read when m has no EDNS (an OPT
// record sets the size otherwise), so that a forwarder can truncate for
// its own client. A cancelled ctx closes the connection at once, and
// Exchange returns context.Canceled itself; when timeout passes first,
// the error says so.
func Exchange(ctx context.Context, m *dns.Msg, server netip.AddrPort, network string, timeout time.Duration) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := dns.Client{Net: network, Timeout: timeout, UDPSize: dns.MaxMsgSize}
	conn, err := c.DialContext(ctx, server.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// A cancelled exchange must not wait for the read deadline.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	reply, _, err := c.ExchangeWithConnContext(ctx, m, conn)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return nil, context.Canceled
		case ctx.Err() != nil, errors.As(err, &ne) && ne.Timeout():
			return nil, fmt.Errorf("no answer within %v", timeout)
		}
		return nil, err
	}
	if err := checkReply(m, reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// checkReply makes sure reply answers query: the same ID, a response to
// a QUERY, and the same one question (the name compared ignoring case).
// It keeps an answer for another question, forged or confused, from
// passing as the addresses of an admitted name, or as the answer the DNS
// filter relays for one.
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

func opcodeString(op int) string {
	if s, ok := dns.OpcodeToString[op]; ok {
		return s
	}
	return fmt.Sprintf("OPCODE%d", op)
}
