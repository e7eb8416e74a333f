package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/proxy/daemon"
	"github.com/doorman-net/doorman/proxy/proxyconf"
	"github.com/doorman-net/doorman/spec"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// proxyFlags are `doorman proxy`'s flags: --config FILE, as a sandbox
// starts it, or the settings one by one, to run a proxy by hand.
type proxyFlags struct {
	config, sandbox, policy, log, netns     string
	sniffTimeout, drainTimeout              time.Duration
	readyFD, heartbeatFD                    int
	listenFDs, listen, dnsUDPFDs, dnsTCPFDs listFlag
	resolvers, dnsUpstreams, allowDirect    listFlag
	nat64                                   listFlag
	otlpEndpoint, otlpConfig                string
	otlpInsecure                            bool
	otlpHeaders                             listFlag
}

func (f *proxyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "config `file` (JSON) holding every setting below but --ready-fd and --heartbeat-fd, as the plugin and the hook start the proxy")
	fs.StringVar(&f.sandbox, "sandbox", "", "sandbox id, for logs and 403 pages (required; with --config, the file's)")
	fs.StringVar(&f.policy, "policy", "", "policy file in the plain allowlist form, watched for changes (required)")
	fs.StringVar(&f.log, "log", "-", "where decision lines go: a file (appended) or - for stderr")
	fs.DurationVar(&f.sniffTimeout, "sniff-timeout", spec.DefaultSniffTimeout, "how long to wait for the first bytes that carry a name")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", proxyconf.DefaultDrainTimeout, "on SIGTERM, how long open connections may finish before they are closed")
	fs.IntVar(&f.readyFD, "ready-fd", -1, "file descriptor to write \"ready\\n\" to (then close) once serving")
	fs.IntVar(&f.heartbeatFD, "heartbeat-fd", -1, "inherited socket `fd` on which a supervisor's heartbeats are answered (as `doorman supervise` starts the proxy)")
	fs.Var(&f.listenFDs, "listen-fd", "inherited listening TCP socket `fd` (repeatable)")
	fs.Var(&f.listen, "listen", "TCP `address` to bind and serve (repeatable; for tests)")
	fs.Var(&f.dnsUDPFDs, "dns-udp-fd", "inherited UDP socket `fd` the DNS filter serves (repeatable)")
	fs.Var(&f.dnsTCPFDs, "dns-tcp-fd", "inherited listening TCP socket `fd` the DNS filter serves (repeatable)")
	fs.Var(&f.resolvers, "resolver", "DNS server (`addr[:port]`) the proxy resolves names admitted by name rules with (repeatable: tried in order, the next on a timeout or SERVFAIL); default: this host's /etc/resolv.conf")
	fs.Var(&f.dnsUpstreams, "dns-upstream", "resolver `addr:port` the DNS filter forwards admitted queries to (repeatable)")
	fs.Var(&f.allowDirect, "allow-direct", "allowDirect `entry` (IP or CIDR, optional port) the sandbox reaches without the proxy: its new flows are logged from conntrack (repeatable)")
	fs.Var(&f.nat64, "nat64-prefix", nat64Usage)
	fs.StringVar(&f.netns, "netns", "", "network namespace `path` whose allowDirect flows are logged; default: the namespace of the first listener (for --listen-fd, the sandbox's)")
	fs.StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "OpenTelemetry collector to copy connection and DNS records to, as OTLP/HTTP logs: a URL (http://127.0.0.1:4318) or host:port (TLS unless --otlp-insecure); empty: the local log only")
	fs.BoolVar(&f.otlpInsecure, "otlp-insecure", false, "plaintext HTTP to a host:port --otlp-endpoint")
	fs.StringVar(&f.otlpConfig, "otlp-config", "", "JSON `file` with the OTLP settings ({\"endpoint\": …, \"headers\": {…}, \"insecure\": …, \"queueSize\": …}), instead of the --otlp-* flags: keeps headers off the command line")
	fs.Var(&f.otlpHeaders, "otlp-header", "`key=value` header sent with every OTLP export request (repeatable)")
}

// runProxy is `doorman proxy`: one sandbox's proxy, until SIGTERM.
func runProxy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f proxyFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := f.build(fs)
	if err == nil {
		phasetrace.Mark("worker.config")
		ready := readySignal(f.readyFD)
		err = daemon.Run(context.Background(), cfg, stderr, func() {
			phasetrace.Mark("worker.serving")
			if ready != nil {
				ready()
			}
		}, f.heartbeatFD)
	}
	if err != nil {
		fmt.Fprintf(stderr, "doorman proxy: %v\n", err)
		return 1
	}
	return 0
}

// readySignal writes "ready\n" to fd and closes it; nothing without one.
func readySignal(fd int) func() {
	if fd < 0 {
		return nil
	}
	return func() {
		f := os.NewFile(uintptr(fd), "ready")
		f.Write([]byte("ready\n"))
		f.Close()
	}
}

