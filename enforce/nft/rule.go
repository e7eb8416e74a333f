package nft

import (
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// RuleSpec is one rule: its expressions and a comment that names it in
// `nft list ruleset` and in the errors of Check.
type RuleSpec struct {
	Comment string
	Exprs   []expr.Any
}

// Rule is the rule of the given comment whose expressions are parts, one
// after the other.
func Rule(comment string, parts ...[]expr.Any) RuleSpec {
	return RuleSpec{Comment: comment, Exprs: slices.Concat(parts...)}
}

// AddRule queues r at the end of chain ch (of table ch.Table) in c's
// batch, its comment as the rule's userdata.
func AddRule(c *nftables.Conn, ch *nftables.Chain, r RuleSpec) {
	c.AddRule(&nftables.Rule{
		Table:    ch.Table,
		Chain:    ch,
		Exprs:    r.Exprs,
		UserData: userdata.AppendString(nil, userdata.TypeComment, r.Comment),
	})
}

// ReplaceTable queues in c's batch an empty table t in place of the one
// there, if any: adding it is no error where it exists, and deleting it
// in the same batch then drops every chain, set and rule it held, whoever
// added them. A batch that deletes something makes the kernel free the
// old objects after an RCU grace period, which closing the netlink socket
// waits for (about 10 ms).
func ReplaceTable(c *nftables.Conn, t *nftables.Table) {
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
}
