package enforce

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
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
	if err := apply(nsPath, spec, true); err != nil {
		return fmt.Errorf("enforce: apply table inet %s in %s: %w", TableName, nsPath, err)
	}
	return nil
}

// ErrTableExists is the error of Create in a namespace that already has
// table inet doorman.
var ErrTableExists = errors.New("the namespace already has table inet " + TableName)

// Create is Apply for a namespace that has no doorman table yet: where one
// exists, it changes nothing and returns an error matching
// ErrTableExists, so that one sandbox never replaces another's rules.
func Create(nsPath string, spec Spec) error {
	if err := apply(nsPath, spec, false); err != nil {
		return fmt.Errorf("enforce: create table inet %s in %s: %w", TableName, nsPath, err)
	}
	return nil
}

// apply installs the ruleset; replace says whether a table already there
// is replaced or makes it fail with ErrTableExists.
func apply(nsPath string, spec Spec, replace bool) error {
	s, ns, err := open(nsPath, spec)
	if err != nil {
		return err
	}
	defer ns.Close()

	// Create sends an exclusive creation at once and lets the kernel say
	// whether a table is there. Apply looks first: replacing is its
	// common case, and a rejected batch costs an RCU grace period (about
	// 10 ms).
	exists := false
	if replace {
		if exists, err = present(ns); err != nil {
			return fmt.Errorf("look up the table: %w", err)
		}
	}
	if err := install(ns, s, exists, replace); err != nil {
		if errors.Is(err, ErrTableExists) {
			return err
		}
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

// open normalizes spec and opens the namespace at nsPath.
func open(nsPath string, spec Spec) (Spec, *nft.NetNS, error) {
	s, err := spec.normalized()
	if err != nil {
		return Spec{}, nil, err
	}
	ns, err := nft.OpenNetNS(nsPath)
	if err != nil {
		return Spec{}, nil, err
	}
	return s, ns, nil
}

// install sends the table in one batch: a replacement if exists (what a
// look-up found), else an exclusive creation. If the table is there after
// all (it appeared after the look-up, or none was made), the kernel
// rejects the creation whole (EEXIST): install then replaces it if
// replace, and otherwise returns ErrTableExists.
func install(ns *nft.NetNS, s Spec, exists, replace bool) error {
	stageTable(ns.Conn, s, exists)
	err := ns.Conn.Flush()
	if !exists && errors.Is(err, unix.EEXIST) {
		if !replace {
			return ErrTableExists
		}
		stageTable(ns.Conn, s, true)
		err = ns.Conn.Flush()
	}
	return err
}

// stageTable queues the whole table in c's batch. A table that exists is
// replaced: adding it is no error, and deleting it in the same batch then
// drops every chain and rule it held, whoever added them. A table that
// does not is created exclusively, so the batch fails whole (EEXIST) if
// one appeared meanwhile. Only a batch that deletes something makes the
// kernel free the old objects after an RCU grace period, which closing
// the netlink socket waits for (about 10 ms): a new sandbox is spared it.
func stageTable(c *nftables.Conn, s Spec, replace bool) {
	t := table()
	if replace {
		nft.ReplaceTable(c, t)
	} else {
		c.CreateTable(t)
	}
	for _, cs := range buildRuleset(s) {
		ch := c.AddChain(cs.chain(t))
		for _, r := range cs.rules {
			nft.AddRule(c, ch, r)
		}
	}
}

// Remove deletes table inet doorman from the netns at nsPath. It is no
// error if the table is not there, or the namespace is gone (its path no
// longer exists or no longer holds a network namespace), so Remove can be
// repeated. Other tables in the namespace are left alone.
func Remove(nsPath string) error {
	err := remove(nsPath)
	if err == nil || nft.IsNotExist(err) || errors.Is(err, nft.ErrNotNetNS) {
		return nil
	}
	return fmt.Errorf("enforce: remove table inet %s from %s: %w", TableName, nsPath, err)
}

func remove(nsPath string) error {
	ns, err := nft.OpenNetNS(nsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	// Deleting a table that is not there fails the batch, and the kernel
	// waits for an RCU grace period (about 10 ms) to abort a failed
	// batch: look first. (If it goes meanwhile, the ENOENT is no error.)
	if ok, err := present(ns); err != nil || !ok {
		return err
	}
	ns.Conn.DelTable(table())
	return ns.Conn.Flush()
}

// Present reports whether table inet doorman exists in the netns at nsPath.
func Present(nsPath string) (bool, error) {
	ns, err := nft.OpenNetNS(nsPath)
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

func present(ns *nft.NetNS) (bool, error) { return nft.HasTable(ns.Conn, table()) }

// table is doorman's table, as nftables names it.
func table() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
}
