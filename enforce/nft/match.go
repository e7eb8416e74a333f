package nft

import (
	"net/netip"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Reg is the register every match loads into: register 1, the first of
// the four 128-bit registers (NFT_REG_1).
const Reg = 1

// IfNameSize is IFNAMSIZ: an interface name has at most 15 bytes, and nft
// compares interface names as 16, padded with zeros.
const IfNameSize = 16

// ipCTDirReply is IP_CT_DIR_REPLY of linux/netfilter/nf_conntrack_tuple_common.h.
const ipCTDirReply = 1

// Load is e, which loads a value into Reg, followed by the comparisons
// (Cmp, Range) that judge the value.
func Load(e expr.Any, cmps ...expr.Any) []expr.Any {
	return append([]expr.Any{e}, cmps...)
}

// Eq compares Reg with v: `== V`.
func Eq(v []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpEq, Register: Reg, Data: v} }

// Neq compares Reg with v: `!= V`.
func Neq(v []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpNeq, Register: Reg, Data: v} }

// Field is a part of the packet a match reads: a header and the offset
// and length of the field in it, as the payload expression counts them.
type Field struct {
	Base   expr.PayloadBase
	Offset uint32
	Len    uint32
}

// Load is the payload expression that loads f into register dest.
func (f Field) Load(dest uint32) *expr.Payload {
	return &expr.Payload{DestRegister: dest, Base: f.Base, Offset: f.Offset, Len: f.Len}
}

// Eq is `FIELD V`.
func (f Field) Eq(v []byte) []expr.Any { return Load(f.Load(Reg), Eq(v)) }

// Neq is `FIELD != V`.
func (f Field) Neq(v []byte) []expr.Any { return Load(f.Load(Reg), Neq(v)) }

// inRange is `FIELD LO-HI` as one range expression.
func (f Field) inRange(lo, hi []byte) []expr.Any {
	return Load(f.Load(Reg), &expr.Range{Op: expr.CmpOpEq, Register: Reg, FromData: lo, ToData: hi})
}

// between is `FIELD LO-HI` as two comparisons of one load.
func (f Field) between(lo, hi []byte) []expr.Any {
	return Load(f.Load(Reg),
		&expr.Cmp{Op: expr.CmpOpGte, Register: Reg, Data: lo},
		&expr.Cmp{Op: expr.CmpOpLte, Register: Reg, Data: hi})
}

// Header fields that more than one match reads.
var (
	thDport   = Field{expr.PayloadBaseTransportHeader, 2, 2}
	icmpType  = Field{expr.PayloadBaseTransportHeader, 0, 1}
	ipv4First = Field{expr.PayloadBaseNetworkHeader, 0, 1}  // version and ihl
	ipv4Len   = Field{expr.PayloadBaseNetworkHeader, 2, 2}  // struct iphdr tot_len
	ipv6Len   = Field{expr.PayloadBaseNetworkHeader, 4, 2}  // struct ipv6hdr payload_len
	hopLimit  = Field{expr.PayloadBaseNetworkHeader, 7, 1}  // struct ipv6hdr hop_limit
	ipv4Saddr = Field{expr.PayloadBaseNetworkHeader, 12, 4} // struct iphdr saddr
	ipv4Daddr = Field{expr.PayloadBaseNetworkHeader, 16, 4} // struct iphdr daddr
	ipv6Saddr = Field{expr.PayloadBaseNetworkHeader, 8, 16} // struct ipv6hdr saddr
	ipv6Daddr = Field{expr.PayloadBaseNetworkHeader, 24, 16}
)

// IPv4Saddr is the field of `ip saddr`.
func IPv4Saddr() Field { return ipv4Saddr }

// IPv6Saddr is the field of `ip6 saddr`.
func IPv6Saddr() Field { return ipv6Saddr }

// Accept is the verdict `accept`.
func Accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

// Drop is the verdict `drop`.
func Drop() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}} }

// Return is the verdict `return`.
func Return() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}} }

// NFProtoIPv4 is `meta nfproto ipv4`.
func NFProtoIPv4() []expr.Any { return nfproto(false) }

// NFProtoIPv6 is `meta nfproto ipv6`.
func NFProtoIPv6() []expr.Any { return nfproto(true) }

