package enforce

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"

	"github.com/doorman-net/doorman/enforce/nft"
)

// ProbeFib returns an error if the kernel lacks the nft fib expression,
// which the prerouting chain needs to tell forwarded traffic from traffic
// for the namespace itself. It does not read /proc/config.gz (most
// distributions lack it): it adds `fib daddr type != local` to a scratch
// table in the netns at nsPath and deletes that table in the same batch,
// so nothing is left behind whatever happens.
func ProbeFib(nsPath string) error {
	ns, err := nft.OpenNetNS(nsPath)
	if err != nil {
		return fmt.Errorf("enforce: probe nft fib in %s: %w", nsPath, err)
	}
	defer ns.Close()
	if err := probeFib(ns); err != nil {
		return fmt.Errorf("enforce: probe nft fib in %s: %w", nsPath, err)
	}
	return nil
}

func probeFib(ns *nft.NetNS) error {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	t := &nftables.Table{Name: TableName + "-probe-" + hex.EncodeToString(suffix[:]), Family: nftables.TableFamilyINet}
	c := ns.Conn
	c.AddTable(t)
	ch := c.AddChain(&nftables.Chain{
		Name:     "probe",
		Table:    t,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookPrerouting,
		Priority: nftables.ChainPriorityNATDest,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch,
		Exprs: append(nft.FibDaddrNotLocal(), nft.Return()...)})
	c.DelTable(t)
	err := c.Flush()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("cannot add a scratch table: %w", err)
	default:
		return fmt.Errorf("kernel lacks nft fib (adding `fib daddr type != local` to inet nat prerouting failed: %w)", err)
	}
}
