package hostlayer

import (
	"fmt"
	"slices"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// This file holds the shapes of the address resolution frames a sandbox
// may send on a bridge: ARP, and IPv6 neighbour discovery and MLD. The
// bridge floods them (broadcast, link-local multicast) to the host and to
// every port that is not a sandbox's (port isolation keeps them from the
// sandboxes'), and whatever they carry beyond what address resolution
// needs would be a channel: a trailer after the ARP packet, options and
// bytes after the IPv6 payload, MLD's auxiliary data and sources. So each
// is held to the exact layout the kernel sends, byte counts included.
// The rules are shared by every sandbox: two regular chains of table
// bridge doorman-host, which each sandbox chain jumps to for ARP and for
// ICMPv6. They only drop; what they let pass goes on through the sandbox
// chain (its identity pins), and the IPv6 through table inet
// doorman-host.

// Names of the shared chains.
const (
	chainARPShape = "arp-shape"
	chainNDShape  = "nd-shape"
)

// Lengths of the shapes, in bytes.
const (
	// arpLen is an ARP packet for IPv4 over Ethernet (RFC 826), as
	// `meta len` counts it on a bridge: after the Ethernet header.
	arpLen = 28
	// arpPaddedLen is what an ARP packet padded to Ethernet's minimum
	// frame (60 bytes without the frame check sequence) counts.
	arpPaddedLen = 60 - 14
	// ipv6HeaderLen is the fixed IPv6 header.
	ipv6HeaderLen = 40
	// hopByHopLen is the hop-by-hop header of an MLD message: the router
	// alert option and two bytes of padding (RFC 3810 5, RFC 2711).
	hopByHopLen = 8
	// lladdrOptLen is a link-layer address option for Ethernet, and the
	// nonce option of duplicate address detection (RFC 4861 4.6.1, RFC
	// 7527 4): type, length 1 (8 bytes), six bytes.
	lladdrOptLen = 8
	// mldLen is an MLDv1 report or done (RFC 2710 3).
	mldLen = 24
	// mldv2HeaderLen and mldv2RecordLen are the header of an MLDv2 report
	// and one record with no sources and no auxiliary data (RFC 3810
	// 5.2).
	mldv2HeaderLen = 8
	mldv2RecordLen = 20
	// maxMLDv2Records bounds the records of an MLDv2 report. Linux puts
	// every change it has to report in one (a link coming up joins the
	// solicited-node group of each address); more than this many groups
	// at once does not happen on a sandbox's link.
	maxMLDv2Records = 8
)

// ND option types (RFC 4861 4.6, RFC 7527 4).
const (
	optSourceLLAddr = 1
	optTargetLLAddr = 2
	optNonce        = 14
)

// mldHopByHop is the hop-by-hop header of every MLD message Linux sends:
// next header ICMPv6, length 0 (8 bytes), router alert (type 5, length
// 2, value 0: MLD), PadN of length 0.
var mldHopByHop = []byte{unix.IPPROTO_ICMPV6, 0, 5, 2, 0, 0, 1, 0}

// ndShape is one neighbour discovery message a sandbox may send: its
// type, its length without options, the one option it may carry (the
// types allowed), and which bits of its code and of the four bytes after
// the checksum may be set (none, but the flags of an advertisement).
type ndShape struct {
	name   string
	typ    byte
	length uint32
	opts   []byte
	// lladdr is the option among opts that carries a link-layer
	// address, which must be the sandbox's MAC.
	lladdr byte
	// headMask covers the code, the checksum and the four bytes after
	// it; a set bit must be zero (the checksum's bits are clear).
	headMask []byte
}

// ndShapes are router solicitations (RFC 4861 4.1: reserved, then a
// source link-layer address option unless the source is ::), neighbour
// solicitations (4.3: reserved, target, then the source link-layer
// address option, or for duplicate address detection a nonce, RFC 7527)
// and neighbour advertisements (4.4: router, solicited and override
// flags, target, then the target link-layer address option).
var ndShapes = []ndShape{
	{name: "router solicitation", typ: nft.ICMPv6RouterSolicit, length: 8,
		opts: []byte{optSourceLLAddr}, lladdr: optSourceLLAddr,
		headMask: []byte{0xff, 0, 0, 0xff, 0xff, 0xff, 0xff}},
	{name: "neighbour solicitation", typ: nft.ICMPv6NeighSolicit, length: 24,
		opts: []byte{optSourceLLAddr, optNonce}, lladdr: optSourceLLAddr,
		headMask: []byte{0xff, 0, 0, 0xff, 0xff, 0xff, 0xff}},
	{name: "neighbour advertisement", typ: nft.ICMPv6NeighAdvert, length: 24,
		opts: []byte{optTargetLLAddr}, lladdr: optTargetLLAddr,
		headMask: []byte{0xff, 0, 0, 0x1f, 0xff, 0xff, 0xff}},
}

// arpShapeRules is chain arp-shape: an ARP frame is a request or a reply
// of exactly 28 bytes, or of 46 whose last 18 are zeros (the padding of a
// minimal Ethernet frame, as some senders add it).
//
//	arp operation != {request, reply} drop
//	meta len != {28, 46} drop
//	meta len 46 @nh,224,128 != 0 drop
//	meta len 46 @nh,352,16 != 0 drop
func arpShapeRules() []nft.RuleSpec {
	pad := uint32(arpPaddedLen)
	return []nft.RuleSpec{
		nft.Rule("arp other than requests and replies is dropped",
			fieldNot(fieldARPOp, be16(1), be16(2)), nft.Drop()),
		nft.Rule(fmt.Sprintf("arp of other lengths than %d bytes, or %d padded, is dropped", arpLen, pad),
			lenNot(arpLen, pad), nft.Drop()),
		nft.Rule("arp padded with other bytes than zeros is dropped (1 of 2)",
			matchLen(pad), fieldARPPad.Neq(make([]byte, fieldARPPad.Len)), nft.Drop()),
		nft.Rule("arp padded with other bytes than zeros is dropped (2 of 2)",
			matchLen(pad), fieldARPPadTail.Neq(make([]byte, fieldARPPadTail.Len)), nft.Drop()),
	}
}

// ndShapeRules is chain nd-shape: the neighbour discovery messages of
// ndShapes and MLD reports and dones, each to its exact layout. The IPv6
// header is followed by the message itself (no extension header but
// MLD's hop-by-hop), and the frame ends where the IPv6 payload does: the
// payload length and `meta len` (the IPv6 header and payload, and
// whatever follows them in the frame) are compared together, as one
// concatenation, with the pairs the shape allows.
//
//	icmpv6 type T ip6 nexthdr != ipv6-icmp drop
//	icmpv6 type T @th,8,56 & MASK != 0 drop                     code and reserved
//	icmpv6 type T ip6 length . meta len != {L . 40+L, L+8 . 48+L} drop
//	icmpv6 type T meta len 48+L @th,L*8,16 != {OPTIONS} drop
//	icmpv6 type T meta len 48+L @th,L*8,16 LLADDR-OPTION meta iif . @th,(L+2)*8,48 != @sandbox-port-macs drop
//
// then mldShapeRules.
func ndShapeRules() []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, s := range ndShapes {
		typ := icmpv6Type(s.typ)
		short, long := s.length, s.length+lladdrOptLen
		var opts [][]byte
		for _, o := range s.opts {
			opts = append(opts, []byte{o, 1})
		}
		rules = append(rules,
			nft.Rule(s.name+" with extension headers is dropped",
				typ, fieldIPv6NextHdr.Neq([]byte{unix.IPPROTO_ICMPV6}), nft.Drop()),
			nft.Rule(s.name+" with a code or reserved bits set is dropped",
				typ, maskedNonZero(fieldICMPv6Head, s.headMask), nft.Drop()),
			nft.Rule(fmt.Sprintf("%s of other lengths than %d bytes, or %d with one option, or with bytes after it is dropped", s.name, short, long),
				typ, payloadLenNot(nil, short, long), nft.Drop()),
			nft.Rule(fmt.Sprintf("%s with another option than %v is dropped", s.name, s.opts),
				typ, matchLen(ipv6HeaderLen+long), fieldNot(ndOption(s.length), opts...), nft.Drop()),
			nft.Rule(s.name+" whose link-layer address option is not the sandbox's mac is dropped",
				typ, matchLen(ipv6HeaderLen+long), ndOption(s.length).Eq([]byte{s.lladdr, 1}),
				matchIifField(setPortMACs, optionMAC(s.length), false), nft.Drop()))
	}
	return append(rules, mldShapeRules()...)
}

