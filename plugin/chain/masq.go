package chain

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The run network's masquerading is a table of its own in the host
// namespace, made over netlink: the bridge plugin's ipMasq needs the
// iptables binary, and its nftables backend the nft binary, and a fresh
// machine may have neither. Only what leaves the sandbox directly needs it —
// DNS to the resolvers and ICMP —: the proxy dials from the host itself.
//
//	table inet doorman-run-<bridge> {
//	    chain postrouting {
//	        type nat hook postrouting priority srcnat
//	        ip saddr <v4 subnet> oifname != "<bridge>" masquerade
//	        ip6 saddr <v6 subnet> oifname != "<bridge>" masquerade
//	    }
//	}

// ifNameSize is IFNAMSIZ: nftables compares interface names as 16 bytes.
const ifNameSize = 16

// masqTable is the name of the table that masquerades bridge's subnets.
func masqTable(bridge string) *nftables.Table {
	return &nftables.Table{Name: "doorman-run-" + bridge, Family: nftables.TableFamilyINet}
}

// applyMasq installs (or replaces, in one transaction) the masquerade
// table for bridge in the caller's network namespace.
func applyMasq(bridge string, subnets []netip.Prefix) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := masqTable(bridge)
	// Add, delete, add: replaces the table whether or not it was there.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	ch := c.AddChain(&nftables.Chain{
		Name:     "postrouting",
		Table:    t,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityNATSource,
	})
	for _, p := range subnets {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: masqExprs(bridge, p)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install table inet %s (masquerading %s): %w", t.Name, joinPrefixes(subnets), err)
	}
	return nil
}

// removeMasq deletes bridge's masquerade table; a missing one is no error.
func removeMasq(bridge string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := masqTable(bridge)
	c.DelTable(t)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete table inet %s: %w", t.Name, err)
	}
	return nil
}

// masqPresent reports whether bridge's masquerade table exists.
func masqPresent(bridge string) (bool, error) {
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == masqTable(bridge).Name {
			return true, nil
		}
	}
	return false, nil
}

// masqExprs is `ip saddr P oifname != "bridge" masquerade` (ip6 for an
// IPv6 prefix).
func masqExprs(bridge string, p netip.Prefix) []expr.Any {
	proto, offset := byte(unix.NFPROTO_IPV4), uint32(12) // struct iphdr saddr
	if p.Addr().Is6() {
		proto, offset = unix.NFPROTO_IPV6, 8 // struct ipv6hdr saddr
	}
	size := uint32(p.Addr().BitLen() / 8)
	mask := make([]byte, size)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	name := make([]byte, ifNameSize)
	copy(name, bridge)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: size, Mask: mask, Xor: make([]byte, size)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: name},
		&expr.Masq{},
	}
}
