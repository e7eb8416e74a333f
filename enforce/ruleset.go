package enforce

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the name of doorman's table (family inet) in a sandbox netns.
const TableName = "doorman"

// Chain names inside table inet doorman.
const (
	chainNATOutput     = "nat-output"
	chainNATPrerouting = "nat-prerouting"
	chainInput         = "filter-input"
	chainOutput        = "filter-output"
	chainForward       = "filter-forward"
)

// dnsPort is the port resolvers are queried on, over UDP and TCP.
const dnsPort = 53

// chainSpec is one base chain of the ruleset as Apply installs it.
type chainSpec struct {
	name     string
	typ      nftables.ChainType
	hook     nftables.ChainHook
	priority nftables.ChainPriority
	policy   nftables.ChainPolicy
	rules    []ruleSpec
}

// ruleSpec is one rule: its expressions and a comment that names it in
// `nft list ruleset` and in the errors of Check.
type ruleSpec struct {
	comment string
	exprs   []expr.Any
}

func rule(comment string, parts ...[]expr.Any) ruleSpec {
	return ruleSpec{comment: comment, exprs: slices.Concat(parts...)}
}

func accept() []expr.Any      { return []expr.Any{verdict(expr.VerdictAccept)} }
func drop() []expr.Any        { return []expr.Any{verdict(expr.VerdictDrop)} }
func ret() []expr.Any         { return []expr.Any{verdict(expr.VerdictReturn)} }
func tcp() []expr.Any         { return matchL4Proto(unix.IPPROTO_TCP) }
func udp() []expr.Any         { return matchL4Proto(unix.IPPROTO_UDP) }
func nfproto4() []expr.Any    { return matchNFProto(netip.IPv4Unspecified()) }
func nfproto6() []expr.Any    { return matchNFProto(netip.IPv6Unspecified()) }
func loopback() []expr.Any    { return matchOifname("lo") }
func fibNonLocal() []expr.Any { return matchFibDaddrNotLocal() }

// buildRuleset returns the chains of table inet doorman for a normalized
// spec, in the order Apply creates them. See doc.go for the layout.
func buildRuleset(s Spec) []chainSpec {
	var chains []chainSpec
	if !s.DenyAll {
		chains = append(chains, natOutput(s), natPrerouting(s))
		if in := input(s); len(in.rules) > 0 {
			chains = append(chains, in)
		}
	}
	return append(chains, output(s), forward(s))
}

func natChain(name string, hook *nftables.ChainHook) chainSpec {
	return chainSpec{name: name, typ: nftables.ChainTypeNAT, hook: *hook,
		priority: *nftables.ChainPriorityNATDest, policy: nftables.ChainPolicyAccept}
}

func filterChain(name string, hook *nftables.ChainHook, policy nftables.ChainPolicy) chainSpec {
	return chainSpec{name: name, typ: nftables.ChainTypeFilter, hook: *hook,
		priority: *nftables.ChainPriorityFilter, policy: policy}
}

// dnsPortFor is the DNS filter port for a resolver's family, 0 if none.
func dnsPortFor(s Spec, a netip.Addr) uint16 {
	if a.Is4() {
		return s.DNSPort4
	}
	return s.DNSPort6
}

// dnsToResolvers sends DNS to the resolvers to the proxy's DNS filter where
// there is one; otherwise it keeps TCP DNS away from the TCP proxy, so that
// the filter chains' DNS rules decide on it.
func dnsToResolvers(s Spec) []ruleSpec {
	var rules []ruleSpec
	for _, r := range s.Resolvers {
		if p := dnsPortFor(s, r); p != 0 {
			rules = append(rules,
				rule(fmt.Sprintf("dns udp to resolver %s goes to the filter on port %d", r, p),
					matchDaddr(r), udp(), matchDport(dnsPort), redirectTo(p)),
				rule(fmt.Sprintf("dns tcp to resolver %s goes to the filter on port %d", r, p),
					matchDaddr(r), tcp(), matchDport(dnsPort), redirectTo(p)))
			continue
		}
		rules = append(rules, rule(fmt.Sprintf("dns tcp to resolver %s is not redirected", r),
			matchDaddr(r), tcp(), matchDport(dnsPort), ret()))
	}
	return rules
}

