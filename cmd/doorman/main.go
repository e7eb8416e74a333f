// Command doorman is the one doorman binary. Called by a container runtime
// with CNI_COMMAND set, it is the CNI plugin; otherwise its first argument
// names a subcommand: the per-sandbox proxy, the OCI hook, the runc wrapper
// and the operator CLI.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/plugin"
	"github.com/doorman-net/doorman/runner"
)

// command is one subcommand: it parses its own flags from args and returns
// the process exit status.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() map[string]command {
	return map[string]command{
		"proxy":    {"serve one sandbox's transparent proxy (started by doorman supervise)", runProxy},
		"hook":     {"OCI hook: enforce at createRuntime/prestart, tear down at poststop", runHook},
		"run":      {"run a command in a fresh network namespace under a doorman policy", runRun},
		"runtime":  {"runc wrapper for dockerd: adds doorman's hooks, then execs runc", runRuntime},
		"version":  {"print the version", runVersion},
		"ls":       {"list the enforced sandboxes on this host", runLs},
		"show":     {"show one sandbox: policy, proxy, recent decisions", runShow},
		"allow":    {"add entries to a sandbox's allowlist", runAllow},
		"deny":     {"remove entries from a sandbox's allowlist", runDeny},
		"mode":     {"set a sandbox's mode: none, allowlist or open", runMode},
		"set":      {"replace a sandbox's policy with a policy file", runSet},
		"logs":     {"print (or follow) a sandbox's decisions", runLogs},
		"stop":     {"stop a sandbox's proxy (its TCP is refused) until doorman start", runStop},
		"start":    {"start a sandbox's proxy under a supervisor (after stop, or to restore one)", runStart},
		"learn":    {"print an allowlist that admits what a sandbox did", runLearn},
		"ca":       {"show or rotate the per-network CAs of inspected hosts", runCA},
		"rulesets": {"list the rule sets doorman ships, or show one's rules", runRuleSets},
		"tools":    {"the probe report: provider-side tools a sandbox's requests used", runTools},

		// The parent of each sandbox's proxy, started by the plugin and
		// the hook.
		"supervise": {"hold one sandbox's listeners and restart its proxy when it dies", runSupervise},

		// Kubernetes: the node installer, run by a DaemonSet.
		"install-cni": {"chain doorman into this node's primary CNI network configuration", runInstallCNI},
	}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	phasetrace.Mark("main")
	// `doorman run` starts this binary again as its command's init.
	if os.Args[0] == runner.InitArg0 {
		os.Exit(runner.Init())
	}
	// A runtime calls CNI plugins with CNI_COMMAND set and the network
	// configuration on stdin; the arguments carry nothing.
	if os.Getenv("CNI_COMMAND") != "" {
		plugin.Main(version)
		return
	}
	// Installed as "doorman-runtime" (a link), doorman is the runc
	// wrapper dockerd calls with runc's arguments.
	if filepath.Base(os.Args[0]) == runtimeLinkName {
		os.Exit(runRuntime(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "doorman: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: doorman COMMAND [FLAGS]")
	fmt.Fprintln(w, "\nWith CNI_COMMAND set in the environment, doorman runs as a CNI plugin.")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, cmds[n].summary)
	}
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "doorman %s\n", version)
	return 0
}