// mldShapeRules hold MLD to what Linux sends: the hop-by-hop header with
// the router alert (mldHopByHop), then an MLDv1 report or done of 24
// bytes whose delay and reserved fields are zero, or an MLDv2 report with
// 1 to maxMLDv2Records records, none with sources or auxiliary data (a
// join or a leave of a group, RFC 3810 5.2.12), and nothing after them.
//
//	icmpv6 type T ip6 nexthdr != hop-by-hop drop
//	icmpv6 type T @nh,320,64 != 3a00050200000100 drop
//	icmpv6 type {131, 132} @th,8,56 & ff0000ffffffff != 0 drop
//	icmpv6 type {131, 132} ip6 length . meta len != 32 . 72 drop
//	icmpv6 type 143 @th,8,40 & ff0000ffff != 0 drop
//	icmpv6 type 143 @th,48,16 . ip6 length . meta len != {M . 16+20*M . 56+20*M: M in 1..8} drop
//	icmpv6 type 143 @th,48,16 >= I+1 @th,(8+20*I+1)*8,24 != 0 drop   for I in 0..7
func mldShapeRules() []nft.RuleSpec {
	var rules []nft.RuleSpec
	v1Len := uint32(hopByHopLen + mldLen)
	for _, m := range []struct {
		name string
		typ  byte
	}{{"mld report", nft.ICMPv6MLDReport}, {"mld done", nft.ICMPv6MLDDone}, {"mldv2 report", nft.ICMPv6MLDv2Report}} {
		typ := icmpv6Type(m.typ)
		rules = append(rules,
			nft.Rule(m.name+" without mld's hop-by-hop header is dropped",
				typ, fieldIPv6NextHdr.Neq([]byte{unix.IPPROTO_HOPOPTS}), nft.Drop()),
			nft.Rule(m.name+" whose hop-by-hop header is not the router alert alone is dropped",
				typ, fieldHopByHop.Neq(mldHopByHop), nft.Drop()))
		if m.typ == nft.ICMPv6MLDv2Report {
			continue
		}
		rules = append(rules,
			nft.Rule(m.name+" with a code, delay or reserved bits set is dropped",
				typ, maskedNonZero(fieldICMPv6Head, []byte{0xff, 0, 0, 0xff, 0xff, 0xff, 0xff}), nft.Drop()),
			nft.Rule(fmt.Sprintf("%s of other lengths than %d bytes, or with bytes after it, is dropped", m.name, mldLen),
				typ, payloadLenNot(nil, v1Len), nft.Drop()))
	}
	v2 := icmpv6Type(nft.ICMPv6MLDv2Report)
	var lens []uint32
	var nrecs [][]byte
	for m := 1; m <= maxMLDv2Records; m++ {
		lens = append(lens, uint32(hopByHopLen+mldv2HeaderLen+mldv2RecordLen*m))
		nrecs = append(nrecs, be16(uint16(m)))
	}
	rules = append(rules,
		nft.Rule("mldv2 report with a code or reserved bits set is dropped",
			v2, maskedNonZero(fieldMLDv2Head, []byte{0xff, 0, 0, 0xff, 0xff}), nft.Drop()),
		nft.Rule(fmt.Sprintf("mldv2 report of other than 1 to %d records of 20 bytes, or with bytes after them, is dropped", maxMLDv2Records),
			v2, payloadLenNotPairs(&fieldMLDv2Nrec, nrecs, lens), nft.Drop()))
	for i := range maxMLDv2Records {
		rules = append(rules, nft.Rule(fmt.Sprintf("mldv2 report whose record %d has sources or auxiliary data is dropped", i+1),
			v2, fieldCmp(fieldMLDv2Nrec, expr.CmpOpGte, be16(uint16(i+1))), mldv2Record(i).Neq(make([]byte, 3)), nft.Drop()))
	}
	return rules
}

