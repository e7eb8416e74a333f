package dnsfilter

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// decision is what the policy says about one question.
type decision struct {
	allow  bool
	name   string // the normalized name, "" if it does not normalize
	rule   string // the entry that admitted it, "" if none
	reason string // why, in words an operator can act on
	// expansion: not admitted, but an admitted name followed by more
	// labels, as a resolver's search list makes it ("api.example.com" +
	// ".svc.cluster.local"). Such a query is answered NXDOMAIN, not
	// forwarded: see searchExpansion.
	expansion bool
	// byName: a name entry admitted the name (mode allowlist), as the
	// proxy admits a connection it then dials by resolving the name.
	byName bool
}

// decide applies policy p to question q. In mode open every question is
// admitted and in mode none none is; in mode allowlist, a question of class
// IN whose name an entry could admit (see admitName).
func decide(p *conf.Policy, q dns.Question) decision {
	name, nameErr := conf.NormalizeName(q.Name)
	d := decision{name: name}
	switch p.Mode {
	case conf.ModeNone:
		d.reason = decisionlog.ReasonModeNone
		return d
	case conf.ModeOpen:
		d.allow, d.reason = true, "mode open"
		return d
	}
	if q.Qclass != dns.ClassINET {
		d.reason = fmt.Sprintf("class %s is not served (only IN)", dns.Class(q.Qclass))
		return d
	}
	if nameErr != nil {
		d.reason = fmt.Sprintf("not a valid name: %v", nameErr)
		return d
	}
	if e, ok := admitName(p, name); ok {
		d.allow, d.rule, d.reason, d.byName = true, e.String(), "name allowed", true
		return d
	}
	if a, ok := reverseAddr(name); ok {
		if e, ok := admitAddr(p, a); ok {
			d.allow, d.rule, d.reason = true, e.String(), "reverse name of an allowed address"
			return d
		}
		d.reason = "reverse name of an address not allowed"
		return d
	}
	if e, ok := searchExpansion(p, name); ok {
		d.expansion = true
		d.reason = fmt.Sprintf("%s: %s with a search-list suffix (answered NXDOMAIN)", decisionlog.ReasonNameNotAllowed, e)
		return d
	}
	d.reason = decisionlog.ReasonNameNotAllowed
	return d
}

// searchExpansion returns the entry that admits a name of which name is an
// extension by one or more labels at the end: what a stub resolver asks
// first for an allowed name when its resolv.conf has a search list (every
// Kubernetes pod: ndots:5 and three cluster domains). Such names get
// NXDOMAIN rather than REFUSED, still without being forwarded: musl
// ignores a refusal and waits for its timeout, and glibc stops walking the
// search list at one, while both go on at once after NXDOMAIN. Nothing leaves the sandbox
// either way, and the answer tells the workload only what the policy
// already says.
func searchExpansion(p *conf.Policy, name string) (conf.Entry, bool) {
	for i := strings.LastIndexByte(name, '.'); i > 0; i = strings.LastIndexByte(name[:i], '.') {
		if e, ok := admitName(p, name[:i]); ok {
			return e, true
		}
	}
	return conf.Entry{}, false
}

// admitName returns the first name or wildcard entry of p that admits name
// (normalized, see conf.NormalizeName) on some port: a DNS query carries no
// port, and the name may be resolved for any of the ports the entry allows.
func admitName(p *conf.Policy, name string) (conf.Entry, bool) {
	for _, e := range p.Entries {
		if (e.Kind == conf.KindName || e.Kind == conf.KindWildcard) && e.MatchName(name, e.Ports.Lo) {
			return e, true
		}
	}
	return conf.Entry{}, false
}

// admitAddr returns the first IP or CIDR entry of p that admits address a
// on some port.
func admitAddr(p *conf.Policy, a netip.Addr) (conf.Entry, bool) {
	for _, e := range p.Entries {
		if e.Kind == conf.KindPrefix && e.MatchAddr(a, e.Ports.Lo) {
			return e, true
		}
	}
	return conf.Entry{}, false
}

// reverseAddr returns the address whose full reverse name is name
// (normalized): four decimal labels under in-addr.arpa, or 32 hexadecimal
// nibble labels under ip6.arpa, in canonical form. Partial reverse names
// (a network's zone) are not addresses.
func reverseAddr(name string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa"); ok {
		labels := strings.Split(rest, ".")
		if len(labels) != 4 {
			return netip.Addr{}, false
		}
		var b [4]byte
		for i, l := range labels {
			n, err := strconv.ParseUint(l, 10, 8)
			if err != nil || strconv.FormatUint(n, 10) != l {
				return netip.Addr{}, false
			}
			b[3-i] = byte(n)
		}
		return netip.AddrFrom4(b), true
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa"); ok {
		if len(rest) != 63 {
			return netip.Addr{}, false
		}
		var b [16]byte
		for i := range 32 {
			c := rest[2*i]
			if i < 31 && rest[2*i+1] != '.' {
				return netip.Addr{}, false
			}
			v, ok := hexNibble(c)
			if !ok {
				return netip.Addr{}, false
			}
			// The first label is the lowest nibble of the last byte.
			pos := 31 - i
			if pos%2 == 0 {
				b[pos/2] |= v << 4
			} else {
				b[pos/2] |= v
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}

// hexNibble decodes one lower-case hexadecimal digit (names are already
// lower case).
func hexNibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
