package dnsfilter

import (
	"net"
	"net/netip"
	"slices"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/guard"
)

// privateAnswers is what stripPrivate removed from an answer.
type privateAnswers struct {
	removed  int              // addresses removed: records and hint values
	refusals []*guard.Refusal // why, one per address
}

// reason renders the refusals for the log: "private answer 10.0.0.5: RFC
// 1918 (10.0.0.0/8)", one such clause per address (the first few).
func (pa privateAnswers) reason() string {
	return guard.Reason(decisionlog.ReasonPrivateAnswer, pa.refusals)
}

// stripPrivate removes from m every address the guard refuses under p
// (see package guard), as the proxy would refuse to dial it: A and AAAA
// records in every section, and the values of the ipv4hint and ipv6hint
// parameters of HTTPS and SVCB records (a hint left without values goes,
// and from the record's mandatory list with it). Whatever an allowed
// name's DNS says, the sandbox then never learns a private address for
// it. name, if not "", is the question's name, which a name entry of p
// admitted: the guard's scopes for it apply (guard.CheckNameAnyPort), as
// they do when the proxy resolves it.
func (f *Filter) stripPrivate(m *dns.Msg, p *conf.Policy, name string) privateAnswers {
	var pa privateAnswers
	refused := func(ip net.IP) bool {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			pa.removed++ // not an address: nothing to pass on
			return true
		}
		if r := f.guard.CheckNameAnyPort(p, name, a); r != nil {
			pa.removed++
			pa.refusals = append(pa.refusals, r)
			return true
		}
		return false
	}
	for _, section := range []*[]dns.RR{&m.Answer, &m.Ns, &m.Extra} {
		kept := (*section)[:0]
		for _, rr := range *section {
			switch rr := rr.(type) {
			case *dns.A:
				if refused(rr.A) {
					continue
				}
			case *dns.AAAA:
				if refused(rr.AAAA) {
					continue
				}
			case *dns.HTTPS:
				stripHints(&rr.SVCB, refused)
			case *dns.SVCB:
				stripHints(rr, refused)
			}
			kept = append(kept, rr)
		}
		clear((*section)[len(kept):])
		*section = kept
	}
	return pa
}

// stripHints removes the addresses refused reports from the ipv4hint and
// ipv6hint parameters of s; a hint left empty goes (an empty one is
// malformed), and from the mandatory list too (the list goes if nothing
// else is left in it).
func stripHints(s *dns.SVCB, refused func(net.IP) bool) {
	var gone []dns.SVCBKey
	kept := make([]dns.SVCBKeyValue, 0, len(s.Value))
	changed := false
	for _, kv := range s.Value {
		var hint []net.IP
		var rebuild func([]net.IP) dns.SVCBKeyValue // the hint with these addresses
		switch h := kv.(type) {
		case *dns.SVCBIPv4Hint:
			hint, rebuild = h.Hint, func(ips []net.IP) dns.SVCBKeyValue { return &dns.SVCBIPv4Hint{Hint: ips} }
		case *dns.SVCBIPv6Hint:
			hint, rebuild = h.Hint, func(ips []net.IP) dns.SVCBKeyValue { return &dns.SVCBIPv6Hint{Hint: ips} }
		}
		if ips := keepAddrs(hint, refused); rebuild != nil && len(ips) != len(hint) {
			changed = true
			if len(ips) == 0 {
				gone = append(gone, kv.Key())
				continue
			}
			kv = rebuild(ips)
		}
		kept = append(kept, kv)
	}
	if !changed {
		return
	}
	if len(gone) > 0 {
		out := kept[:0]
		for _, kv := range kept {
			if m, ok := kv.(*dns.SVCBMandatory); ok {
				var codes []dns.SVCBKey
				for _, k := range m.Code {
					if !slices.Contains(gone, k) {
						codes = append(codes, k)
					}
				}
				if len(codes) == 0 {
					continue
				}
				kv = &dns.SVCBMandatory{Code: codes}
			}
			out = append(out, kv)
		}
		kept = out
	}
	s.Value = kept
}

// keepAddrs returns the addresses of ips that refused does not report.
func keepAddrs(ips []net.IP, refused func(net.IP) bool) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		if !refused(ip) {
			out = append(out, ip)
		}
	}
	return out
}

// countType counts the records of type t in rrs.
func countType(rrs []dns.RR, t uint16) int {
	n := 0
	for _, rr := range rrs {
		if rr.Header().Rrtype == t {
			n++
		}
	}
	return n
}