// payloadLenNot is `[FIELD .] ip6 length . meta len != {[V .] L . 40+L...}`
// for the payload lengths ls (and, with first, the same value v of the
// field in front of each).
func payloadLenNot(first *nft.Field, ls ...uint32) []expr.Any {
	return payloadLenNotPairs(first, nil, ls)
}

// payloadLenNotPairs is payloadLenNot with a value of first for each
// length: `FIELD . ip6 length . meta len != {V1 . L1 . 40+L1, V2 . L2 .
// 40+L2...}`. Each part takes whole 32-bit registers from register 1 on,
// as concatenations do: a field of 2 bytes is followed by two zeros, meta
// len is a 32-bit number in host byte order.
func payloadLenNotPairs(first *nft.Field, firsts [][]byte, ls []uint32) []expr.Any {
	var out []expr.Any
	reg := uint32(unix.NFT_REG32_00)
	load := func(e expr.Any) {
		out = append(out, e)
		reg++
	}
	if first != nil {
		load(first.Load(reg))
	}
	load(fieldIPv6Len.Load(reg))
	load(&expr.Meta{Key: expr.MetaKeyLEN, Register: reg})
	// The first load goes to register 1 as a whole: the kernel reports
	// the 32-bit register it starts at as register 1.
	switch e := out[0].(type) {
	case *expr.Payload:
		e.DestRegister = nft.Reg
	}
	for i, l := range ls {
		var v []byte
		if first != nil {
			v = append(v, pad4(firsts[i])...)
		}
		v = append(v, pad4(be16(uint16(l)))...)
		v = append(v, binaryutil.NativeEndian.PutUint32(ipv6HeaderLen+l)...)
		out = append(out, nft.Neq(v))
	}
	return out
}

