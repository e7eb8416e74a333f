package enforce

import (
	"net"
	"net/netip"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// This file builds the nftables expressions of the ruleset, the same ones
// the nft command generates for the matches named in each function's
// comment. Everything loads into register 1 and compares it at once.

const (
	// reg is the register every match loads into.
	reg = 1

	// ipsDstNAT is IPS_DST_NAT of linux/netfilter/nf_conntrack_common.h,
	// set on a conntrack entry by redirect and dnat.
	ipsDstNAT = 1 << 5

	// ifNameSize is IFNAMSIZ: nft compares interface names as 16 bytes.
	ifNameSize = 16
)

// ICMPv6 types (RFC 4443, 4861, 3810) that IPv6 needs on the link.
const (
	icmpv6MLDReport     = 131
	icmpv6MLDDone       = 132
	icmpv6RouterSolicit = 133
	icmpv6NeighSolicit  = 135
	icmpv6NeighAdvert   = 136
	icmpv6MLDv2Report   = 143
)

// ICMP and ICMPv6 echo requests (RFC 792, 4443).
const (
	icmpEchoRequest   = 8
	icmpv6EchoRequest = 128
)

// Echo size limits of Spec.AllowICMP: at most maxEchoData bytes after the
// 8-byte echo header, so that an echo cannot carry a tunnel's payload.
// IPv4 counts the total length of a packet without options (ihl 5),
// IPv6 the payload length (which includes any extension header).
const (
	maxEchoData      = 64
	icmpHeaderLen    = 8
	ipv4HeaderLen    = 20
	maxEchoIPv4Total = ipv4HeaderLen + icmpHeaderLen + maxEchoData
	maxEchoIPv6Plen  = icmpHeaderLen + maxEchoData
)

// icmpError is an ICMP or ICMPv6 error type that keeps admitted flows
// working: unreachable (and PMTU's fragmentation needed), time exceeded,
// parameter problem; ICMPv6 packet too big. Source quench and redirect
// (IPv4), which conntrack also relates to a flow, are not among them.
type icmpError struct {
	name string
	typ  byte
}

var (
	icmpErrors = []icmpError{
		{"destination unreachable", 3}, {"time exceeded", 11}, {"parameter problem", 12},
	}
	icmpv6Errors = []icmpError{
		{"destination unreachable", 1}, {"packet too big", 2}, {"time exceeded", 3}, {"parameter problem", 4},
	}
)

func load(e expr.Any, cmp ...*expr.Cmp) []expr.Any {
	out := []expr.Any{e}
	for _, c := range cmp {
		out = append(out, c)
	}
	return out
}

func cmp(op expr.CmpOp, data []byte) *expr.Cmp {
	return &expr.Cmp{Op: op, Register: reg, Data: data}
}

// matchNFProto is `meta nfproto ipv4|ipv6`.
func matchNFProto(a netip.Addr) []expr.Any {
	proto := byte(unix.NFPROTO_IPV6)
	if a.Is4() {
		proto = unix.NFPROTO_IPV4
	}
	return load(&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg}, cmp(expr.CmpOpEq, []byte{proto}))
}

// matchL4Proto is `meta l4proto tcp|udp|icmp|ipv6-icmp`.
func matchL4Proto(proto byte) []expr.Any {
	return load(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg}, cmp(expr.CmpOpEq, []byte{proto}))
}

// matchDport is `th dport N`; it must follow matchL4Proto of TCP or UDP.
func matchDport(port uint16) []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		cmp(expr.CmpOpEq, binaryutil.BigEndian.PutUint16(port)))
}

// matchDaddr is `ip daddr A` or `ip6 daddr A`, with its nfproto match.
func matchDaddr(a netip.Addr) []expr.Any {
	offset, size := uint32(16), uint32(4) // struct iphdr daddr
	if !a.Is4() {
		offset, size = 24, 16 // struct ipv6hdr daddr
	}
	return append(matchNFProto(a),
		load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size},
			cmp(expr.CmpOpEq, a.AsSlice()))...)
}

// matchOifname is `meta oifname NAME`.
func matchOifname(name string) []expr.Any {
	b := make([]byte, ifNameSize)
	copy(b, name)
	return load(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: reg}, cmp(expr.CmpOpEq, b))
}

// matchCtBits is `ct state|status B1,B2...`: the key's bits masked with
// bits are not all zero.
func matchCtBits(key expr.CtKey, bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: key, Register: reg},
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		cmp(expr.CmpOpNeq, make([]byte, 4)),
	}
}

