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