// pad4 pads b with zeros to a whole 32-bit register.
func pad4(b []byte) []byte {
	return append(slices.Clone(b), make([]byte, (4-len(b)%4)%4)...)
}

// icmpv6Type is `meta l4proto ipv6-icmp icmpv6 type T`.
func icmpv6Type(t byte) []expr.Any {
	return slices.Concat(nft.L4Proto(unix.IPPROTO_ICMPV6), nft.ICMPType(t))
}

// lenNot is `meta len != {N1, N2...}`.
func lenNot(ns ...uint32) []expr.Any {
	out := []expr.Any{&expr.Meta{Key: expr.MetaKeyLEN, Register: nft.Reg}}
	for _, n := range ns {
		out = append(out, nft.Neq(binaryutil.NativeEndian.PutUint32(n)))
	}
	return out
}

func be16(v uint16) []byte { return binaryutil.BigEndian.PutUint16(v) }

// shapeJumps are the sandbox chain's jumps to the shared chains: ARP to
// arp-shape, ICMPv6 to nd-shape.
func shapeJumps() (arp, nd nft.RuleSpec) {
	return nft.Rule("arp is held to its shape", matchEtherType(unix.ETH_P_ARP), jump(chainARPShape)),
		nft.Rule("icmpv6 is held to the shapes of neighbour discovery and mld",
			matchEtherType(unix.ETH_P_IPV6), nft.L4Proto(unix.IPPROTO_ICMPV6), jump(chainNDShape))
}

// jump is the verdict `jump CHAIN`.
func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}