// directNotRedirected keeps allowDirect destinations away from the proxy.
func directNotRedirected(s Spec) []ruleSpec {
	var rules []ruleSpec
	for _, d := range s.Direct {
		rules = append(rules, rule(fmt.Sprintf("allowDirect %v is not redirected", d),
			matchDirect(d, unix.IPPROTO_TCP), ret()))
	}
	return rules
}

// directAccepted lets allowDirect destinations out, TCP and UDP.
func directAccepted(s Spec) []ruleSpec {
	var rules []ruleSpec
	for _, d := range s.Direct {
		for _, p := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			rules = append(rules, rule(fmt.Sprintf("allowDirect %v proto %d is accepted", d, p),
				matchDirect(d, p), accept()))
		}
	}
	return rules
}

// redirects sends each family's TCP to its listener; extra narrows which
// packets are redirected (prerouting: only those not for this netns).
func redirects(s Spec, extra []expr.Any) []ruleSpec {
	var rules []ruleSpec
	if s.Port4 != 0 {
		rules = append(rules, rule(fmt.Sprintf("redirect ipv4 tcp to the proxy on port %d", s.Port4),
			nfproto4(), tcp(), extra, redirectTo(s.Port4)))
	}
	if s.Port6 != 0 {
		rules = append(rules, rule(fmt.Sprintf("redirect ipv6 tcp to the proxy on port %d", s.Port6),
			nfproto6(), tcp(), extra, redirectTo(s.Port6)))
	}
	return rules
}

func natOutput(s Spec) chainSpec {
	c := natChain(chainNATOutput, nftables.ChainHookOutput)
	c.rules = append(c.rules, rule("loopback is not redirected", loopback(), ret()))
	c.rules = append(c.rules, dnsToResolvers(s)...)
	c.rules = append(c.rules, directNotRedirected(s)...)
	c.rules = append(c.rules, redirects(s, nil)...)
	return c
}

func natPrerouting(s Spec) chainSpec {
	c := natChain(chainNATPrerouting, nftables.ChainHookPrerouting)
	c.rules = append(c.rules, dnsToResolvers(s)...)
	c.rules = append(c.rules, directNotRedirected(s)...)
	c.rules = append(c.rules, redirects(s, fibNonLocal())...)
	return c
}

// input lets only redirected connections reach the listener ports.
func input(s Spec) chainSpec {
	c := filterChain(chainInput, nftables.ChainHookInput, nftables.ChainPolicyAccept)
	ports := slices.Compact([]uint16{min(s.Port4, s.Port6), max(s.Port4, s.Port6)})
	for _, p := range ports {
		if p == 0 {
			continue
		}
		c.rules = append(c.rules,
			rule(fmt.Sprintf("redirected tcp reaches the proxy on port %d", p),
				tcp(), matchDport(p), matchCtBits(expr.CtKeySTATUS, ipsDstNAT), accept()),
			rule(fmt.Sprintf("direct tcp to the proxy on port %d is refused", p),
				tcp(), matchDport(p), []expr.Any{rejectTCPReset()}))
	}
	dns := slices.Compact([]uint16{min(s.DNSPort4, s.DNSPort6), max(s.DNSPort4, s.DNSPort6)})
	for _, p := range dns {
		if p == 0 {
			continue
		}
		for _, proto := range []struct {
			name string
			l4   []expr.Any
			deny expr.Any
		}{{"udp", udp(), rejectAdminProhibited()}, {"tcp", tcp(), rejectTCPReset()}} {
			c.rules = append(c.rules,
				rule(fmt.Sprintf("redirected dns %s reaches the filter on port %d", proto.name, p),
					proto.l4, matchDport(p), matchCtBits(expr.CtKeySTATUS, ipsDstNAT), accept()),
				rule(fmt.Sprintf("direct %s to the dns filter on port %d is refused", proto.name, p),
					proto.l4, matchDport(p), []expr.Any{proto.deny}))
		}
	}
	return c
}

