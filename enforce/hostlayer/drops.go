package hostlayer

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"

	"github.com/doorman-net/doorman/enforce/nft"
)

// counted is rules with a counter in front of every drop verdict: what
// the layer drops for a sandbox is counted in the sandbox's own chain, so
// that ReadDrops can tell whose it was and why.
func counted(rules []nft.RuleSpec) []nft.RuleSpec {
	out := make([]nft.RuleSpec, len(rules))
	for i, r := range rules {
		out[i] = r
		n := len(r.Exprs)
		if n == 0 {
			continue
		}
		if v, ok := r.Exprs[n-1].(*expr.Verdict); ok && v.Kind == expr.VerdictDrop {
			out[i].Exprs = slices.Concat(r.Exprs[:n-1:n-1], []expr.Any{&expr.Counter{}}, r.Exprs[n-1:])
		}
	}
	return out
}

// Drop is what one drop rule of a sandbox's chains has dropped since
// Apply installed it.
type Drop struct {
	Table   string // the rule's table, as "table inet doorman-host"
	Rule    string // the rule's comment: why it drops
	Packets uint64
	Bytes   uint64
}

// ReadDrops returns the counters of the drop rules in the sandbox key's
// chains of the layer in the namespace at nsPath, in table and rule
// order. A table or chain that is not there has no drops: a sandbox
// without the layer, or one removed meanwhile, reads as none.
func ReadDrops(nsPath, key string) ([]Drop, error) {
	drops, err := readDrops(nsPath, key)
	if err != nil {
		return nil, fmt.Errorf("hostlayer: read drops of sandbox %s in %s: %w", key, nsPath, err)
	}
	return drops, nil
}

func readDrops(nsPath, key string) ([]Drop, error) {
	// Without the layer's lock: a listing sees each batch whole or not
	// at all, and the proxy, which calls this, must never wait for a
	// change of the layer that may itself be waiting for the proxy to
	// stop.
	n, err := nft.OpenNetNS(nsPath)
	if err != nil {
		return nil, err
	}
	defer n.Close()
	var out []Drop
	for _, l := range layouts() {
		ok, err := nft.HasTable(n.Conn, l.table)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		rules, err := n.Conn.GetRules(l.table, l.sandboxChain(key))
		if err != nil {
			if nft.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("%s: list chain %s: %w", l, chainName(key), err)
		}
		for _, r := range rules {
			if d, ok := dropOf(r); ok {
				d.Table = l.String()
				out = append(out, d)
			}
		}
	}
	return out, nil
}

// dropOf returns the counter of r if r is a counted drop.
func dropOf(r *nftables.Rule) (Drop, bool) {
	n := len(r.Exprs)
	if n < 2 {
		return Drop{}, false
	}
	v, ok := r.Exprs[n-1].(*expr.Verdict)
	c, isCounter := r.Exprs[n-2].(*expr.Counter)
	if !ok || v.Kind != expr.VerdictDrop || !isCounter {
		return Drop{}, false
	}
	comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	return Drop{Rule: comment, Packets: c.Packets, Bytes: c.Bytes}, true
}
