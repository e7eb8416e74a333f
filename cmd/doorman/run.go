package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/internal/runtimekind"
	"github.com/doorman-net/doorman/runner"
	"github.com/doorman-net/doorman/spec"
)

// runFlags are `doorman run`'s flags.
type runFlags struct {
	allow, direct, dns, subnets, nat64, sets    listFlag
	mode, policyFile, upstream, bridge, cniPath string
	name, stateDir, logDir, runDir, user        string
	caDir, upstreamCA                           string
	limits, runtime                             string
	runtimeArgs                                 listFlag
	allowICMP                                   bool
	proxyLimits                                 proxyLimitFlags
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "mode", "", "policy mode: none, allowlist or open (default allowlist, or the policy file's)")
	fs.StringVar(&f.policyFile, "policy", "", "policy `file` (plain allowlist form); --allow entries are added to it")
	fs.StringVar(&f.upstream, "upstream-resolver", "", "DNS server (`addr[:port]`) the proxy resolves allowed names with; default the resolvers the command queries (--dns)")
	fs.BoolVar(&f.allowICMP, "allow-icmp", false, "let ICMP echo requests (at most 64 bytes of data) out to the --allow-direct destinations")
	fs.StringVar(&f.bridge, "bridge", runner.DefaultBridge, "host bridge of the run network (made by the first run, removed by the last)")
	fs.StringVar(&f.cniPath, "cni-path", "", "colon-separated `dirs` holding the loopback, bridge, host-local and doorman plugins (default: next to this binary, ../lib/doorman/cni, /opt/cni/bin, /usr/lib/cni)")
	fs.StringVar(&f.name, "name", "", "sandbox `name` (container id): names its state and its decision log <log-dir>/<name>-eth0.log (default run-<random>)")
	fs.StringVar(&f.stateDir, "state-dir", "", "doorman's sandbox state directory (default /run/doorman)")
	fs.StringVar(&f.logDir, "log-dir", "", "decision log directory (default /var/log/doorman)")
	fs.StringVar(&f.runDir, "run-dir", runner.DefaultRunDir, "`dir` for the runs' records, CNI caches and the run network's IPAM data")
	fs.StringVar(&f.limits, "limits", "", "`file` of the proxy's caps (JSON, the keys of /etc/doorman/limits.json); each key given wins over that file's")
	fs.StringVar(&f.user, "user", "", "run COMMAND as `user[:group]` (names or numbers) instead of as root; a root COMMAND can write the host's files")
	fs.StringVar(&f.caDir, "ca-dir", "", "`dir` of the networks' CAs (default /var/lib/doorman/ca): the run network's, for hosts the --policy file or a --ruleset inspects, is <dir>/<bridge>")
	fs.StringVar(&f.upstreamCA, "upstream-ca-file", "", "PEM `file` of the roots inspected hosts' certificates are verified against (default the system's)")
	fs.StringVar(&f.runtime, "runtime", "", "run COMMAND in gVisor: `runsc` (found on PATH) or the path of a runsc binary, started with --network=sandbox on the sandbox's interface (default: a process of the host kernel)")
	fs.Var(&f.runtimeArgs, "runtime-arg", "a global `flag` of the --runtime, before its run command (repeatable), such as --platform=systrap")
	fs.Var(&f.allow, "allow", "allowlist `entry` (repeatable): api.example.com, *.example.com, 203.0.113.7, 10.0.0.0/8, each with an optional :port or :lo-hi")
	fs.Var(&f.sets, "ruleset", "shipped rule set in force, `NAME[:ACTION]` (repeatable; ACTION deny, strip or probe, default deny): closed-book:strip; added to the --policy file's (doorman rulesets lists them)")
	fs.Var(&f.direct, "allow-direct", "IP or CIDR `entry` (repeatable, optional :port or :lo-hi) the command reaches without the proxy, TCP and UDP")
	fs.Var(&f.dns, "dns", "resolver `addr` the command may query and finds in its /etc/resolv.conf (repeatable; default the host's)")
	fs.Var(&f.nat64, "nat64-prefix", nat64Usage)
	fs.Var(&f.subnets, "subnet", "run network `prefix`, one per family (repeatable; default "+runner.DefaultSubnet+")")
	f.proxyLimits.register(fs)
}