func nfproto(v6 bool) []expr.Any {
	proto := byte(unix.NFPROTO_IPV4)
	if v6 {
		proto = unix.NFPROTO_IPV6
	}
	return Load(&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: Reg}, Eq([]byte{proto}))
}

// L4Proto is `meta l4proto P`.
func L4Proto(proto byte) []expr.Any {
	return Load(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: Reg}, Eq([]byte{proto}))
}

// TCP is `meta l4proto tcp`.
func TCP() []expr.Any { return L4Proto(unix.IPPROTO_TCP) }

// UDP is `meta l4proto udp`.
func UDP() []expr.Any { return L4Proto(unix.IPPROTO_UDP) }

// L4ProtoNot is `meta l4proto != { P1, P2... }`: one load, compared
// unequal to each protocol in turn.
func L4ProtoNot(protos ...byte) []expr.Any {
	out := []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: Reg}}
	for _, p := range protos {
		out = append(out, Neq([]byte{p}))
	}
	return out
}

// OifName is `meta oifname NAME`.
func OifName(name string) []expr.Any {
	return Load(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: Reg}, Eq(ifName(name)))
}

// OifNameNot is `meta oifname != NAME`.
func OifNameNot(name string) []expr.Any {
	return Load(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: Reg}, Neq(ifName(name)))
}

// ifName is name as nft compares it: IfNameSize bytes, padded with zeros.
func ifName(name string) []byte {
	b := make([]byte, IfNameSize)
	copy(b, name)
	return b
}

// Dport is `th dport P`; it must follow L4Proto of TCP or UDP.
func Dport(port uint16) []expr.Any { return thDport.Eq(binaryutil.BigEndian.PutUint16(port)) }

// DportRange is `th dport LO-HI` as one range expression, or `th dport
// LO` if hi is lo; it must follow L4Proto of TCP or UDP. (See "Two
// encodings of one match" in the package doc.)
func DportRange(lo, hi uint16) []expr.Any {
	if lo == hi {
		return Dport(lo)
	}
	return thDport.inRange(binaryutil.BigEndian.PutUint16(lo), binaryutil.BigEndian.PutUint16(hi))
}

// DportBetween is `th dport LO-HI` as two comparisons of one load, `>=
// LO` and `<= HI`; it must follow L4Proto of TCP or UDP. (See "Two
// encodings of one match" in the package doc.)
func DportBetween(lo, hi uint16) []expr.Any {
	return thDport.between(binaryutil.BigEndian.PutUint16(lo), binaryutil.BigEndian.PutUint16(hi))
}

// Daddr is `ip daddr A` or `ip6 daddr A`, with its nfproto match.
func Daddr(a netip.Addr) []expr.Any {
	f := ipv4Daddr
	if !a.Is4() {
		f = ipv6Daddr
	}
	return append(nfproto(!a.Is4()), f.Eq(a.AsSlice())...)
}

// DaddrPrefix is `ip daddr P` or `ip6 daddr P`, with its nfproto match,
// as the nft command encodes it: the address alone for a full-length
// prefix, masked for a shorter one, and for /0 nothing but the nfproto
// match. (See "Two encodings of one match" in the package doc.)
func DaddrPrefix(p netip.Prefix) []expr.Any {
	v6 := p.Addr().Is6()
	out := nfproto(v6)
	if p.Bits() == 0 {
		return out
	}
	f := ipv4Daddr
	if v6 {
		f = ipv6Daddr
	}
	out = append(out, f.Load(Reg))
	if p.Bits() < p.Addr().BitLen() {
		out = append(out, mask(p.Bits(), f.Len))
	}
	return append(out, Eq(p.Masked().Addr().AsSlice()))
}

// DaddrMasked is `ip daddr & MASK == NET` or `ip6 daddr & MASK == NET`
// for prefix NET/BITS, with its nfproto match: the address is masked
// whatever the prefix length. (See "Two encodings of one match" in the
// package doc.)
func DaddrMasked(p netip.Prefix) []expr.Any {
	if p.Addr().Is4() {
		return masked(ipv4Daddr, false, p)
	}
	return masked(ipv6Daddr, true, p)
}