// matchFibDaddrNotLocal is `fib daddr type != local`.
func matchFibDaddrNotLocal() []expr.Any {
	return load(&expr.Fib{Register: reg, FlagDADDR: true, ResultADDRTYPE: true},
		cmp(expr.CmpOpNeq, binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)))
}

// matchNotL4Proto is `meta l4proto != { P1, P2... }`.
func matchNotL4Proto(protos ...byte) []expr.Any {
	out := []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg}}
	for _, p := range protos {
		out = append(out, cmp(expr.CmpOpNeq, []byte{p}))
	}
	return out
}

// matchICMPType is `icmp type T` or `icmpv6 type T`; it must follow
// matchL4Proto(IPPROTO_ICMP) or matchL4Proto(IPPROTO_ICMPV6).
func matchICMPType(typ byte) []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		cmp(expr.CmpOpEq, []byte{typ}))
}

// matchICMPv6Type is `icmpv6 type T`; it must follow matchL4Proto(IPPROTO_ICMPV6).
func matchICMPv6Type(typ byte) []expr.Any { return matchICMPType(typ) }

// ipCTDirReply is IP_CT_DIR_REPLY of linux/netfilter/nf_conntrack_tuple_common.h.
const ipCTDirReply = 1

// matchCtReply is `ct direction reply`: the packet goes in the reply
// direction of a connection the other side opened.
func matchCtReply() []expr.Any {
	return load(&expr.Ct{Key: expr.CtKeyDIRECTION, Register: reg}, cmp(expr.CmpOpEq, []byte{ipCTDirReply}))
}

// matchIPv4NoOptions is `ip version 4 ip hdrlength 5`: the first byte of
// the header, 0x45.
func matchIPv4NoOptions() []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 1},
		cmp(expr.CmpOpEq, []byte{0x45}))
}

// matchIPLength is `ip length LO-HI` (IPv4 total length) or `ip6 length
// LO-HI` (IPv6 payload length).
func matchIPLength(v6 bool, lo, hi uint16) []expr.Any {
	offset := uint32(2) // struct iphdr tot_len
	if v6 {
		offset = 4 // struct ipv6hdr payload_len
	}
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 2},
		cmp(expr.CmpOpGte, binaryutil.BigEndian.PutUint16(lo)),
		cmp(expr.CmpOpLte, binaryutil.BigEndian.PutUint16(hi)))
}

// matchHopLimit is `ip6 hoplimit N`.
func matchHopLimit(n byte) []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: 7, Len: 1},
		cmp(expr.CmpOpEq, []byte{n}))
}

// redirectTo is `redirect to :PORT`. The proto-max register and the
// PROTO_SPECIFIED flag are what the kernel fills in itself, spelled out so
// that the rule reads back exactly as written (see Check).
func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: reg, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: reg, RegisterProtoMax: reg, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

// rejectTCPReset is `reject with tcp reset`.
func rejectTCPReset() expr.Any {
	return &expr.Reject{Type: unix.NFT_REJECT_TCP_RST}
}

// rejectAdminProhibited is `reject with icmpx admin-prohibited`.
func rejectAdminProhibited() expr.Any {
	return &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
}

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

// matchDprefix is `ip[6] daddr PREFIX`, with its nfproto match.
func matchDprefix(p netip.Prefix) []expr.Any {
	a := p.Addr()
	offset, size := uint32(16), uint32(4)
	if !a.Is4() {
		offset, size = 24, 16
	}
	mask := net.CIDRMask(p.Bits(), int(size)*8)
	return append(matchNFProto(a),
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size},
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: size, Mask: mask, Xor: make([]byte, size)},
		cmp(expr.CmpOpEq, p.Masked().Addr().AsSlice()))
}

// matchDirect is `ip[6] daddr PREFIX meta l4proto P th dport LO-HI` for one
// allowDirect destination.
func matchDirect(d Direct, proto byte) []expr.Any {
	out := append(matchDprefix(d.Prefix), matchL4Proto(proto)...)
	if d.PortLo != 0 || d.PortHi != 0 {
		out = append(out,
			&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			cmp(expr.CmpOpGte, binaryutil.BigEndian.PutUint16(d.PortLo)),
			cmp(expr.CmpOpLte, binaryutil.BigEndian.PutUint16(d.PortHi)))
	}
	return out
}
