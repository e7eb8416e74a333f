package enforce

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
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
	rules    []nft.RuleSpec
}

// chain is the chain of cs in table t, as Apply adds it.
func (cs chainSpec) chain(t *nftables.Table) *nftables.Chain {
	return &nftables.Chain{Name: cs.name, Table: t, Type: cs.typ, Hooknum: &cs.hook, Priority: &cs.priority, Policy: &cs.policy}
}

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
func dnsToResolvers(s Spec) []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, r := range s.Resolvers {
		if p := dnsPortFor(s, r); p != 0 {
			rules = append(rules,
				nft.Rule(fmt.Sprintf("dns udp to resolver %s goes to the filter on port %d", r, p),
					nft.Daddr(r), nft.UDP(), nft.Dport(dnsPort), redirectTo(p)),
				nft.Rule(fmt.Sprintf("dns tcp to resolver %s goes to the filter on port %d", r, p),
					nft.Daddr(r), nft.TCP(), nft.Dport(dnsPort), redirectTo(p)))
			continue
		}
		rules = append(rules, nft.Rule(fmt.Sprintf("dns tcp to resolver %s is not redirected", r),
			nft.Daddr(r), nft.TCP(), nft.Dport(dnsPort), nft.Return()))
	}
	return rules
}

// directNotRedirected keeps allowDirect destinations away from the proxy.
func directNotRedirected(s Spec) []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, d := range s.Direct {
		rules = append(rules, nft.Rule(fmt.Sprintf("allowDirect %v is not redirected", d),
			matchDirect(d, unix.IPPROTO_TCP), nft.Return()))
	}
	return rules
}

// directAccepted lets allowDirect destinations out, TCP and UDP.
func directAccepted(s Spec) []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, d := range s.Direct {
		for _, p := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			rules = append(rules, nft.Rule(fmt.Sprintf("allowDirect %v proto %d is accepted", d, p),
				matchDirect(d, p), nft.Accept()))
		}
	}
	return rules
}

// redirects sends each family's TCP to its listener; extra narrows which
// packets are redirected (prerouting: only those not for this netns).
func redirects(s Spec, extra []expr.Any) []nft.RuleSpec {
	var rules []nft.RuleSpec
	if s.Port4 != 0 {
		rules = append(rules, nft.Rule(fmt.Sprintf("redirect ipv4 tcp to the proxy on port %d", s.Port4),
			nft.NFProtoIPv4(), nft.TCP(), extra, redirectTo(s.Port4)))
	}
	if s.Port6 != 0 {
		rules = append(rules, nft.Rule(fmt.Sprintf("redirect ipv6 tcp to the proxy on port %d", s.Port6),
			nft.NFProtoIPv6(), nft.TCP(), extra, redirectTo(s.Port6)))
	}
	return rules
}

func natOutput(s Spec) chainSpec {
	c := natChain(chainNATOutput, nftables.ChainHookOutput)
	c.rules = append(c.rules, nft.Rule("loopback is not redirected", nft.OifName("lo"), nft.Return()))
	c.rules = append(c.rules, dnsToResolvers(s)...)
	c.rules = append(c.rules, directNotRedirected(s)...)
	c.rules = append(c.rules, redirects(s, nil)...)
	return c
}

func natPrerouting(s Spec) chainSpec {
	c := natChain(chainNATPrerouting, nftables.ChainHookPrerouting)
	c.rules = append(c.rules, dnsToResolvers(s)...)
	c.rules = append(c.rules, directNotRedirected(s)...)
	c.rules = append(c.rules, redirects(s, nft.FibDaddrNotLocal())...)
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
			nft.Rule(fmt.Sprintf("redirected tcp reaches the proxy on port %d", p),
				nft.TCP(), nft.Dport(p), nft.CtStatus(ipsDstNAT), nft.Accept()),
			nft.Rule(fmt.Sprintf("direct tcp to the proxy on port %d is refused", p),
				nft.TCP(), nft.Dport(p), []expr.Any{rejectTCPReset()}))
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
		}{{"udp", nft.UDP(), rejectAdminProhibited()}, {"tcp", nft.TCP(), rejectTCPReset()}} {
			c.rules = append(c.rules,
				nft.Rule(fmt.Sprintf("redirected dns %s reaches the filter on port %d", proto.name, p),
					proto.l4, nft.Dport(p), nft.CtStatus(ipsDstNAT), nft.Accept()),
				nft.Rule(fmt.Sprintf("direct %s to the dns filter on port %d is refused", proto.name, p),
					proto.l4, nft.Dport(p), []expr.Any{proto.deny}))
		}
	}
	return c
}