// SaddrMasked is `ip saddr & MASK == NET` or `ip6 saddr & MASK == NET`,
// as DaddrMasked.
func SaddrMasked(p netip.Prefix) []expr.Any {
	if p.Addr().Is4() {
		return masked(ipv4Saddr, false, p)
	}
	return masked(ipv6Saddr, true, p)
}

func masked(f Field, v6 bool, p netip.Prefix) []expr.Any {
	return append(nfproto(v6), f.Load(Reg), mask(p.Bits(), f.Len), Eq(p.Masked().Addr().AsSlice()))
}

// mask is `& MASK` on Reg for the netmask of a /bits prefix of size bytes.
func mask(bits int, size uint32) *expr.Bitwise {
	return &expr.Bitwise{SourceRegister: Reg, DestRegister: Reg, Len: size,
		Mask: prefixMask(bits, int(size)), Xor: make([]byte, size)}
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

// ICMPType is `icmp type T` or `icmpv6 type T`; it must follow
// L4Proto(IPPROTO_ICMP) or L4Proto(IPPROTO_ICMPV6).
func ICMPType(typ byte) []expr.Any { return icmpType.Eq([]byte{typ}) }

// ICMPTypeNot is `icmp type != { T1, T2... }` or `icmpv6 type != { T1,
// T2... }`: one load, compared unequal to each type in turn. It must
// follow L4Proto.
func ICMPTypeNot(types ...byte) []expr.Any {
	out := []expr.Any{icmpType.Load(Reg)}
	for _, t := range types {
		out = append(out, Neq([]byte{t}))
	}
	return out
}

// IPv4NoOptions is `ip version 4 ip hdrlength 5`: the first byte of the
// header is 0x45.
func IPv4NoOptions() []expr.Any { return ipv4First.Eq([]byte{0x45}) }

// IPLengthRange is `ip length LO-HI` (the IPv4 total length) or `ip6
// length LO-HI` (the IPv6 payload length) as one range expression. (See
// "Two encodings of one match" in the package doc.)
func IPLengthRange(v6 bool, lo, hi uint16) []expr.Any {
	return ipLen(v6).inRange(binaryutil.BigEndian.PutUint16(lo), binaryutil.BigEndian.PutUint16(hi))
}

// IPLengthBetween is `ip length LO-HI` or `ip6 length LO-HI`, as
// IPLengthRange, as two comparisons of one load, `>= LO` and `<= HI`.
func IPLengthBetween(v6 bool, lo, hi uint16) []expr.Any {
	return ipLen(v6).between(binaryutil.BigEndian.PutUint16(lo), binaryutil.BigEndian.PutUint16(hi))
}

func ipLen(v6 bool) Field {
	if v6 {
		return ipv6Len
	}
	return ipv4Len
}

// HopLimit is `ip6 hoplimit N`.
func HopLimit(n byte) []expr.Any { return hopLimit.Eq([]byte{n}) }

// CtState is `ct state B1,B2...`: the state's bits masked with bits are
// not all zero.
func CtState(bits uint32) []expr.Any { return ctBits(expr.CtKeySTATE, bits) }

// CtStatus is `ct status B1,B2...`: the status bits masked with bits are
// not all zero.
func CtStatus(bits uint32) []expr.Any { return ctBits(expr.CtKeySTATUS, bits) }

func ctBits(key expr.CtKey, bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: key, Register: Reg},
		&expr.Bitwise{SourceRegister: Reg, DestRegister: Reg, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		Neq(make([]byte, 4)),
	}
}

// CtReply is `ct direction reply`: the packet goes in the reply direction
// of a connection the other side opened. A packet without a conntrack
// entry (invalid, untracked) does not match.
func CtReply() []expr.Any {
	return Load(&expr.Ct{Key: expr.CtKeyDIRECTION, Register: Reg}, Eq([]byte{ipCTDirReply}))
}

// FibDaddrLocal is `fib daddr type local`: the packet is for the
// namespace itself.
func FibDaddrLocal() []expr.Any { return fibDaddrType(Eq) }

// FibDaddrNotLocal is `fib daddr type != local`.
func FibDaddrNotLocal() []expr.Any { return fibDaddrType(Neq) }

func fibDaddrType(cmp func([]byte) *expr.Cmp) []expr.Any {
	return Load(&expr.Fib{Register: Reg, FlagDADDR: true, ResultADDRTYPE: true},
		cmp(binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)))
}
