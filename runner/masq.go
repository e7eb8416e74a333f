package runner

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/doorman-net/doorman/enforce/nft"
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
	nft.ReplaceTable(c, t)
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
	if err := c.Flush(); err != nil && !nft.IsNotExist(err) {
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
	ok, err := nft.HasTable(c, masqTable(bridge))
	if err != nil {
		return false, fmt.Errorf("look up table inet %s: %w", masqTable(bridge).Name, err)
	}
	return ok, nil
}

// masqExprs is `ip saddr P oifname != "bridge" masquerade` (ip6 for an
// IPv6 prefix).
func masqExprs(bridge string, p netip.Prefix) []expr.Any {
	return slices.Concat(nft.SaddrMasked(p), nft.OifNameNot(bridge), []expr.Any{&expr.Masq{}})
}
