package main

import (
	"fmt"
	"strings"

	"github.com/google/nftables"
)

// familyNames are nft's names of the table families.
var familyNames = map[nftables.TableFamily]string{
	nftables.TableFamilyINet: "inet", nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6",
	nftables.TableFamilyARP: "arp", nftables.TableFamilyNetdev: "netdev", nftables.TableFamilyBridge: "bridge",
}

func tableName(t *nftables.Table) string {
	return fmt.Sprintf("%s %s", familyNames[t.Family], t.Name)
}

// flushRow deletes every nftables table of the probe's network namespace
// in one batch, as a workload holding CAP_NET_ADMIN would to get rid of
// doorman's rules, and reports what it deleted and what is left.
func flushRow() row {
	r := row{Attempt: "flush"}
	c, err := nftables.New()
	if err != nil {
		r.Error = "netlink: " + err.Error()
		return r
	}
	tables, err := c.ListTables()
	if err != nil {
		r.Error = "list tables: " + err.Error()
		return r
	}
	var names []string
	for _, t := range tables {
		c.DelTable(t)
		names = append(names, tableName(t))
	}
	if err := c.Flush(); err != nil {
		r.Error = "delete tables: " + err.Error()
	}
	left, err := c.ListTables()
	if err != nil {
		r.Error = "list tables again: " + err.Error()
	}
	r.Detail = fmt.Sprintf("deleted [%s]; %d tables left", strings.Join(names, ", "), len(left))
	return r
}
