package enforce

import (
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// This file builds the expressions only this ruleset uses; the matches it
// shares with the host-side layer are package nft's.

// ipsDstNAT is IPS_DST_NAT of linux/netfilter/nf_conntrack_common.h,
// set on a conntrack entry by redirect and dnat.
const ipsDstNAT = 1 << 5

// redirectTo is `redirect to :PORT`. The proto-max register and the
// PROTO_SPECIFIED flag are what the kernel fills in itself, spelled out so
// that the rule reads back exactly as written (see Check).
func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: nft.Reg, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: nft.Reg, RegisterProtoMax: nft.Reg, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
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

// matchDirect is `ip[6] daddr & MASK == PREFIX meta l4proto P th dport
// LO-HI` for one allowDirect destination, in the encoding this ruleset
// has always used (see package nft).
func matchDirect(d Direct, proto byte) []expr.Any {
	out := append(nft.DaddrMasked(d.Prefix), nft.L4Proto(proto)...)
	if d.PortLo != 0 || d.PortHi != 0 {
		out = append(out, nft.DportBetween(d.PortLo, d.PortHi)...)
	}
	return out
}
