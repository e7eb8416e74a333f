package enforce

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
)

// Apply installs table inet doorman in the netns at nsPath (for example
// /proc/PID/ns/net or /var/run/netns/NAME), or atomically replaces the one
// there. The whole table is one netlink batch: the namespace holds either
// the old ruleset or the new one, never a mix and never none. A kernel
// without the nft fib expression (the prerouting chain uses it) rejects the
// whole batch; Apply then probes for fib in a scratch table and says so,
// rather than install weaker rules.
// Tables of other tools in the namespace are left alone.
func Apply(nsPath string, spec Spec) error {
	if err := apply(nsPath, spec); err != nil {
		return fmt.Errorf("enforce: apply table inet %s in %s: %w", TableName, nsPath, err)
	}
	return nil
}

func apply(nsPath string, spec Spec) error {
	s, err := spec.normalized()
	if err != nil {
		return err
	}
	ns, err := openNetNS(nsPath)
	if err != nil {
		return err
	}
	defer ns.Close()

	c, t := ns.conn, table()
	// Adding an existing table is no error; deleting it in the same batch
	// then drops every chain and rule it held, whoever added them.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	for _, cs := range buildRuleset(s) {
		ch := c.AddChain(&nftables.Chain{
			Name:     cs.name,
			Table:    t,
			Type:     cs.typ,
			Hooknum:  &cs.hook,
			Priority: &cs.priority,
			Policy:   &cs.policy,
		})
		for _, r := range cs.rules {
			c.AddRule(&nftables.Rule{
				Table:    t,
				Chain:    ch,
				Exprs:    r.exprs,
				UserData: userdata.AppendString(nil, userdata.TypeComment, r.comment),
			})
		}
	}
	if err := c.Flush(); err != nil {
		// The batch is atomic and holds the fib rule: a kernel without
		// fib rejects it whole, nothing weaker is left. Probe (on a
		// fresh connection) only now, to say why in words.
		if !s.DenyAll {
			if perr := ProbeFib(nsPath); perr != nil {
				return perr
			}
		}
		return err
	}
	return nil
}

// Remove deletes table inet doorman from the netns at nsPath. It is no
// error if the table is not there, or the namespace is gone (its path no
// longer exists or no longer holds a network namespace), so Remove can be
// repeated. Other tables in the namespace are left alone.
func Remove(nsPath string) error {
	err := remove(nsPath)
	if err == nil || isNotExist(err) || errors.Is(err, errNotNetNS) {
		return nil
	}
	return fmt.Errorf("enforce: remove table inet %s from %s: %w", TableName, nsPath, err)
}

func remove(nsPath string) error {
	ns, err := openNetNS(nsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	ns.conn.DelTable(table())
	return ns.conn.Flush()
}

// Present reports whether table inet doorman exists in the netns at nsPath.
func Present(nsPath string) (bool, error) {
	ns, err := openNetNS(nsPath)
	if err != nil {
		return false, fmt.Errorf("enforce: look up table inet %s in %s: %w", TableName, nsPath, err)
	}
	defer ns.Close()
	ok, err := present(ns)
	if err != nil {
		return false, fmt.Errorf("enforce: look up table inet %s in %s: %w", TableName, nsPath, err)
	}
	return ok, nil
}

func present(ns *netNS) (bool, error) {
	_, err := ns.conn.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if isNotExist(err) {
		return false, nil
	}
	return err == nil, err
}