// runUsage is the text above the flags in `doorman run -h`.
const runUsage = `usage: doorman run [FLAGS] -- COMMAND [ARGS...]

Runs COMMAND in a fresh network namespace attached through doorman's CNI chain
(loopback; bridge + host-local; doorman): its TCP reaches only the hosts the policy
allows, and its DNS only the resolvers. The exit status is COMMAND's (125: doorman
failed, 126: COMMAND could not start, 127: COMMAND not found). SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to COMMAND; when it ends the
sandbox is torn down. Needs root. COMMAND runs in pid and mount namespaces of its
own that hide doorman's CA keys, state, logs, /etc/doorman and secret files, the
host's processes and its disks, with Docker's default capabilities when it runs as
root (the default; --user gives another user). A root COMMAND still writes the
host's files: prefer --user (see docs/run.md). --runtime runsc runs
COMMAND in gVisor instead, on the same view of the host (docs/runtimes.md).

Flags:`

// runRun is `doorman run [FLAGS] -- COMMAND [ARGS]`.
func runRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, runUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "doorman run: no command given")
		fs.Usage()
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "doorman run: %v\n", err)
		return runner.ExitFailed
	}
	var cred *syscall.Credential
	if f.user != "" {
		var err error
		if cred, err = credential(f.user); err != nil {
			return fail(fmt.Errorf("--user: %w", err))
		}
	}
	cfg, err := f.config(stderr)
	if err != nil {
		return fail(err)
	}
	if os.Geteuid() != 0 {
		return fail(errors.New("needs root: it creates a network namespace and runs CNI plugins"))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if cmd.Err != nil {
		fmt.Fprintf(stderr, "doorman run: %v\n", cmd.Err)
		return runner.ExitNotFound
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return runner.Run(context.Background(), cfg, cmd, stderr)
}

// config is the run's runner.Config, each flag parsed once.
func (f *runFlags) config(stderr io.Writer) (runner.Config, error) {
	for _, d := range []struct{ flag, value string }{
		{"state-dir", f.stateDir}, {"log-dir", f.logDir}, {"run-dir", f.runDir},
		{"ca-dir", f.caDir}, {"upstream-ca-file", f.upstreamCA},
	} {
		if d.value != "" && (!filepath.IsAbs(d.value) || filepath.Clean(d.value) != d.value) {
			return runner.Config{}, fmt.Errorf("--%s %q: want a clean absolute path", d.flag, d.value)
		}
	}
	cfg := runner.Config{
		Name: f.name, Bridge: f.bridge, StateDir: f.stateDir, RunDir: f.runDir,
		Logf: func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) },
	}
	cfg.AllowICMP, cfg.LogDir, cfg.CADir, cfg.UpstreamCAFile = f.allowICMP, f.logDir, f.caDir, f.upstreamCA
	var err error
	if cfg.Policy, err = runPolicy(f.policyFile, f.mode, f.allow, f.sets); err != nil {
		return cfg, err
	}
	if cfg.Policy.Mode == conf.ModeAllowlist && len(cfg.Policy.Entries) == 0 {
		fmt.Fprintln(stderr, "doorman run: the allowlist is empty: the command may reach no host (give --allow)")
	}
	if cfg.Resolvers, err = spec.ParseAddrs("--dns", f.dns); err != nil {
		return cfg, err
	}
	for _, s := range f.subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return cfg, fmt.Errorf("--subnet %q: not an address prefix such as %s", s, runner.DefaultSubnet)
		}
		cfg.Subnets = append(cfg.Subnets, p)
	}
	if cfg.AllowDirect, err = spec.ParseAllowDirect("--allow-direct", f.direct); err != nil {
		return cfg, err
	}
	if cfg.NAT64Prefixes, err = spec.ParseNAT64Prefixes("--nat64-prefix", f.nat64); err != nil {
		return cfg, err
	}
	if cfg.UpstreamResolvers, err = spec.ParseUpstreamResolver("--upstream-resolver", f.upstream); err != nil {
		return cfg, err
	}
	if err := runner.CheckName(f.name); f.name != "" && err != nil {
		return cfg, fmt.Errorf("--name: %w", err)
	}
	if err := runner.CheckBridgeName(f.bridge); err != nil {
		return cfg, fmt.Errorf("--bridge: %w", err)
	}
	if err := runner.CheckSubnets(cfg.Subnets); err != nil {
		return cfg, fmt.Errorf("--subnet: %w", err)
	}
	if f.cniPath != "" {
		cfg.CNIPath = filepath.SplitList(f.cniPath)
	}
	if cfg.Runtime, err = ociRuntime(f.runtime, f.runtimeArgs); err != nil {
		return cfg, err
	}
	if f.limits != "" {
		data, err := os.ReadFile(f.limits)
		if err != nil {
			return cfg, fmt.Errorf("--limits: %w", err)
		}
		if cfg.Limits, err = spec.ParseLimits(data); err != nil {
			return cfg, fmt.Errorf("--limits %s: %w", f.limits, err)
		}
	}
	if cfg.ProxyLimits, err = f.proxyLimits.parse(); err != nil {
		return cfg, err
	}
	if f.cniPath != "" {
		if _, err := runner.FindPlugins(cfg.CNIPath); err != nil {
			return cfg, fmt.Errorf("--cni-path %q: %w", f.cniPath, err)
		}
	}
	return cfg, nil
}

