package dnsfilter

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// headerLen is the length of a DNS message header.
const headerLen = 12

// advertisedUDPSize is the EDNS UDP payload size the filter advertises to
// its clients and that upstream queries offer at most (DNS Flag Day 2020).
const advertisedUDPSize = 1232

// answer handles one query received over proto ("udp" or "tcp") from
// client, logs it, and returns the packed answer, or nil when the query
// gets none.
func (f *Filter) answer(ctx context.Context, query []byte, client netip.AddrPort, proto string) []byte {
	r := record{client: client, proto: proto, start: time.Now()}
	reply, req := f.respond(ctx, query, &r)
	var out []byte
	if reply != nil {
		var err error
		if out, err = pack(reply, req, proto); err != nil {
			r.fail("cannot pack the answer: %v", err)
			out, _ = pack(newReply(req, dns.RcodeServerFailure), req, proto)
			reply.Rcode = dns.RcodeServerFailure
		}
		r.rcode = dns.RcodeToString[reply.Rcode]
		if r.rcode == "" {
			r.rcode = fmt.Sprintf("RCODE%d", reply.Rcode)
		}
	}
	f.log(&r)
	return out
}

// respond decides a query and returns the reply to send (nil for none) and
// the request as parsed (nil if it could not be), filling in r.
func (f *Filter) respond(ctx context.Context, query []byte, r *record) (reply, req *dns.Msg) {
	if len(query) < headerLen {
		r.deny("malformed query: %d bytes, shorter than a DNS header", len(query))
		return nil, nil
	}
	req = new(dns.Msg)
	err := req.Unpack(query) // the header is always unpacked
	if req.Response {
		r.deny("not a query: the QR bit is set")
		return nil, nil
	}
	if err != nil {
		r.deny("malformed query: %v", err)
		return formErr(req), nil
	}
	if len(req.Question) == 1 {
		q := req.Question[0]
		r.name = displayName(q.Name)
		r.qtype = dns.Type(q.Qtype).String()
	}
	switch {
	case req.Opcode != dns.OpcodeQuery:
		r.deny("opcode %s is not served", opcodeString(req.Opcode))
		return newReply(req, dns.RcodeNotImplemented), req
	case len(req.Question) != 1:
		r.deny("malformed query: %d questions, want 1", len(req.Question))
		return formErr(req), nil
	}
	if n := countOPT(req); n > 1 {
		r.deny("malformed query: %d OPT records, want at most 1", n)
		return formErr(req), nil
	}
	if opt := req.IsEdns0(); opt != nil && opt.Version() != 0 {
		r.deny("EDNS version %d is not supported", opt.Version())
		return newReply(req, dns.RcodeBadVers), req
	}
	q := req.Question[0]
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		r.deny("zone transfers (%s) are not forwarded", r.qtype)
		return newReply(req, dns.RcodeNotImplemented), req
	}

	p := f.Policy()
	d := decide(p, q)
	if d.name != "" {
		r.name = d.name
	}
	r.rule = d.rule
	if !d.allow {
		r.deny("%s", d.reason)
		m := f.denial(req, d.reason)
		if d.expansion {
			m.Rcode = dns.RcodeNameError
		}
		return m, req
	}
	r.verdict, r.reason = decisionlog.Allow, d.reason
	if d.byName {
		r.admittedName = d.name
	}
	return f.forward(ctx, req, r, p), req
}

// denial is the answer to a query that is not admitted: DenyRcode, with an
// Extended DNS Error "Prohibited" that says why if the client speaks EDNS.
func (f *Filter) denial(req *dns.Msg, reason string) *dns.Msg {
	m := newReply(req, f.denyRcode)
	if opt := m.IsEdns0(); opt != nil {
		text := "doorman: " + reason
		if f.sandbox != "" {
			text += " in sandbox " + f.sandbox
		}
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{
			InfoCode:  dns.ExtendedErrorCodeProhibited,
			ExtraText: text,
		})
	}
	return m
}

// newReply returns an answer to req with rcode, its question, and an OPT
// record if req has one.
func newReply(req *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = true
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(advertisedUDPSize, opt.Do())
	}
	return m
}

// formErr answers a query that cannot be read: FORMERR, with the ID and
// opcode of the header but nothing that came after it.
func formErr(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.Id = req.Id
	m.Response = true
	m.Opcode = req.Opcode
	m.RecursionDesired = req.RecursionDesired
	m.RecursionAvailable = true
	m.Rcode = dns.RcodeFormatError
	return m
}

// pack packs an answer for proto. Over UDP it truncates the answer to the
// client's size (512 bytes, or its EDNS size), setting TC when records had
// to go; a TC bit from upstream stays.
func pack(m, req *dns.Msg, proto string) ([]byte, error) {
	if proto == "udp" {
		size := dns.MinMsgSize
		if req != nil {
			if opt := req.IsEdns0(); opt != nil {
				size = max(size, int(opt.UDPSize()))
			}
		}
		m.Truncate(size)
	}
	m.Compress = true
	return m.Pack()
}

// countOPT counts the OPT records of m.
func countOPT(m *dns.Msg) int {
	n := 0
	for _, rr := range m.Extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			n++
		}
	}
	return n
}

// displayName is a question name as logged before (or without) being
// normalized: without its trailing dot, except for the root.
func displayName(name string) string {
	if name == "." {
		return name
	}
	return strings.TrimSuffix(name, ".")
}

// opcodeString names an opcode.
func opcodeString(op int) string {
	if s, ok := dns.OpcodeToString[op]; ok {
		return s
	}
	return fmt.Sprintf("OPCODE%d", op)
}