// build makes the proxy's config: the --config file's, with no other
// setting beside it (but --sandbox, which must agree: it names the
// sandbox on the command line, for ps), or the one the flags say.
func (f *proxyFlags) build(fs *flag.FlagSet) (proxyconf.Config, error) {
	if f.config != "" {
		var others []string
		fs.Visit(func(fl *flag.Flag) {
			if fl.Name != "config" && fl.Name != "ready-fd" && fl.Name != "heartbeat-fd" && fl.Name != "sandbox" {
				others = append(others, "--"+fl.Name)
			}
		})
		if len(others) > 0 {
			return proxyconf.Config{}, fmt.Errorf("--config holds every setting: %s goes in the file", strings.Join(others, ", "))
		}
		cfg, err := proxyconf.Load(f.config)
		if err == nil && f.sandbox != "" && f.sandbox != cfg.Sandbox {
			err = fmt.Errorf("--sandbox %q: %s is the config of sandbox %q", f.sandbox, f.config, cfg.Sandbox)
		}
		return cfg, err
	}
	if f.sandbox == "" || f.policy == "" {
		return proxyconf.Config{}, fmt.Errorf("--sandbox and --policy are required")
	}
	if len(f.listenFDs) == 0 && len(f.listen) == 0 {
		return proxyconf.Config{}, fmt.Errorf("no listener: give --listen-fd or --listen")
	}
	cfg := proxyconf.Config{Sandbox: f.sandbox, PolicyFile: f.policy, LogFile: f.log, NetNS: f.netns,
		SniffTimeout: spec.Duration(f.sniffTimeout), DrainTimeout: spec.Duration(f.drainTimeout)}
	var err error
	if cfg.AllowDirect, err = parseAllowDirect(f.allowDirect); err != nil {
		return cfg, err
	}
	if cfg.NAT64Prefixes, err = spec.ParseNAT64Prefixes("--nat64-prefix", f.nat64); err != nil {
		return cfg, err
	}
	if cfg.Resolvers, err = parseResolvers(f.resolvers); err != nil {
		return cfg, err
	}
	if cfg.DNSUpstreams, err = parseDNSUpstreams(f.dnsUpstreams); err != nil {
		return cfg, err
	}
	if err := f.listeners(&cfg.Listeners); err != nil {
		return cfg, err
	}
	otlp, err := otlpSettings(f.otlpConfig, f.otlpEndpoint, f.otlpInsecure, f.otlpHeaders)
	cfg.OTLP = otlp
	return cfg, err
}

// listeners fills l from the listener flags.
func (f *proxyFlags) listeners(l *proxyconf.Listeners) error {
	for _, fds := range []struct {
		flag string
		in   listFlag
		out  *[]int
	}{{"--listen-fd", f.listenFDs, &l.TCP}, {"--dns-udp-fd", f.dnsUDPFDs, &l.DNSUDP}, {"--dns-tcp-fd", f.dnsTCPFDs, &l.DNSTCP}} {
		for _, s := range fds.in {
			fd, err := strconv.Atoi(s)
			if err != nil || fd < 3 {
				return fmt.Errorf("%s %q: not a file descriptor number above 2", fds.flag, s)
			}
			*fds.out = append(*fds.out, fd)
		}
	}
	l.Addrs = f.listen
	return nil
}

// parseResolvers parses the --resolver values.
func parseResolvers(raw []string) ([]netip.AddrPort, error) {
	return spec.ParseServers("--resolver", raw...)
}

// parseDNSUpstreams parses the --dns-upstream values: addr:port each.
func parseDNSUpstreams(raw []string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, s := range raw {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, fmt.Errorf("--dns-upstream %q: want addr:port: %v", s, err)
		}
		out = append(out, ap)
	}
	return out, nil
}

// parseAllowDirect parses the --allow-direct values: address entries only.
func parseAllowDirect(raw []string) ([]conf.Direct, error) {
	return spec.ParseAllowDirect("--allow-direct", raw)
}

// otlpSettings gathers the OTLP export settings from --otlp-config file,
// or else from the --otlp-endpoint, --otlp-insecure and --otlp-header
// flags (key=value each).
func otlpSettings(file, endpoint string, insecure bool, headerFlags []string) (spec.OTLP, error) {
	if file != "" {
		if endpoint != "" || insecure || len(headerFlags) > 0 {
			return spec.OTLP{}, fmt.Errorf("--otlp-config %s: give either it or the --otlp-endpoint, --otlp-insecure and --otlp-header flags", file)
		}
		return hostconf.LoadOTLP(file)
	}
	var headers map[string]string
	for _, kv := range headerFlags {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return spec.OTLP{}, fmt.Errorf("--otlp-header %q: want key=value", kv)
		}
		if headers == nil {
			headers = make(map[string]string, len(headerFlags))
		}
		headers[strings.TrimSpace(k)] = v
	}
	if endpoint == "" && (insecure || len(headers) > 0) {
		return spec.OTLP{}, fmt.Errorf("--otlp-insecure and --otlp-header need --otlp-endpoint")
	}
	return spec.OTLP{Endpoint: endpoint, Insecure: insecure, Headers: headers}, nil
}
