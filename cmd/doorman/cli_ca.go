package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/sandbox"
)

// runCA is `doorman ca show|rotate`.
func runCA(args []string, stdout, stderr io.Writer) int {
	c := newCLI("ca", "show [NETWORK] [--pem] | rotate NETWORK", `
Shows or rotates the per-network CAs that sign the certificates of
inspected hosts (hosts with request rules). NETWORK is a CNI network's
name, "hook" for the containers of the OCI hook and the runc wrapper, or
the bridge of "doorman run" (doorman-run0 by default). show without NETWORK
lists every CA; --pem prints the certificate, which a CNI user mounts into
containers' trust (see docs/policy.md). rotate makes a new key and
certificate, constrained to the hosts the live sandboxes of the network
inspect, and rewrites the trust bundles of those sandboxes in place;
processes that already read their bundle trust the new CA once they read
it again. The key never leaves the host (0600).`, stdout, stderr)
	dir := c.fs.String("ca-dir", hostconf.DefaultCADir, "`dir` holding one CA directory per network")
	pemOut := c.fs.Bool("pem", false, "show: print the CA certificate (PEM)")
	out := c.outputFlag()
	pos, code, ok := c.parseOutput(args, 1, 2, out)
	if !ok {
		return code
	}
	switch pos[0] {
	case "show":
		var names []string
		if len(pos) == 2 {
			names = []string{pos[1]}
		} else {
			entries, err := os.ReadDir(*dir)
			if err != nil && !os.IsNotExist(err) {
				return c.fail(err)
			}
			for _, e := range entries {
				if e.IsDir() {
					names = append(names, e.Name())
				}
			}
		}
		var infos []ca.Info
		for _, n := range names {
			if filepath.Base(n) != n {
				c.errorf("network %q: not a name", n)
				return exitUsage
			}
			if *pemOut {
				data, err := ca.CertPEM(filepath.Join(*dir, n))
				if err != nil {
					return c.fail(err)
				}
				stdout.Write(data)
				continue
			}
			info, err := ca.Show(filepath.Join(*dir, n))
			if err != nil {
				return c.fail(err)
			}
			infos = append(infos, info)
		}
		if *pemOut {
			return exitOK
		}
		if *out == "json" {
			if infos == nil {
				infos = []ca.Info{}
			}
			return c.writeJSON(infos)
		}
		if len(infos) == 0 {
			fmt.Fprintf(stdout, "no CA under %s: none is made until a policy inspects a host\n", *dir)
		}
		for _, i := range infos {
			fmt.Fprintf(stdout, "%s\n  subject  %s\n  sha256   %s\n  valid    %s to %s\n  hosts    %s\n  bundles  %d\n",
				i.Dir, i.Subject, i.Fingerprint, i.NotBefore.Format("2006-01-02"), i.NotAfter.Format("2006-01-02"),
				orDash(strings.Join(i.Hosts, " ")), len(i.Bundles))
		}
		return exitOK
	case "rotate":
		if len(pos) != 2 {
			c.errorf("rotate needs the NETWORK")
			return exitUsage
		}
		caDir := filepath.Join(*dir, pos[1])
		if filepath.Base(pos[1]) != pos[1] {
			c.errorf("network %q: not a name", pos[1])
			return exitUsage
		}
		if _, err := ca.Show(caDir); err != nil {
			return c.fail(err)
		}
		states, err := sandbox.List(c.stateDir)
		if err != nil {
			return c.fail(err)
		}
		var hosts []string
		for _, s := range states {
			if filepath.Clean(s.CADir) != filepath.Clean(caDir) {
				continue
			}
			if p, err := s.Policy(); err == nil {
				hosts = append(hosts, p.InspectedHosts()...)
			}
		}
		slices.Sort(hosts)
		hosts = slices.Compact(hosts)
		if err := ca.Rotate(caDir, hosts); err != nil {
			return c.fail(err)
		}
		info, _ := ca.Show(caDir)
		fmt.Fprintf(stdout, "%s: rotated (sha256 %s), hosts %s\n", caDir, info.Fingerprint, orDash(strings.Join(info.Hosts, " ")))
		return exitOK
	}
	c.errorf("unknown ca command %q: want show or rotate", pos[0])
	return exitUsage
}
