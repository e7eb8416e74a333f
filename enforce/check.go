package enforce

import (
	"bytes"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// Check returns nil if table inet doorman in the netns at nsPath is what
// Apply(nsPath, spec) installs, and otherwise an error describing the
// first difference: a missing or disabled table, a missing, extra or
// altered chain, or a missing, extra or altered rule.
//
// Rules are compared expression by expression as netlink attributes: each
// expression read back from the kernel is marshalled again by
// google/nftables and compared with the marshalled expression Apply would
// send. Attributes the library does not model are thereby ignored on both
// sides; rule handles, positions and comments are not compared. Where the
// kernel fills in attributes itself (the redirect's proto-max register and
// flags), the ruleset spells them out so that they compare equal.
func Check(nsPath string, spec Spec) error {
	if err := check(nsPath, spec); err != nil {
		return fmt.Errorf("enforce: check table inet %s in %s: %w", TableName, nsPath, err)
	}
	return nil
}

func check(nsPath string, spec Spec) error {
	s, err := spec.normalized()
	if err != nil {
		return err
	}
	ns, err := openNetNS(nsPath)
	if err != nil {
		return err
	}
	defer ns.Close()

	t, err := ns.conn.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if isNotExist(err) {
		return fmt.Errorf("table is missing")
	}
	if err != nil {
		return fmt.Errorf("list table: %w", err)
	}
	if t.Flags&unix.NFT_TABLE_F_DORMANT != 0 {
		return fmt.Errorf("table is dormant (its chains are unhooked)")
	}

	all, err := ns.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	installed := make(map[string]*nftables.Chain)
	for _, c := range all {
		if c.Table != nil && c.Table.Name == TableName {
			installed[c.Name] = c
		}
	}

	want := buildRuleset(s)
	wanted := make(map[string]bool)
	for _, cs := range want {
		wanted[cs.name] = true
		c, ok := installed[cs.name]
		if !ok {
			return fmt.Errorf("chain %q is missing", cs.name)
		}
		if err := compareChain(cs, c); err != nil {
			return err
		}
	}
	for name := range installed {
		if !wanted[name] {
			return fmt.Errorf("chain %q is not part of the ruleset", name)
		}
	}

	for _, cs := range want {
		rules, err := ns.conn.GetRules(t, installed[cs.name])
		if err != nil {
			return fmt.Errorf("list rules of chain %q: %w", cs.name, err)
		}
		if err := compareRules(cs, rules); err != nil {
			return err
		}
	}
	return nil
}

func compareChain(want chainSpec, got *nftables.Chain) error {
	if got.Hooknum == nil || got.Priority == nil {
		return fmt.Errorf("chain %q is not a base chain", want.name)
	}
	if got.Type != want.typ || *got.Hooknum != want.hook || *got.Priority != want.priority {
		return fmt.Errorf("chain %q is type %s hook %d priority %d, want type %s hook %d priority %d",
			want.name, got.Type, *got.Hooknum, *got.Priority, want.typ, want.hook, want.priority)
	}
	if got.Policy == nil || *got.Policy != want.policy {
		return fmt.Errorf("chain %q has policy %s, want %s", want.name, policyName(got.Policy), policyName(&want.policy))
	}
	return nil
}

func compareRules(want chainSpec, got []*nftables.Rule) error {
	for i, w := range want.rules {
		if i >= len(got) {
			return fmt.Errorf("chain %q: rule %d (%s) is missing", want.name, i+1, w.comment)
		}
		same, err := sameExprs(w.exprs, got[i].Exprs)
		if err != nil {
			return fmt.Errorf("chain %q rule %d: %w", want.name, i+1, err)
		}
		if !same {
			return fmt.Errorf("chain %q: rule %d is %s, want %s", want.name, i+1, ruleName(got[i]), w.comment)
		}
	}
	if len(got) > len(want.rules) {
		extra := got[len(want.rules)]
		return fmt.Errorf("chain %q: rule %d (%s) is not part of the ruleset", want.name, len(want.rules)+1, ruleName(extra))
	}
	return nil
}

func sameExprs(want, got []expr.Any) (bool, error) {
	if len(want) != len(got) {
		return false, nil
	}
	for i := range want {
		w, err := expr.Marshal(byte(nftables.TableFamilyINet), want[i])
		if err != nil {
			return false, fmt.Errorf("marshal expression %d: %w", i+1, err)
		}
		g, err := expr.Marshal(byte(nftables.TableFamilyINet), got[i])
		if err != nil {
			return false, fmt.Errorf("marshal installed expression %d: %w", i+1, err)
		}
		if !bytes.Equal(w, g) {
			return false, nil
		}
	}
	return true, nil
}

// ruleName names an installed rule by its comment, which Apply sets.
func ruleName(r *nftables.Rule) string {
	if c, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && c != "" {
		return fmt.Sprintf("%q (handle %d)", c, r.Handle)
	}
	return fmt.Sprintf("a rule without comment (handle %d)", r.Handle)
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