func output(s Spec) chainSpec {
	c := filterChain(chainOutput, nftables.ChainHookOutput, nftables.ChainPolicyDrop)
	c.rules = append(c.rules, conntrackRules()...)
	c.rules = append(c.rules, rule("loopback is accepted", loopback(), accept()))
	c.rules = append(c.rules, redirectedToProxy(s)...)
	c.rules = append(c.rules, neighbourDiscovery()...)
	c.rules = append(c.rules, dnsRules(s)...)
	c.rules = append(c.rules, directAccepted(s)...)
	c.rules = append(c.rules, echoRules(s)...)
	c.rules = append(c.rules, rejectRest()...)
	return c
}

func forward(s Spec) chainSpec {
	c := filterChain(chainForward, nftables.ChainHookForward, nftables.ChainPolicyDrop)
	c.rules = append(c.rules, conntrackRules()...)
	c.rules = append(c.rules, dnsRules(s)...)
	c.rules = append(c.rules, directAccepted(s)...)
	c.rules = append(c.rules, echoRules(s)...)
	c.rules = append(c.rules, rejectRest()...)
	return c
}

// redirectedToProxy accepts the connections nat-output redirected. The
// redirect reroutes them to lo, but the output hook keeps the interface it
// started with, so `oifname "lo"` does not see them: match the loopback
// address and listener port the redirect wrote instead.
func redirectedToProxy(s Spec) []ruleSpec {
	var rules []ruleSpec
	for _, l := range []struct {
		addr netip.Addr
		port uint16
	}{{netip.AddrFrom4([4]byte{127, 0, 0, 1}), s.Port4}, {netip.IPv6Loopback(), s.Port6}} {
		if l.port == 0 {
			continue
		}
		rules = append(rules, rule(fmt.Sprintf("redirected tcp to the proxy on port %d is accepted", l.port),
			matchDaddr(l.addr), tcp(), matchDport(l.port), matchCtBits(expr.CtKeySTATUS, ipsDstNAT), accept()))
	}
	for _, l := range []struct {
		addr netip.Addr
		port uint16
	}{{netip.AddrFrom4([4]byte{127, 0, 0, 1}), s.DNSPort4}, {netip.IPv6Loopback(), s.DNSPort6}} {
		if l.port == 0 {
			continue
		}
		rules = append(rules,
			rule(fmt.Sprintf("redirected dns udp to the filter on port %d is accepted", l.port),
				matchDaddr(l.addr), udp(), matchDport(l.port), matchCtBits(expr.CtKeySTATUS, ipsDstNAT), accept()),
			rule(fmt.Sprintf("redirected dns tcp to the filter on port %d is accepted", l.port),
				matchDaddr(l.addr), tcp(), matchDport(l.port), matchCtBits(expr.CtKeySTATUS, ipsDstNAT), accept()))
	}
	return rules
}

// conntrackRules accept what belongs to flows conntrack already knows.
// ICMP gets rules of its own: conntrack calls a second echo request with
// the identifier of an answered one established, and relates source
// quench and redirects to a flow as it does errors; neither may pass on
// the strength of an earlier packet. What is left of ICMP are replies to
// queries someone sent the sandbox, and the errors that keep admitted
// flows working, to the flow's peer (conntrack relates an error only if
// its outer destination is the peer of the flow it quotes).
func conntrackRules() []ruleSpec {
	rules := []ruleSpec{
		rule("invalid is dropped", matchCtBits(expr.CtKeySTATE, expr.CtStateBitINVALID), drop()),
		rule("replies are accepted", matchNotL4Proto(unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6),
			matchCtBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), accept()),
		rule("icmp replies to queries sent to the sandbox are accepted", nfproto4(), matchL4Proto(unix.IPPROTO_ICMP),
			matchCtBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED), matchCtReply(), accept()),
		rule("icmpv6 replies to queries sent to the sandbox are accepted", nfproto6(), matchL4Proto(unix.IPPROTO_ICMPV6),
			matchCtBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED), matchCtReply(), accept()),
	}
	for _, e := range icmpErrors {
		rules = append(rules, rule("icmp "+e.name+" related to a flow is accepted", nfproto4(), matchL4Proto(unix.IPPROTO_ICMP),
			matchICMPType(e.typ), matchCtBits(expr.CtKeySTATE, expr.CtStateBitRELATED), accept()))
	}
	for _, e := range icmpv6Errors {
		rules = append(rules, rule("icmpv6 "+e.name+" related to a flow is accepted", nfproto6(), matchL4Proto(unix.IPPROTO_ICMPV6),
			matchICMPType(e.typ), matchCtBits(expr.CtKeySTATE, expr.CtStateBitRELATED), accept()))
	}
	return rules
}

