package nft

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// ICMPv6 types (RFC 4443, 4861, 3810) that IPv6 needs on the link, and
// the ICMP and ICMPv6 echo requests (RFC 792, 4443).
const (
	ICMPv6MLDReport     = 131
	ICMPv6MLDDone       = 132
	ICMPv6RouterSolicit = 133
	ICMPv6NeighSolicit  = 135
	ICMPv6NeighAdvert   = 136
	ICMPv6MLDv2Report   = 143

	ICMPEchoRequest   = 8
	ICMPv6EchoRequest = 128
)

// The echo requests a policy's allowICMP admits carry at most MaxEchoData
// bytes after the 8-byte echo header, so that an echo cannot carry a
// tunnel's payload. An IPv4 one, without options (ihl 5), has a total
// length of EchoIPv4MinLen to EchoIPv4MaxLen; an IPv6 one a payload length
// (extension headers included) of EchoIPv6MinLen to EchoIPv6MaxLen.
const (
	MaxEchoData = 64

	icmpHeaderLen = 8
	ipv4HeaderLen = 20

	EchoIPv4MinLen = ipv4HeaderLen + icmpHeaderLen
	EchoIPv4MaxLen = EchoIPv4MinLen + MaxEchoData
	EchoIPv6MinLen = icmpHeaderLen
	EchoIPv6MaxLen = EchoIPv6MinLen + MaxEchoData
)

// EchoRule accepts the echo requests to prefix p that a policy's
// allowICMP admits:
//
//	ip daddr P icmp type echo-request ip version 4 ip hdrlength 5 ip length 28-92 accept
//	ip6 daddr P icmpv6 type echo-request ip6 length 8-72 accept
//
// daddr and length encode the destination and the length: DaddrPrefix
// and IPLengthRange, or DaddrMasked and IPLengthBetween (see "Two
// encodings of one match" in the package doc).
func EchoRule(p netip.Prefix, daddr func(netip.Prefix) []expr.Any, length func(v6 bool, lo, hi uint16) []expr.Any) RuleSpec {
	if p.Addr().Is4() {
		return Rule(fmt.Sprintf("icmp echo request to allowDirect %v of at most %d data bytes is accepted", p, MaxEchoData),
			daddr(p), L4Proto(unix.IPPROTO_ICMP), ICMPType(ICMPEchoRequest),
			IPv4NoOptions(), length(false, EchoIPv4MinLen, EchoIPv4MaxLen), Accept())
	}
	return Rule(fmt.Sprintf("icmpv6 echo request to allowDirect %v of at most %d data bytes is accepted", p, MaxEchoData),
		daddr(p), L4Proto(unix.IPPROTO_ICMPV6), ICMPType(ICMPv6EchoRequest),
		length(true, EchoIPv6MinLen, EchoIPv6MaxLen), Accept())
}

// namedType is an ICMP or ICMPv6 type and the name rule comments give it.
type namedType struct {
	name string
	typ  byte
}

// ICMPErrorRules accept the ICMP and ICMPv6 errors that conntrack relates
// to a flow and that keep it working: destination unreachable (and
// PMTU's fragmentation needed), time exceeded, parameter problem; ICMPv6
// packet too big. Source quench and redirect (IPv4), which conntrack
// relates to a flow as well, are not among them.
//
//	icmp type {destination-unreachable, time-exceeded, parameter-problem} ct state related accept
//	icmpv6 type {destination-unreachable, packet-too-big, time-exceeded, parameter-problem} ct state related accept
//
// one rule per type.
func ICMPErrorRules() []RuleSpec {
	var rules []RuleSpec
	for _, e := range []namedType{{"destination unreachable", 3}, {"time exceeded", 11}, {"parameter problem", 12}} {
		rules = append(rules, Rule("icmp "+e.name+" related to a flow is accepted",
			NFProtoIPv4(), L4Proto(unix.IPPROTO_ICMP), ICMPType(e.typ), CtState(expr.CtStateBitRELATED), Accept()))
	}
	for _, e := range []namedType{{"destination unreachable", 1}, {"packet too big", 2}, {"time exceeded", 3}, {"parameter problem", 4}} {
		rules = append(rules, Rule("icmpv6 "+e.name+" related to a flow is accepted",
			NFProtoIPv6(), L4Proto(unix.IPPROTO_ICMPV6), ICMPType(e.typ), CtState(expr.CtStateBitRELATED), Accept()))
	}
	return rules
}

// NDDest is a destination that NDRules accept neighbour discovery to: its
// match, and the words that name it in a rule's comment ("to the host").
type NDDest struct {
	Name  string
	Match []expr.Any
}

// NDRules accept router and neighbour solicitations and neighbour
// advertisements, which carry hop limit 255 (RFC 4861 7.1):
//
//	icmpv6 type {nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert} ip6 hoplimit 255 [DEST] accept
//
// one rule per type, or, where dests are given, one per type and
// destination.
func NDRules(dests ...NDDest) []RuleSpec {
	var rules []RuleSpec
	for _, m := range []namedType{
		{"router solicitation", ICMPv6RouterSolicit},
		{"neighbour solicitation", ICMPv6NeighSolicit},
		{"neighbour advertisement", ICMPv6NeighAdvert},
	} {
		nd := slices.Concat(NFProtoIPv6(), L4Proto(unix.IPPROTO_ICMPV6), ICMPType(m.typ), HopLimit(255))
		if len(dests) == 0 {
			rules = append(rules, Rule("ipv6 "+m.name+" is accepted", nd, Accept()))
		}
		for _, d := range dests {
			rules = append(rules, Rule("ipv6 "+m.name+" "+d.Name+" is accepted", nd, d.Match, Accept()))
		}
	}
	return rules
}

// MLDRules accept the MLD reports and dones IPv6 needs on the link: they
// carry hop limit 1 (RFC 3810 5), which no router forwards.
//
//	icmpv6 type {mld-listener-report, mld-listener-done, mld2-listener-report} ip6 hoplimit 1 accept
//
// one rule per type.
func MLDRules() []RuleSpec {
	var rules []RuleSpec
	for _, m := range []namedType{{"mld report", ICMPv6MLDReport}, {"mld done", ICMPv6MLDDone}, {"mldv2 report", ICMPv6MLDv2Report}} {
		rules = append(rules, Rule("ipv6 "+m.name+" is accepted",
			NFProtoIPv6(), L4Proto(unix.IPPROTO_ICMPV6), ICMPType(m.typ), HopLimit(1), Accept()))
	}
	return rules
}
