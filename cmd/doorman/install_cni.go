package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"

	"github.com/doorman-net/doorman/cniinstall"
)

const installCNIHelp = `
Chains doorman into this node's primary CNI network configuration (the
lexicographically first valid .conf, .conflist or .json in the conf dir, as
containerd and CRI-O pick it): installs the doorman binary into the bin dir,
appends one doorman entry to the primary conflist (converting a single-plugin
.conf to a .conflist first), and keeps it there, watching the conf dir, until
SIGTERM or SIGINT, which leave the entry in place. --config sets the entry's
defaults (JSON: mode, allowedHosts, excludeNamespaces, clusterDomain,
serviceCIDRs, podCIDRs, nat64Prefixes, allowDirect, stateDir, logDir, otlpEndpoint,
otlpInsecure, otlpHeaders, dnsFilter, hostLayer, allowICMP); a bad one
changes nothing. Logs are JSON lines on stderr, one for each change.

--uninstall removes doorman's entries and restores a converted .conf, then
stays up until SIGTERM (as a DaemonSet's container must) unless --once; the
binary stays unless --remove-binary. --check changes nothing and exits 0 only
when the node is as install-cni (or install-cni --uninstall) leaves it: the
DaemonSet's readiness probe.

Exit status: 0 done (or, with --check, as installed), 1 failed (or not as
installed), 2 bad usage or a bad --config (nothing changed).`

// runInstallCNI is `doorman install-cni`.
func runInstallCNI(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman install-cni", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: doorman install-cni [--cni-bin-dir DIR] [--cni-conf-dir DIR] [--config FILE] [--once] [--uninstall] [--check]\n%s\n\nFlags:\n", installCNIHelp)
		fs.PrintDefaults()
	}
	var o cniinstall.Options
	fs.StringVar(&o.BinDir, "cni-bin-dir", cniinstall.DefaultBinDir, "the node's CNI bin `dir`")
	fs.StringVar(&o.ConfDir, "cni-conf-dir", cniinstall.DefaultConfDir, "the node's CNI conf `dir`")
	fs.StringVar(&o.ConfigFile, "config", "", "the entry's defaults, a JSON `file` (default: allowlist, no hosts)")
	fs.BoolVar(&o.Once, "once", false, "make one pass and exit instead of watching (with --uninstall: exit instead of staying up)")
	fs.BoolVar(&o.Uninstall, "uninstall", false, "remove doorman's entries and restore converted configurations")
	fs.BoolVar(&o.RemoveBinary, "remove-binary", false, "with --uninstall, also remove the doorman binary from the bin dir")
	fs.BoolVar(&o.Check, "check", false, "change nothing; exit 0 only if the node is as installed (or uninstalled)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "doorman install-cni: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := cniinstall.Run(ctx, o, slog.New(slog.NewJSONHandler(stderr, nil)))
	var cerr *cniinstall.ConfigError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &cerr):
		fmt.Fprintf(stderr, "doorman install-cni: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "doorman install-cni: %v\n", err)
		return exitFailed
	}
}