// neighbourDiscovery keeps IPv6 working on the link whatever AllowICMP
// says: router and neighbour solicitations and advertisements carry hop
// limit 255 (RFC 4861 7.1), MLD reports hop limit 1 (RFC 3810 5).
func neighbourDiscovery() []ruleSpec {
	nd := []struct {
		name     string
		typ      byte
		hopLimit byte
	}{
		{"router solicitation", icmpv6RouterSolicit, 255},
		{"neighbour solicitation", icmpv6NeighSolicit, 255},
		{"neighbour advertisement", icmpv6NeighAdvert, 255},
		{"mld report", icmpv6MLDReport, 1},
		{"mld done", icmpv6MLDDone, 1},
		{"mldv2 report", icmpv6MLDv2Report, 1},
	}
	var rules []ruleSpec
	for _, m := range nd {
		rules = append(rules, rule("ipv6 "+m.name+" is accepted",
			nfproto6(), matchL4Proto(unix.IPPROTO_ICMPV6), matchICMPv6Type(m.typ), matchHopLimit(m.hopLimit), accept()))
	}
	return rules
}

func dnsRules(s Spec) []ruleSpec {
	var rules []ruleSpec
	for _, r := range s.Resolvers {
		rules = append(rules,
			rule(fmt.Sprintf("dns udp to resolver %s is accepted", r), matchDaddr(r), udp(), matchDport(dnsPort), accept()),
			rule(fmt.Sprintf("dns tcp to resolver %s is accepted", r), matchDaddr(r), tcp(), matchDport(dnsPort), accept()))
	}
	return rules
}

// echoRules are AllowICMP: echo requests to the allowDirect prefixes,
// with at most maxEchoData bytes of data. Their replies come back as
// conntrack replies (the input chain accepts everything); a second
// request with the same identifier is judged here again, not as part of
// an established flow (see conntrackRules).
func echoRules(s Spec) []ruleSpec {
	if !s.AllowICMP {
		return nil
	}
	var rules []ruleSpec
	for _, p := range directPrefixes(s) {
		if p.Addr().Is4() {
			rules = append(rules, rule(fmt.Sprintf("icmp echo request to allowDirect %v of at most %d data bytes is accepted", p, maxEchoData),
				matchDprefix(p), matchL4Proto(unix.IPPROTO_ICMP), matchICMPType(icmpEchoRequest),
				matchIPv4NoOptions(), matchIPLength(false, ipv4HeaderLen+icmpHeaderLen, maxEchoIPv4Total), accept()))
			continue
		}
		rules = append(rules, rule(fmt.Sprintf("icmpv6 echo request to allowDirect %v of at most %d data bytes is accepted", p, maxEchoData),
			matchDprefix(p), matchL4Proto(unix.IPPROTO_ICMPV6), matchICMPType(icmpv6EchoRequest),
			matchIPLength(true, icmpHeaderLen, maxEchoIPv6Plen), accept()))
	}
	return rules
}

// directPrefixes are the prefixes of the allowDirect entries, each once,
// in the order of the entries.
func directPrefixes(s Spec) []netip.Prefix {
	var out []netip.Prefix
	for _, d := range s.Direct {
		if !slices.Contains(out, d.Prefix) {
			out = append(out, d.Prefix)
		}
	}
	return out
}

// rejectRest makes every client fail at once instead of timing out.
func rejectRest() []ruleSpec {
	return []ruleSpec{
		rule("other tcp is reset", tcp(), []expr.Any{rejectTCPReset()}),
		rule("everything else is rejected", []expr.Any{rejectAdminProhibited()}),
	}
}
