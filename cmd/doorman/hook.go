package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/spec"
)

// runtimeLinkName is the name under which doorman acts as the runc wrapper.
const runtimeLinkName = "doorman-runtime"

// runHook is `doorman hook [FLAGS] STAGE`, run by an OCI runtime with the
// container's state JSON on stdin.
func runHook(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman hook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f hookFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: doorman hook [FLAGS] createRuntime|prestart|poststop   (state JSON on stdin)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	opts := f.opts
	if err := checkDirFlags(fs, "state-dir", "log-dir", "ca-dir", "upstream-ca-file"); err != nil {
		fmt.Fprintln(stderr, "doorman hook:", err)
		return 2
	}
	otlp, err := hostconf.OTLP(f.otlpConfig)
	if err != nil {
		fmt.Fprintln(stderr, "doorman hook: --otlp-config:", err)
		return 1
	}
	opts.OTLP = otlp
	if opts.Limits, err = hostconf.Limits(f.limitsConfig); err != nil {
		fmt.Fprintln(stderr, "doorman hook: --limits-config:", err)
		return 1
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if opts.ProxyLimits, err = f.limits.parse(); err != nil {
		fmt.Fprintln(stderr, "doorman hook:", err)
		return 2
	}
	if opts.NAT64Prefixes, err = spec.ParseNAT64Prefixes("--nat64-prefix", f.nat64); err != nil {
		fmt.Fprintln(stderr, "doorman hook:", err)
		return 2
	}
	if err := hook.Run(fs.Arg(0), os.Stdin, opts); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// hookFlags are `doorman hook`'s flags.
type hookFlags struct {
	opts                     hook.Options
	otlpConfig, limitsConfig string
	limits                   proxyLimitFlags
	nat64                    listFlag
}

func (f *hookFlags) register(fs *flag.FlagSet) {
	opts := &f.opts
	fs.StringVar(&opts.StateDir, "state-dir", "", "sandbox state directory (default /run/doorman)")
	fs.StringVar(&opts.LogDir, "log-dir", "", "decision log directory (default /var/log/doorman)")
	fs.StringVar(&opts.DefaultPolicy, "default-policy", hook.DefaultPolicyFile, "policy for containers without doorman.io/* annotations")
	fs.StringVar(&opts.UpstreamResolver, "upstream-resolver", "", "DNS server (`addr[:port]`) the proxy resolves allowed names with; default the container's own resolvers (the servers behind Docker's 127.0.0.11), else the host's /etc/resolv.conf")
	fs.StringVar(&opts.CADir, "ca-dir", "", "`dir` of the networks' CAs (default /var/lib/doorman/ca); the hook's containers share <dir>/hook")
	fs.StringVar(&opts.UpstreamCAFile, "upstream-ca-file", "", "PEM `file` of the roots inspected hosts' certificates are verified against (default the system's)")
	fs.BoolVar(&opts.AllowICMP, "allow-icmp", false, "let ICMP echo requests (at most 64 bytes of data) out to the container's allowDirect destinations")
	fs.StringVar(&f.otlpConfig, "otlp-config", hostconf.OTLPFile, "OTLP export settings (JSON: endpoint, insecure, headers) for the proxies; ignored if absent")
	fs.StringVar(&f.limitsConfig, "limits-config", hostconf.LimitsFile, "the proxies' caps (JSON: connections, pending, pendingBytes, sniffTimeout, perUpstream, idleTimeout, dnsQueriesPerSecond, logMaxSize, bufferBytes, heartbeatTimeout); the defaults if absent")
	fs.BoolVar(&opts.HostLayer, "host-layer", true, "add rules on the container's host-side veth that it cannot remove, even with CAP_NET_ADMIN")
	fs.BoolVar(&opts.DNSFilter, "dns-filter", true, "send the container's DNS through the proxy's filter, which answers only names the policy could admit")
	f.limits.register(fs)
	fs.Var(&f.nat64, "nat64-prefix", nat64Usage)
}

// checkDirFlags refuses a value of the named flags (paths on the host)
// that is not a clean absolute path: the front doors' processes run in
// directories of their runtime's choosing.
func checkDirFlags(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		v := fs.Lookup(n).Value.String()
		if v != "" && (!filepath.IsAbs(v) || filepath.Clean(v) != v) {
			return fmt.Errorf("--%s %q: want a clean absolute path", n, v)
		}
	}
	return nil
}

// runRuntime is the runc wrapper: every argument is runc's.
func runRuntime(args []string, stdout, stderr io.Writer) int {
	cfgPath := os.Getenv("DOORMAN_RUNTIME_CONFIG")
	if cfgPath == "" {
		cfgPath = hook.RuntimeConfigFile
	}
	cfg, err := hook.LoadRuntimeConfig(cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "doorman:", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "doorman: cannot find its own binary:", err)
		return 1
	}
	runc, args, err := hook.Wrap(args, cfg, self)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	err = hook.ExecRunc(runc, args)
	fmt.Fprintf(stderr, "doorman: exec %s: %v\n", runc, err)
	return 1
}

// nat64Usage is the usage of --nat64-prefix, which `doorman hook` and
// `doorman run` share.
const nat64Usage = "`prefix` of a NAT64 translator the host reaches besides 64:ff9b::/96 and 64:ff9b:1::/48 (repeatable; /32, /40, /48, /56, /64 or /96): the proxy refuses its addresses that carry a refused IPv4 address"

// proxyLimitFlags are the flags of the proxy's cgroup limits, which
// `doorman hook` and `doorman run` share.
type proxyLimitFlags struct{ memory, pids, cpuWeight string }

func (f *proxyLimitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.memory, "proxy-memory", "", "memory limit of the proxy's cgroup: `bytes`, with an optional unit k, m or g (powers of 1024: 256Mi, 1g), or max (default 256Mi)")
	fs.StringVar(&f.pids, "proxy-pids", "", "limit on the `number` of processes and threads in the proxy's cgroup, or max (default 512)")
	fs.StringVar(&f.cpuWeight, "proxy-cpu-weight", "", "CPU `weight` of the proxy's cgroup against its siblings, 1 to 10000 (default 100, a sibling's share)")
}

// parse parses the flags' values.
func (f *proxyLimitFlags) parse() (l cgroup.Limits, err error) {
	if l.Memory, err = spec.ParseMemoryLimit("--proxy-memory", f.memory); err != nil {
		return l, err
	}
	if l.Pids, err = spec.ParsePidsLimit("--proxy-pids", f.pids); err != nil {
		return l, err
	}
	l.CPUWeight, err = spec.ParseCPUWeight("--proxy-cpu-weight", f.cpuWeight)
	return l, err
}