// ociRuntime is the argv of the OCI runtime --runtime names (nil for
// none): gVisor's runsc, found on PATH or at the path given, with its
// network stack on the sandbox's interface and no cgroup of its own (the
// command stays in doorman run's, as without a runtime) and no overlay
// (its writes reach the files it sees, as without a runtime), then args. Its traffic passes
// the sandbox's own ruleset by: the host-side layer, which every run
// network has, holds it.
func ociRuntime(name string, args []string) ([]string, error) {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return nil, fmt.Errorf("--runtime-arg %q: not a flag of the runtime (such as --platform=systrap)", a)
		}
		if name == "" {
			return nil, fmt.Errorf("--runtime-arg %q: given without --runtime", a)
		}
	}
	if name == "" {
		return nil, nil
	}
	if runtimekind.OfProcess(name, "") != runtimekind.Runsc {
		return nil, fmt.Errorf("--runtime %q: doorman run runs gVisor's runsc (a binary named runsc), or no runtime", name)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("--runtime %q: %w", name, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("--runtime %q: %w", name, err)
	}
	return append([]string{path, "--network=sandbox", "--ignore-cgroups", "--overlay2=none"}, args...), nil
}

// runPolicy builds the run's policy: the policy file's if one is given,
// plus the --allow entries and the --ruleset uses, in the --mode if one
// is given.
func runPolicy(file, mode string, allow, ruleSets []string) (*conf.Policy, error) {
	m := conf.ModeAllowlist
	var entries []string
	var inspect []conf.InspectHost
	var sets []conf.RuleSetUse
	if file != "" {
		p, err := conf.LoadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		m, entries, inspect, sets = p.Mode, p.Hosts(), p.Inspect, p.RuleSets
	}
	if mode != "" {
		var err error
		if m, err = conf.ParseMode(mode); err != nil {
			return nil, fmt.Errorf("--mode: %w", err)
		}
	}
	p, err := conf.NewPolicy(m, append(entries, allow...))
	if err != nil {
		return nil, fmt.Errorf("--allow: %w", err)
	}
	fromFile := len(sets)
	for _, v := range ruleSets {
		u, err := conf.ParseRuleSetRef(v)
		if err != nil {
			return nil, fmt.Errorf("--ruleset %w", err)
		}
		sets = append(sets, u)
	}
	if len(sets) > 0 {
		if p, err = p.WithRuleSets(sets); err != nil {
			if fromFile > 0 {
				return nil, fmt.Errorf("--ruleset (beside the --policy file's rule sets): %w", err)
			}
			return nil, fmt.Errorf("--ruleset: %w", err)
		}
	}
	if len(inspect) > 0 {
		// The policy file's request rules, checked when it loaded.
		return p.WithInspect(inspect)
	}
	return p, nil
}

// credential resolves "user[:group]" (names or numbers) to the uid, gid
// and supplementary groups COMMAND runs with.
func credential(spec string) (*syscall.Credential, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	var uid, gid uint64
	var groups []uint32
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		uid, gid = n, n
		if u, err := user.LookupId(name); err == nil {
			gid, _ = strconv.ParseUint(u.Gid, 10, 32)
			groups = groupIDs(u)
		}
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", spec, err)
		}
		uid, _ = strconv.ParseUint(u.Uid, 10, 32)
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
		groups = groupIDs(u)
	}
	if hasGroup {
		if n, err := strconv.ParseUint(group, 10, 32); err == nil {
			gid = n
		} else if g, err := user.LookupGroup(group); err == nil {
			gid, _ = strconv.ParseUint(g.Gid, 10, 32)
		} else {
			return nil, fmt.Errorf("%q: %w", spec, err)
		}
		groups = nil
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, nil
}

// groupIDs are u's supplementary groups (none if they cannot be read).
func groupIDs(u *user.User) []uint32 {
	ids, err := u.GroupIds()
	if err != nil {
		return nil
	}
	var out []uint32
	for _, s := range ids {
		if n, err := strconv.ParseUint(s, 10, 32); err == nil {
			out = append(out, uint32(n))
		}
	}
	return out
}
