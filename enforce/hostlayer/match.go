package hostlayer

import (
	"net/netip"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// This file builds the nftables expressions of the layer, the same ones
// the nft command generates for the matches named in each function's
// comment. Everything loads into register 1 and compares it at once.

// reg is the register every match loads into.
const reg = 1

// ICMPv6 types (RFC 4861, 3810) that IPv6 needs on the link.
const (
	icmpv6MLDReport     = 131
	icmpv6MLDDone       = 132
	icmpv6RouterSolicit = 133
	icmpv6NeighSolicit  = 135
	icmpv6NeighAdvert   = 136
	icmpv6MLDv2Report   = 143
)

// ICMP and ICMPv6 types the layer names (RFC 792, 4443, 4861).
const (
	icmpEchoRequest      = 8
	icmpv6EchoRequest    = 128
	icmpv6RouterAdvert   = 134
	icmpv6Redirect       = 137
	icmpv6NeighTargetOff = 8 // the target address of a solicitation or advertisement
)

// Echo size limits of Spec.AllowICMP: at most maxEchoData bytes after the
// 8-byte echo header. IPv4 counts the total length of a packet without
// options (ihl 5), IPv6 the payload length (extension headers included).
const (
	maxEchoData      = 64
	icmpHeaderLen    = 8
	ipv4HeaderLen    = 20
	maxEchoIPv4Total = ipv4HeaderLen + icmpHeaderLen + maxEchoData
	maxEchoIPv6Plen  = icmpHeaderLen + maxEchoData
)

// icmpError is an ICMP or ICMPv6 error type that keeps admitted flows
// working. Source quench and redirect, which conntrack relates to a flow
// too, are not among them.
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

// ipCTDirReply is IP_CT_DIR_REPLY of linux/netfilter/nf_conntrack_tuple_common.h.
const ipCTDirReply = 1

func load(e expr.Any, cmps ...expr.Any) []expr.Any { return append([]expr.Any{e}, cmps...) }

func cmpEq(data []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: data} }

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

func accept() []expr.Any { return []expr.Any{verdict(expr.VerdictAccept)} }
func drop() []expr.Any   { return []expr.Any{verdict(expr.VerdictDrop)} }

// dispatchIface is `meta iif vmap @SET`.
func dispatchIface(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: reg},
		&expr.Lookup{SourceRegister: reg, DestRegister: unix.NFT_REG_VERDICT, IsDestRegSet: true, SetName: set},
	}
}

// dispatchIfaceMAC is `meta iif . ether saddr vmap @SET`: the index goes
// to the first 32-bit register (which is where register 1 starts, and the
// kernel reports it as register 1), the 6-byte MAC to the next two.
func dispatchIfaceMAC(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: reg},
		&expr.Payload{DestRegister: unix.NFT_REG32_01, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
		&expr.Lookup{SourceRegister: reg, DestRegister: unix.NFT_REG_VERDICT, IsDestRegSet: true, SetName: set},
	}
}

// matchIfaceIn is `meta iif @SET`.
func matchIfaceIn(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: reg},
		&expr.Lookup{SourceRegister: reg, SetName: set},
	}
}

// matchOifIn is `meta oif @SET`.
func matchOifIn(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIF, Register: reg},
		&expr.Lookup{SourceRegister: reg, SetName: set},
	}
}

// matchOifMACNotIn is `meta oif . ether daddr != @SET`, loaded as
// dispatchIfaceMAC loads its key.
func matchOifMACNotIn(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIF, Register: reg},
		&expr.Payload{DestRegister: unix.NFT_REG32_01, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6},
		&expr.Lookup{SourceRegister: reg, SetName: set, Invert: true},
	}
}

// matchEtherDaddrUnicast is `ether daddr & 01:00:00:00:00:00 == 0`: the
// group bit of the destination is clear.
func matchEtherDaddrUnicast() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 1},
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 1, Mask: []byte{1}, Xor: []byte{0}},
		cmpEq([]byte{0}),
	}
}

