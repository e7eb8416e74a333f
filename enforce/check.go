package enforce

import (
	"fmt"

	"github.com/google/nftables"

	"github.com/doorman-net/doorman/enforce/nft"
)

// Check returns nil if table inet doorman in the netns at nsPath is what
// Apply(nsPath, spec) installs, and otherwise an error describing the
// first difference: a missing or disabled table, a missing, extra or
// altered chain, or a missing, extra or altered rule.
//
// Rules are compared as package nft compares them: expression by
// expression as netlink attributes, each expression read back from the
// kernel marshalled again by google/nftables and compared with the
// marshalled expression Apply would send. Attributes the library does not
// model are thereby ignored on both sides; rule handles, positions and
// comments are not compared. Where the kernel fills in attributes itself
// (the redirect's proto-max register and flags), the ruleset spells them
// out so that they compare equal.
func Check(nsPath string, spec Spec) error {
	if err := check(nsPath, spec); err != nil {
		return fmt.Errorf("enforce: check table inet %s in %s: %w", TableName, nsPath, err)
	}
	return nil
}

func check(nsPath string, spec Spec) error {
	s, ns, err := open(nsPath, spec)
	if err != nil {
		return err
	}
	defer ns.Close()

	t := table()
	if err := nft.CheckTable(ns.Conn, t); err != nil {
		return err
	}
	chains, err := nft.Chains(ns.Conn, t)
	if err != nil {
		return err
	}
	installed := make(map[string]*nftables.Chain)
	for _, c := range chains {
		installed[c.Name] = c
	}

	want := buildRuleset(s)
	wanted := make(map[string]bool)
	for _, cs := range want {
		wanted[cs.name] = true
		c, ok := installed[cs.name]
		if !ok {
			return fmt.Errorf("chain %q is missing", cs.name)
		}
		if err := nft.CompareBaseChain(cs.chain(t), c); err != nil {
			return err
		}
	}
	for name := range installed {
		if !wanted[name] {
			return fmt.Errorf("chain %q is not part of the ruleset", name)
		}
	}

	for _, cs := range want {
		if err := nft.CompareRules(ns.Conn, installed[cs.name], cs.rules, "ruleset"); err != nil {
			return err
		}
	}
	return nil
}
