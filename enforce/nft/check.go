package nft

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// CheckTable returns nil if table t is there and not dormant, and
// otherwise an error saying which.
func CheckTable(c *nftables.Conn, t *nftables.Table) error {
	got, err := c.ListTableOfFamily(t.Name, t.Family)
	if IsNotExist(err) {
		return errors.New("table is missing")
	}
	if err != nil {
		return fmt.Errorf("list table: %w", err)
	}
	if got.Flags&unix.NFT_TABLE_F_DORMANT != 0 {
		return errors.New("table is dormant (its chains are unhooked)")
	}
	return nil
}

// HasTable reports whether table t exists.
func HasTable(c *nftables.Conn, t *nftables.Table) (bool, error) {
	_, err := c.ListTableOfFamily(t.Name, t.Family)
	if IsNotExist(err) {
		return false, nil
	}
	return err == nil, err
}

// Chains returns the chains of table t, none if it is not there.
func Chains(c *nftables.Conn, t *nftables.Table) ([]*nftables.Chain, error) {
	all, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	var out []*nftables.Chain
	for _, ch := range all {
		if ch.Table != nil && ch.Table.Name == t.Name {
			out = append(out, ch)
		}
	}
	return out, nil
}

// CompareBaseChain returns nil if got, an installed chain, is a base chain
// of want's type, hook, priority and policy, and otherwise an error saying
// how it differs.
func CompareBaseChain(want, got *nftables.Chain) error {
	if got.Hooknum == nil || got.Priority == nil {
		return fmt.Errorf("chain %q is not a base chain", want.Name)
	}
	if got.Type != want.Type || *got.Hooknum != *want.Hooknum || *got.Priority != *want.Priority {
		return fmt.Errorf("chain %q is type %s hook %d priority %d, want type %s hook %d priority %d",
			want.Name, got.Type, *got.Hooknum, *got.Priority, want.Type, *want.Hooknum, *want.Priority)
	}
	if got.Policy == nil || *got.Policy != *want.Policy {
		return fmt.Errorf("chain %q has policy %s, want %s", want.Name, policyName(got.Policy), policyName(want.Policy))
	}
	return nil
}

func policyName(p *nftables.ChainPolicy) string {
	switch {
	case p == nil:
		return "none"
	case *p == nftables.ChainPolicyAccept:
		return "accept"
	case *p == nftables.ChainPolicyDrop:
		return "drop"
	}
	return fmt.Sprintf("%d", *p)
}

// CompareRules returns nil if installed chain ch (of table ch.Table) holds
// exactly the rules want, in order, as SameExprs compares them, and
// otherwise an error naming the first missing, extra or altered rule.
// whole names what the rules make up ("ruleset", "layer") in the error
// about an extra rule.
func CompareRules(c *nftables.Conn, ch *nftables.Chain, want []RuleSpec, whole string) error {
	got, err := c.GetRules(ch.Table, ch)
	if err != nil {
		return fmt.Errorf("list rules of chain %q: %w", ch.Name, err)
	}
	for i, w := range want {
		if i >= len(got) {
			return fmt.Errorf("chain %q: rule %d (%s) is missing", ch.Name, i+1, w.Comment)
		}
		same, err := SameExprs(ch.Table.Family, w.Exprs, got[i].Exprs)
		if err != nil {
			return fmt.Errorf("chain %q rule %d: %w", ch.Name, i+1, err)
		}
		if !same {
			return fmt.Errorf("chain %q: rule %d is %s, want %s", ch.Name, i+1, RuleName(got[i]), w.Comment)
		}
	}
	if len(got) > len(want) {
		return fmt.Errorf("chain %q: rule %d (%s) is not part of the %s", ch.Name, len(want)+1, RuleName(got[len(want)]), whole)
	}
	return nil
}

// SameExprs reports whether got, the expressions of a rule as read back
// from a table of family fam, are want. Each expression is compared as
// the netlink attributes google/nftables marshals it to: what the library
// does not model, or leaves out when it marshals, is ignored on both
// sides (see "Comparing installed rules" in the package doc). An error
// says that an expression cannot be marshalled.
func SameExprs(fam nftables.TableFamily, want, got []expr.Any) (bool, error) {
	if len(want) != len(got) {
		return false, nil
	}
	for i := range want {
		w, err := expr.Marshal(byte(fam), zeroCounter(want[i]))
		if err != nil {
			return false, fmt.Errorf("marshal expression %d: %w", i+1, err)
		}
		g, err := expr.Marshal(byte(fam), zeroCounter(got[i]))
		if err != nil {
			return false, fmt.Errorf("marshal installed expression %d: %w", i+1, err)
		}
		if !bytes.Equal(w, g) {
			return false, nil
		}
	}
	return true, nil
}

// RuleName names an installed rule by its comment (see AddRule) and its
// handle.
func RuleName(r *nftables.Rule) string {
	if c, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && c != "" {
		return fmt.Sprintf("%q (handle %d)", c, r.Handle)
	}
	return fmt.Sprintf("a rule without comment (handle %d)", r.Handle)
}

// zeroCounter is e, or a counter without its values if e is one: what a
// counter has counted is no difference between two rules.
func zeroCounter(e expr.Any) expr.Any {
	if _, ok := e.(*expr.Counter); ok {
		return &expr.Counter{}
	}
	return e
}