// matchIif is `meta iif INDEX`.
func matchIif(index int) []expr.Any {
	return load(&expr.Meta{Key: expr.MetaKeyIIF, Register: reg}, cmpEq(binaryutil.NativeEndian.PutUint32(uint32(index))))
}

// matchEtherSaddrNot is `ether saddr != MAC`.
func matchEtherSaddrNot(mac []byte) []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: mac})
}

// matchNFProto is `meta nfproto ipv4|ipv6`.
func matchNFProto(v6 bool) []expr.Any {
	proto := byte(unix.NFPROTO_IPV4)
	if v6 {
		proto = unix.NFPROTO_IPV6
	}
	return load(&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg}, cmpEq([]byte{proto}))
}

// matchL4Proto is `meta l4proto tcp|udp|icmp|ipv6-icmp`.
func matchL4Proto(proto byte) []expr.Any {
	return load(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg}, cmpEq([]byte{proto}))
}

// matchDport is `th dport N` (lo == hi) or `th dport lo-hi`; it must
// follow matchL4Proto of TCP or UDP.
func matchDport(lo, hi uint16) []expr.Any {
	p := &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
	if lo == hi {
		return load(p, cmpEq(binaryutil.BigEndian.PutUint16(lo)))
	}
	return load(p, &expr.Range{Op: expr.CmpOpEq, Register: reg,
		FromData: binaryutil.BigEndian.PutUint16(lo), ToData: binaryutil.BigEndian.PutUint16(hi)})
}

// matchDaddr is `ip daddr A` or `ip6 daddr A`, with its nfproto match.
func matchDaddr(a netip.Addr) []expr.Any {
	return matchDprefix(netip.PrefixFrom(a, a.BitLen()))
}

// matchDprefix is `ip daddr P` or `ip6 daddr P` for a masked prefix, with
// its nfproto match; a /0 is the nfproto match alone.
func matchDprefix(p netip.Prefix) []expr.Any {
	v6 := p.Addr().Is6()
	out := matchNFProto(v6)
	if p.Bits() == 0 {
		return out
	}
	offset, size := uint32(16), uint32(4) // struct iphdr daddr
	if v6 {
		offset, size = 24, 16 // struct ipv6hdr daddr
	}
	out = append(out, &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size})
	if p.Bits() < p.Addr().BitLen() {
		out = append(out, &expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: size,
			Mask: prefixMask(p.Bits(), int(size)), Xor: make([]byte, size)})
	}
	return append(out, cmpEq(p.Masked().Addr().AsSlice()))
}

// prefixMask is the netmask of a /bits prefix, size bytes long.
func prefixMask(bits, size int) []byte {
	m := make([]byte, size)
	for i := range m {
		switch {
		case bits >= 8:
			m[i], bits = 0xff, bits-8
		case bits > 0:
			m[i], bits = ^byte(0xff>>bits), 0
		}
	}
	return m
}

// matchICMPv6Type is `icmpv6 type T`, or `icmp type T` after
// matchL4Proto(IPPROTO_ICMP); it must follow matchL4Proto.
func matchICMPv6Type(typ byte) []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		cmpEq([]byte{typ}))
}

// matchICMPTypeNot is `icmpv6 type != { T1, T2... }`; it must follow
// matchL4Proto.
func matchICMPTypeNot(types ...byte) []expr.Any {
	out := []expr.Any{&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1}}
	for _, t := range types {
		out = append(out, &expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: []byte{t}})
	}
	return out
}

// matchNotL4Proto is `meta l4proto != P`.
func matchNotL4Proto(proto byte) []expr.Any {
	return load(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg}, &expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: []byte{proto}})
}

// matchCtState is `ct state B1,B2...`: the state's bits masked with bits
// are not all zero.
func matchCtState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg},
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: make([]byte, 4)},
	}
}

// matchIPv4NoOptions is `ip version 4 ip hdrlength 5`: the first byte of
// the header, 0x45.
func matchIPv4NoOptions() []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 1}, cmpEq([]byte{0x45}))
}

