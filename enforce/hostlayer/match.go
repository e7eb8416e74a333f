package hostlayer

import (
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// This file builds the expressions only the layer uses: its set lookups
// and its matches on Ethernet, ARP and neighbour discovery fields. The
// matches it shares with the sandbox's ruleset are package nft's.

// ICMPv6 types (RFC 4861) that only the layer names, and where the target
// address of a neighbour solicitation or advertisement lies.
const (
	icmpv6RouterAdvert   = 134
	icmpv6Redirect       = 137
	icmpv6NeighTargetOff = 8
)

// dispatchIface is `meta iif vmap @SET`.
func dispatchIface(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: nft.Reg},
		&expr.Lookup{SourceRegister: nft.Reg, DestRegister: unix.NFT_REG_VERDICT, IsDestRegSet: true, SetName: set},
	}
}

// dispatchIfaceMAC is `meta iif . ether saddr vmap @SET`: the index goes
// to the first 32-bit register (which is where register 1 starts, and the
// kernel reports it as register 1), the 6-byte MAC to the next two.
func dispatchIfaceMAC(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: nft.Reg},
		fieldEtherSaddr.Load(unix.NFT_REG32_01),
		&expr.Lookup{SourceRegister: nft.Reg, DestRegister: unix.NFT_REG_VERDICT, IsDestRegSet: true, SetName: set},
	}
}

// matchIfaceIn is `meta iif @SET`.
func matchIfaceIn(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: nft.Reg},
		&expr.Lookup{SourceRegister: nft.Reg, SetName: set},
	}
}

// matchOifIn is `meta oif @SET`.
func matchOifIn(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIF, Register: nft.Reg},
		&expr.Lookup{SourceRegister: nft.Reg, SetName: set},
	}
}

// matchOifMACNotIn is `meta oif . ether daddr != @SET`, loaded as
// dispatchIfaceMAC loads its key.
func matchOifMACNotIn(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIF, Register: nft.Reg},
		fieldEtherDaddr.Load(unix.NFT_REG32_01),
		&expr.Lookup{SourceRegister: nft.Reg, SetName: set, Invert: true},
	}
}

// matchEtherDaddrUnicast is `ether daddr & 01:00:00:00:00:00 == 0`: the
// group bit of the destination is clear.
func matchEtherDaddrUnicast() []expr.Any {
	return []expr.Any{
		fieldEtherGroup.Load(nft.Reg),
		&expr.Bitwise{SourceRegister: nft.Reg, DestRegister: nft.Reg, Len: 1, Mask: []byte{1}, Xor: []byte{0}},
		nft.Eq([]byte{0}),
	}
}

// matchIif is `meta iif INDEX`.
func matchIif(index int) []expr.Any {
	return nft.Load(&expr.Meta{Key: expr.MetaKeyIIF, Register: nft.Reg}, nft.Eq(binaryutil.NativeEndian.PutUint32(uint32(index))))
}

// Where the fields the layer names lie: the Ethernet addresses and type
// (and the first byte of the destination, which holds the group bit); the
// sender's addresses in an ARP header (the network header of a bridge
// frame), and its hardware and protocol types and lengths; the target of
// a neighbour solicitation or advertisement in the transport header.
var (
	fieldEtherDaddr = nft.Field{Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 6}
	fieldEtherGroup = nft.Field{Base: expr.PayloadBaseLLHeader, Offset: 0, Len: 1}
	fieldEtherSaddr = nft.Field{Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6}
	fieldEtherType  = nft.Field{Base: expr.PayloadBaseLLHeader, Offset: 12, Len: 2}
	fieldARPHType   = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 2}
	fieldARPPType   = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 2, Len: 2}
	fieldARPHLen    = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 4, Len: 1}
	fieldARPPLen    = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 5, Len: 1}
	fieldARPSha     = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 6}
	fieldARPSpa     = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 14, Len: 4}
	fieldNDTarget   = nft.Field{Base: expr.PayloadBaseTransportHeader, Offset: icmpv6NeighTargetOff, Len: 16}
)

