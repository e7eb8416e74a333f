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
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/resolver"
	"github.com/doorman-net/doorman/runner"
)

// Exit statuses of `doorman run` itself, as env(1), timeout(1) and
// container engines use them; any other status is the command's.
const (
	exitRunFailed   = 125 // doorman could not set up or tear down the sandbox
	exitNotRunnable = 126 // the command was found but could not be started
	exitNotFound    = 127 // the command was not found
)

// detachTimeout bounds the teardown after the command has ended.
const detachTimeout = 2 * time.Minute

// runRun is `doorman run [FLAGS] -- COMMAND [ARGS]`.
func runRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		allow, direct, dns listFlag
		subnets            listFlag
		mode               = fs.String("mode", "", "policy mode: none, allowlist or open (default allowlist, or the policy file's)")
		policyFile         = fs.String("policy", "", "policy `file` (plain allowlist form); --allow entries are added to it")
		upstream           = fs.String("upstream-resolver", "", "DNS server (`addr[:port]`) the proxy resolves allowed names with; default the resolvers the command queries (--dns)")
		allowICMP          = fs.Bool("allow-icmp", false, "let ICMP echo requests (at most 64 bytes of data) out to the --allow-direct destinations")
		bridge             = fs.String("bridge", runner.DefaultBridge, "host bridge of the run network (made by the first run, removed by the last)")
		cniPath            = fs.String("cni-path", "", "colon-separated `dirs` holding the loopback, bridge, host-local and doorman plugins (default: next to this binary, ../lib/doorman/cni, /opt/cni/bin, /usr/lib/cni)")
		name               = fs.String("name", "", "sandbox `name` (container id): names its state and its decision log <log-dir>/<name>-eth0.log (default run-<random>)")
		stateDir           = fs.String("state-dir", "", "doorman's sandbox state directory (default /run/doorman)")
		logDir             = fs.String("log-dir", "", "decision log directory (default /var/log/doorman)")
		runDir             = fs.String("run-dir", runner.DefaultRunDir, "`dir` for the runs' records, CNI caches and the run network's IPAM data")
		asUser             = fs.String("user", "", "run COMMAND as `user[:group]` (names or numbers) instead of as root; a root COMMAND can undo its own sandbox")
	)
	fs.Var(&allow, "allow", "allowlist `entry` (repeatable): api.example.com, *.example.com, 203.0.113.7, 10.0.0.0/8, each with an optional :port or :lo-hi")
	fs.Var(&direct, "allow-direct", "IP or CIDR `entry` (repeatable, optional :port or :lo-hi) the command reaches without the proxy, TCP and UDP")
	fs.Var(&dns, "dns", "resolver `addr` the command may query and finds in its /etc/resolv.conf (repeatable; default the host's)")
	fs.Var(&subnets, "subnet", "run network `prefix`, one per family (repeatable; default "+runner.DefaultSubnet+")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: doorman run [FLAGS] -- COMMAND [ARGS...]")
		fmt.Fprintln(stderr, "\nRuns COMMAND in a fresh network namespace attached through doorman's CNI chain")
		fmt.Fprintln(stderr, "(loopback; bridge + host-local; doorman): its TCP reaches only the hosts the policy")
		fmt.Fprintln(stderr, "allows, and its DNS only the resolvers. The exit status is COMMAND's (125: doorman")
		fmt.Fprintln(stderr, "failed, 126: COMMAND could not start, 127: COMMAND not found). SIGINT, SIGTERM,")
		fmt.Fprintln(stderr, "SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to COMMAND; when it ends the")
		fmt.Fprintln(stderr, "sandbox is torn down. Needs root; COMMAND runs as root unless --user is given, and")
		fmt.Fprintln(stderr, "a root COMMAND can undo its own sandbox (see README, Security notes).")
		fmt.Fprintln(stderr, "\nFlags:")
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
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "doorman run: "+format+"\n", a...)
		return exitRunFailed
	}
	if os.Geteuid() != 0 {
		return fail("needs root: it creates a network namespace and runs CNI plugins")
	}

	cfg := runner.Config{
		Name:             *name,
		UpstreamResolver: *upstream,
		AllowICMP:        *allowICMP,
		Bridge:           *bridge,
		StateDir:         *stateDir,
		LogDir:           *logDir,
		RunDir:           *runDir,
		Logf:             func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) },
	}
	var err error
	if cfg.Policy, err = runPolicy(*policyFile, *mode, allow); err != nil {
		return fail("%v", err)
	}
	if cfg.Policy.Mode == conf.ModeAllowlist && len(cfg.Policy.Entries) == 0 {
		fmt.Fprintln(stderr, "doorman run: the allowlist is empty: the command may reach no host (give --allow)")
	}
	for _, s := range dns {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fail("--dns %q: not an IP address", s)
		}
		cfg.Resolvers = append(cfg.Resolvers, a.Unmap())
	}
	for _, s := range subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fail("--subnet %q: not an address prefix such as %s", s, runner.DefaultSubnet)
		}
		cfg.Subnets = append(cfg.Subnets, p)
	}
	for _, s := range direct {
		e, err := conf.ParseEntry(s)
		if err != nil {
			return fail("--allow-direct: %v", err)
		}
		if e.Kind != conf.KindPrefix {
			return fail("--allow-direct %q: only an IP or CIDR (with an optional port) can bypass the proxy", s)
		}
		cfg.AllowDirect = append(cfg.AllowDirect, s)
	}
	if *upstream != "" {
		if _, err := resolver.ParseServer(*upstream); err != nil {
			return fail("--upstream-resolver %v", err)
		}
	}
	if *cniPath != "" {
		cfg.CNIPath = filepath.SplitList(*cniPath)
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	if cmd.Err != nil {
		fmt.Fprintf(stderr, "doorman run: %v\n", cmd.Err)
		return exitNotFound
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if *asUser != "" {
		cred, err := credential(*asUser)
		if err != nil {
			return fail("--user: %v", err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}

	// Signals are caught from the start: one that comes while the
	// sandbox is being made ends the run once it is made, torn down.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	sb, err := runner.Attach(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitRunFailed
	}
	detach := func(status int) int {
		ctx, cancel := context.WithTimeout(context.Background(), detachTimeout)
		defer cancel()
		// A teardown that fails is reported; the status stays the
		// command's, and the next run reaps what is left.
		if err := sb.Detach(ctx); err != nil {
			fmt.Fprintln(stderr, err)
		}
		return status
	}
	if sig, ok := pendingTermination(sigs); ok {
		return detach(128 + int(sig))
	}
	if err := sb.Start(cmd); err != nil {
		fmt.Fprintf(stderr, "doorman run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return detach(exitNotFound)
		}
		return detach(exitNotRunnable)
	}
	for {
		select {
		case sig := <-sigs:
			forwardSignal(sig.(syscall.Signal), cmd.Process)
		case <-sb.Exited():
			return detach(runner.ExitStatus(sb.Wait()))
		}
	}
}

// pendingTermination reports a terminating signal that came while the
// sandbox was being made.
func pendingTermination(sigs <-chan os.Signal) (syscall.Signal, bool) {
	for {
		select {
		case s := <-sigs:
			if sig := s.(syscall.Signal); sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2 {
				return sig, true
			}
		default:
			return 0, false
		}
	}
}

// forwardSignal passes sig on to the command. The command shares doorman's
// process group, so when doorman is the foreground job of the terminal on
// stdin, a SIGINT, SIGQUIT or SIGHUP most likely came from that terminal,
// which has already sent it to the command too: those are not sent twice.
func forwardSignal(sig syscall.Signal, p *os.Process) {
	switch sig {
	case syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP:
		if foregroundOnTerminal() {
			return
		}
	}
	p.Signal(sig)
}

// foregroundOnTerminal reports whether stdin is a terminal whose
// foreground process group is this process's.
func foregroundOnTerminal() bool {
	pgrp, err := unix.IoctlGetInt(int(os.Stdin.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// runPolicy builds the run's policy: the policy file's if one is given,
// plus the --allow entries, in the --mode if one is given.
func runPolicy(file, mode string, allow []string) (*conf.Policy, error) {
	m := conf.ModeAllowlist
	var entries []string
	if file != "" {
		p, err := conf.LoadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		m, entries = p.Mode, p.Hosts()
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