// matchIPLength is `ip length LO-HI` (IPv4 total length) or `ip6 length
// LO-HI` (IPv6 payload length).
func matchIPLength(v6 bool, lo, hi uint16) []expr.Any {
	offset := uint32(2) // struct iphdr tot_len
	if v6 {
		offset = 4 // struct ipv6hdr payload_len
	}
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 2},
		&expr.Range{Op: expr.CmpOpEq, Register: reg,
			FromData: binaryutil.BigEndian.PutUint16(lo), ToData: binaryutil.BigEndian.PutUint16(hi)})
}

// Where the fields the pins name lie: the IPv4 and IPv6 source addresses
// in the network header, the sender's addresses in an ARP header (the
// network header of a bridge frame), the target of a neighbour
// solicitation or advertisement in the transport header.
var (
	fieldIPv4Saddr = field{expr.PayloadBaseNetworkHeader, 12, 4}
	fieldIPv6Saddr = field{expr.PayloadBaseNetworkHeader, 8, 16}
	fieldARPHType  = field{expr.PayloadBaseNetworkHeader, 0, 2}
	fieldARPPType  = field{expr.PayloadBaseNetworkHeader, 2, 2}
	fieldARPHLen   = field{expr.PayloadBaseNetworkHeader, 4, 1}
	fieldARPPLen   = field{expr.PayloadBaseNetworkHeader, 5, 1}
	fieldARPSha    = field{expr.PayloadBaseNetworkHeader, 8, 6}
	fieldARPSpa    = field{expr.PayloadBaseNetworkHeader, 14, 4}
	fieldNDTarget  = field{expr.PayloadBaseTransportHeader, icmpv6NeighTargetOff, 16}
)

// field is a part of the packet a rule reads.
type field struct {
	base        expr.PayloadBase
	offset, len uint32
}

func (f field) load(dest uint32) *expr.Payload {
	return &expr.Payload{DestRegister: dest, Base: f.base, Offset: f.offset, Len: f.len}
}

// matchField is `FIELD == V` (eq) or `FIELD != V`.
func matchField(f field, eq bool, v []byte) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return load(f.load(reg), &expr.Cmp{Op: op, Register: reg, Data: v})
}

// matchIifField is `meta iif . FIELD @SET` (in) or `meta iif . FIELD !=
// @SET`: the index goes to the first 32-bit register (where register 1
// starts, which the kernel reports as register 1), the field to the ones
// after it, as dispatchIfaceMAC loads them.
func matchIifField(set string, f field, in bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: reg},
		f.load(unix.NFT_REG32_01),
		&expr.Lookup{SourceRegister: reg, SetName: set, Invert: !in},
	}
}

// matchHopLimit is `ip6 hoplimit N`.
func matchHopLimit(n byte) []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: 7, Len: 1},
		cmpEq([]byte{n}))
}

// matchFibDaddrLocal is `fib daddr type local`: the packet is for the
// host itself.
func matchFibDaddrLocal() []expr.Any {
	return load(&expr.Fib{Register: reg, FlagDADDR: true, ResultADDRTYPE: true},
		cmpEq(binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)))
}

// matchFibDaddrOnInputLink is `fib daddr . iif oif != 0`: the route to the
// destination leaves through the interface the packet came in on.
func matchFibDaddrOnInputLink() []expr.Any {
	return load(&expr.Fib{Register: reg, FlagDADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg, Data: make([]byte, 4)})
}

// matchCtReply is `ct direction reply`: the packet goes in the reply
// direction of a connection the other side opened. A packet without
// conntrack entry (invalid, untracked) does not match.
func matchCtReply() []expr.Any {
	return load(&expr.Ct{Key: expr.CtKeyDIRECTION, Register: reg}, cmpEq([]byte{ipCTDirReply}))
}

// matchEtherType is `ether type T`. It reads the type field of the frame
// as sent: for a VLAN-tagged frame the kernel puts the tag back into the
// header it reads from, so the type is 802.1Q, not the type inside.
func matchEtherType(typ uint16) []expr.Any {
	return load(&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseLLHeader, Offset: 12, Len: 2},
		cmpEq(binaryutil.BigEndian.PutUint16(typ)))
}