func output(s Spec) chainSpec {
	c := filterChain(chainOutput, nftables.ChainHookOutput, nftables.ChainPolicyDrop)
	c.rules = append(c.rules, conntrackRules()...)
	c.rules = append(c.rules, nft.Rule("loopback is accepted", nft.OifName("lo"), nft.Accept()))
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
func redirectedToProxy(s Spec) []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, l := range []struct {
		addr netip.Addr
		port uint16
	}{{netip.AddrFrom4([4]byte{127, 0, 0, 1}), s.Port4}, {netip.IPv6Loopback(), s.Port6}} {
		if l.port == 0 {
			continue
		}
		rules = append(rules, nft.Rule(fmt.Sprintf("redirected tcp to the proxy on port %d is accepted", l.port),
			nft.Daddr(l.addr), nft.TCP(), nft.Dport(l.port), nft.CtStatus(ipsDstNAT), nft.Accept()))
	}
	for _, l := range []struct {
		addr netip.Addr
		port uint16
	}{{netip.AddrFrom4([4]byte{127, 0, 0, 1}), s.DNSPort4}, {netip.IPv6Loopback(), s.DNSPort6}} {
		if l.port == 0 {
			continue
		}
		rules = append(rules,
			nft.Rule(fmt.Sprintf("redirected dns udp to the filter on port %d is accepted", l.port),
				nft.Daddr(l.addr), nft.UDP(), nft.Dport(l.port), nft.CtStatus(ipsDstNAT), nft.Accept()),
			nft.Rule(fmt.Sprintf("redirected dns tcp to the filter on port %d is accepted", l.port),
				nft.Daddr(l.addr), nft.TCP(), nft.Dport(l.port), nft.CtStatus(ipsDstNAT), nft.Accept()))
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
func conntrackRules() []nft.RuleSpec {
	rules := []nft.RuleSpec{
		nft.Rule("invalid is dropped", nft.CtState(expr.CtStateBitINVALID), nft.Drop()),
		nft.Rule("replies are accepted", nft.L4ProtoNot(unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6),
			nft.CtState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), nft.Accept()),
		nft.Rule("icmp replies to queries sent to the sandbox are accepted", nft.NFProtoIPv4(), nft.L4Proto(unix.IPPROTO_ICMP),
			nft.CtState(expr.CtStateBitESTABLISHED), nft.CtReply(), nft.Accept()),
		nft.Rule("icmpv6 replies to queries sent to the sandbox are accepted", nft.NFProtoIPv6(), nft.L4Proto(unix.IPPROTO_ICMPV6),
			nft.CtState(expr.CtStateBitESTABLISHED), nft.CtReply(), nft.Accept()),
	}
	return append(rules, nft.ICMPErrorRules()...)
}

// neighbourDiscovery keeps IPv6 working on the link whatever AllowICMP
// says: router and neighbour solicitations and advertisements carry hop
// limit 255 (RFC 4861 7.1), MLD reports hop limit 1 (RFC 3810 5).
func neighbourDiscovery() []nft.RuleSpec {
	return append(nft.NDRules(), nft.MLDRules()...)
}

func dnsRules(s Spec) []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, r := range s.Resolvers {
		rules = append(rules,
			nft.Rule(fmt.Sprintf("dns udp to resolver %s is accepted", r), nft.Daddr(r), nft.UDP(), nft.Dport(dnsPort), nft.Accept()),
			nft.Rule(fmt.Sprintf("dns tcp to resolver %s is accepted", r), nft.Daddr(r), nft.TCP(), nft.Dport(dnsPort), nft.Accept()))
	}
	return rules
}

// echoRules are AllowICMP: echo requests to the allowDirect prefixes,
// with at most nft.MaxEchoData bytes of data, in this ruleset's encoding
// (see package nft). Their replies come back as conntrack replies (the
// input chain accepts everything); a second request with the same
// identifier is judged here again, not as part of an established flow
// (see conntrackRules).
func echoRules(s Spec) []nft.RuleSpec {
	if !s.AllowICMP {
		return nil
	}
	var rules []nft.RuleSpec
	for _, p := range directPrefixes(s) {
		rules = append(rules, nft.EchoRule(p, nft.DaddrMasked, nft.IPLengthBetween))
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
func rejectRest() []nft.RuleSpec {
	return []nft.RuleSpec{
		nft.Rule("other tcp is reset", nft.TCP(), []expr.Any{rejectTCPReset()}),
		nft.Rule("everything else is rejected", []expr.Any{rejectAdminProhibited()}),
	}
}