// Where the fields the frame shapes (shape.go) read lie: the ARP
// operation and the bytes after a 28-byte ARP packet, up to Ethernet's
// minimum (18 of them: 16 and 2, since a comparison holds at most 16);
// the IPv6 payload length and next header, and the 8 bytes of a hop-by-hop
// header right after the IPv6 header; the ICMPv6 code and the reserved
// field after the checksum, and where the options of neighbour discovery
// and the records of an MLDv2 report start.
var (
	fieldARPOp       = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 6, Len: 2}
	fieldARPPad      = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: arpLen, Len: 16}
	fieldARPPadTail  = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: arpLen + 16, Len: arpPaddedLen - arpLen - 16}
	fieldIPv6Len     = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 4, Len: 2}
	fieldIPv6NextHdr = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: 6, Len: 1}
	fieldHopByHop    = nft.Field{Base: expr.PayloadBaseNetworkHeader, Offset: ipv6HeaderLen, Len: hopByHopLen}
	// fieldICMPv6Head is the code, the checksum and the four bytes after
	// it (reserved, flags, or MLD's delay and reserved); the checksum is
	// masked out wherever it is compared.
	fieldICMPv6Head = nft.Field{Base: expr.PayloadBaseTransportHeader, Offset: 1, Len: 7}
	fieldMLDv2Head  = nft.Field{Base: expr.PayloadBaseTransportHeader, Offset: 1, Len: 5}
	fieldMLDv2Nrec  = nft.Field{Base: expr.PayloadBaseTransportHeader, Offset: 6, Len: 2}
)

// ndOption is the type and length (in units of 8 bytes) of the option
// that starts at offset off of an ICMPv6 message, and optionMAC the
// link-layer address it carries if it is a link-layer address option.
func ndOption(off uint32) nft.Field {
	return nft.Field{Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2}
}

func optionMAC(off uint32) nft.Field {
	return nft.Field{Base: expr.PayloadBaseTransportHeader, Offset: off + 2, Len: 6}
}

// mldv2Record is the aux data length and the number of sources of record
// i of an MLDv2 report (RFC 3810 5.2.1), records of 20 bytes each.
func mldv2Record(i int) nft.Field {
	return nft.Field{Base: expr.PayloadBaseTransportHeader, Offset: uint32(mldv2HeaderLen + mldv2RecordLen*i + 1), Len: 3}
}

// matchLen is `meta len N`: the length of the frame after its Ethernet
// header, as the bridge hooks see it.
func matchLen(n uint32) []expr.Any {
	return nft.Load(&expr.Meta{Key: expr.MetaKeyLEN, Register: nft.Reg}, nft.Eq(binaryutil.NativeEndian.PutUint32(n)))
}

// fieldNot is `FIELD != {V1, V2...}`: one load, compared unequal to each
// value in turn.
func fieldNot(f nft.Field, values ...[]byte) []expr.Any {
	out := []expr.Any{f.Load(nft.Reg)}
	for _, v := range values {
		out = append(out, nft.Neq(v))
	}
	return out
}

// maskedNonZero is `FIELD & MASK != 0`.
func maskedNonZero(f nft.Field, mask []byte) []expr.Any {
	return []expr.Any{
		f.Load(nft.Reg),
		&expr.Bitwise{SourceRegister: nft.Reg, DestRegister: nft.Reg, Len: f.Len, Mask: mask, Xor: make([]byte, f.Len)},
		nft.Neq(make([]byte, f.Len)),
	}
}

// fieldCmp is `FIELD OP V` for an ordering op (<, <=, >, >=): the kernel
// compares the bytes as memcmp does, which orders big-endian numbers.
func fieldCmp(f nft.Field, op expr.CmpOp, v []byte) []expr.Any {
	return nft.Load(f.Load(nft.Reg), &expr.Cmp{Op: op, Register: nft.Reg, Data: v})
}

// matchIifField is `meta iif . FIELD @SET` (in) or `meta iif . FIELD !=
// @SET`: the index goes to the first 32-bit register (where register 1
// starts, which the kernel reports as register 1), the field to the ones
// after it, as dispatchIfaceMAC loads them.
func matchIifField(set string, f nft.Field, in bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: nft.Reg},
		f.Load(unix.NFT_REG32_01),
		&expr.Lookup{SourceRegister: nft.Reg, SetName: set, Invert: !in},
	}
}

// matchFibDaddrOnInputLink is `fib daddr . iif oif != 0`: the route to the
// destination leaves through the interface the packet came in on.
func matchFibDaddrOnInputLink() []expr.Any {
	return nft.Load(&expr.Fib{Register: nft.Reg, FlagDADDR: true, FlagIIF: true, ResultOIF: true}, nft.Neq(make([]byte, 4)))
}

// matchEtherType is `ether type T`. It reads the type field of the frame
// as sent: for a VLAN-tagged frame the kernel puts the tag back into the
// header it reads from, so the type is 802.1Q, not the type inside.
func matchEtherType(typ uint16) []expr.Any {
	return fieldEtherType.Eq(binaryutil.BigEndian.PutUint16(typ))
}
