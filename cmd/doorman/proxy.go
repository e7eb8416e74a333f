package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy"
	"github.com/doorman-net/doorman/proxy/directlog"
	"github.com/doorman-net/doorman/proxy/dnsfilter"
	"github.com/doorman-net/doorman/proxy/guard"
	"github.com/doorman-net/doorman/proxy/otlplog"
	"github.com/doorman-net/doorman/proxy/resolver"
)

// otlpShutdownTimeout bounds how long an exiting proxy spends sending the
// last OTLP records: the local log has them anyway.
const otlpShutdownTimeout = 2 * time.Second

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func runProxy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sandbox      = fs.String("sandbox", "", "sandbox id, for logs and 403 pages (required)")
		policyFile   = fs.String("policy", "", "policy file in the plain allowlist form, watched for changes (required)")
		logDest      = fs.String("log", "-", "where decision lines go: a file (appended) or - for stderr")
		sniffTimeout = fs.Duration("sniff-timeout", 10*time.Second, "how long to wait for the first bytes that carry a name")
		drain        = fs.Duration("drain-timeout", 10*time.Second, "on SIGTERM, how long open connections may finish before they are closed")
		readyFD      = fs.Int("ready-fd", -1, "file descriptor to write \"ready\\n\" to (then close) once serving")
		listenFDs    listFlag
		listenAddrs  listFlag
		dnsUDPFDs    listFlag
		dnsTCPFDs    listFlag
		dnsUpstreams listFlag
		resolvers    listFlag
		otlpEndpoint = fs.String("otlp-endpoint", "", "OpenTelemetry collector to copy connection and DNS records to, as OTLP/HTTP logs: a URL (http://127.0.0.1:4318) or host:port (TLS unless --otlp-insecure); empty: the local log only")
		otlpInsecure = fs.Bool("otlp-insecure", false, "plaintext HTTP to a host:port --otlp-endpoint")
		otlpConfig   = fs.String("otlp-config", "", "JSON `file` with the OTLP settings ({\"endpoint\": …, \"headers\": {…}, \"insecure\": …, \"queueSize\": …}), instead of the --otlp-* flags: keeps headers off the command line")
		otlpHeaders  listFlag
		allowDirect  listFlag
		netnsPath    = fs.String("netns", "", "network namespace `path` whose allowDirect flows are logged; default: the namespace of the first listener (for --listen-fd, the sandbox's)")
	)
	fs.Var(&listenFDs, "listen-fd", "inherited listening TCP socket `fd` (repeatable)")
	fs.Var(&listenAddrs, "listen", "TCP `address` to bind and serve (repeatable; for tests)")
	fs.Var(&dnsUDPFDs, "dns-udp-fd", "inherited UDP socket `fd` the DNS filter serves (repeatable)")
	fs.Var(&dnsTCPFDs, "dns-tcp-fd", "inherited listening TCP socket `fd` the DNS filter serves (repeatable)")
	fs.Var(&resolvers, "resolver", "DNS server (`addr[:port]`) the proxy resolves names admitted by name rules with (repeatable: tried in order, the next on a timeout or SERVFAIL); default: this host's /etc/resolv.conf")
	fs.Var(&dnsUpstreams, "dns-upstream", "resolver `addr:port` the DNS filter forwards admitted queries to (repeatable)")
	fs.Var(&allowDirect, "allow-direct", "allowDirect `entry` (IP or CIDR, optional port) the sandbox reaches without the proxy: its new flows are logged from conntrack (repeatable)")
	fs.Var(&otlpHeaders, "otlp-header", "`key=value` header sent with every OTLP export request (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "doorman proxy: "+format+"\n", a...)
		return 1
	}
	if *sandbox == "" || *policyFile == "" {
		return fail("--sandbox and --policy are required")
	}
	if len(listenFDs) == 0 && len(listenAddrs) == 0 {
		return fail("no listener: give --listen-fd or --listen")
	}
	directEntries, err := parseAllowDirect(allowDirect)
	if err != nil {
		return fail("%v", err)
	}
	servers, err := parseResolvers(resolvers)
	if err != nil {
		return fail("%v", err)
	}

	logOut := stderr
	if *logDest != "-" {
		f, err := os.OpenFile(*logDest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return fail("decision log: %v", err)
		}
		defer f.Close()
		logOut = f
	}
	otlpCfg, err := otlpSettings(*otlpConfig, *otlpEndpoint, *otlpInsecure, otlpHeaders)
	if err != nil {
		return fail("%v", err)
	}
	otlpCfg.Sandbox = *sandbox
	handler, otlpShutdown, err := otlplog.NewHandler(slog.NewJSONHandler(logOut, nil), otlpCfg)
	if err != nil {
		return fail("%v", err)
	}
	// Runs before the log file is closed: the exporter's last "otlp" line
	// goes there.
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), otlpShutdownTimeout)
		defer cancel()
		if err := otlpShutdown(ctx); err != nil {
			fmt.Fprintf(stderr, "doorman proxy: %v\n", err)
		}
	}()
	logger := slog.New(handler)

	var listeners []net.Listener
	closeAll := func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}
	for _, s := range listenFDs {
		ln, err := tcpListenerFD("--listen-fd", s)
		if err != nil {
			closeAll()
			return fail("%v", err)
		}
		listeners = append(listeners, ln)
	}
	var dnsTCP []net.Listener
	var dnsUDP []net.PacketConn
	closeDNS := func() {
		for _, ln := range dnsTCP {
			ln.Close()
		}
		for _, pc := range dnsUDP {
			pc.Close()
		}
	}
	for _, s := range dnsTCPFDs {
		ln, err := tcpListenerFD("--dns-tcp-fd", s)
		if err != nil {
			closeAll()
			closeDNS()
			return fail("%v", err)
		}
		dnsTCP = append(dnsTCP, ln)
	}
	for _, s := range dnsUDPFDs {
		pc, err := udpConnFD("--dns-udp-fd", s)
		if err != nil {
			closeAll()
			closeDNS()
			return fail("%v", err)
		}
		dnsUDP = append(dnsUDP, pc)
	}
	var upstreams []netip.AddrPort
	for _, s := range dnsUpstreams {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			closeAll()
			closeDNS()
			return fail("--dns-upstream %q: want addr:port: %v", s, err)
		}
		upstreams = append(upstreams, ap)
	}
	for _, a := range listenAddrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			closeAll()
			return fail("--listen %s: %v", a, err)
		}
		listeners = append(listeners, ln)
	}

	// This process is the proxy and nothing else: it may change its
	// threads' scheduling while it relays bulk data.
	// One guard for the proxy and its DNS filter: they judge the same
	// addresses and share one reading of the host's addresses and routes.
	upstreamGuard := guard.New(guard.Config{})
	cfg := proxy.Config{Sandbox: *sandbox, SniffTimeout: *sniffTimeout, Logger: logger, BatchWhileBulk: true, Guard: upstreamGuard}
	if len(servers) > 0 {
		stub, err := resolver.New(resolver.Config{Servers: servers})
		if err != nil {
			closeAll()
			return fail("--resolver: %v", err)
		}
		cfg.Resolver = stub
		logger.Info("resolver", "sandbox", *sandbox, "servers", servers)
	} else {
		logger.Warn("resolver", "sandbox", *sandbox, "servers", []netip.AddrPort{}, "resolvConf", hostResolvConf,
			"why", "no --resolver given: names admitted by name rules resolve with this host's resolv.conf, not the sandbox's resolvers")
	}
	p := proxy.New(cfg)
	// A policy that does not load leaves the proxy serving in deny-all:
	// connections are refused visibly, never let through.
	watcher, err := proxy.NewPolicyWatcher(p, *policyFile, logger)
	if err != nil {
		fmt.Fprintf(stderr, "doorman proxy: %v (denying everything until it is fixed)\n", err)
	}

	var filter *dnsfilter.Filter
	if len(dnsTCP)+len(dnsUDP) > 0 {
		filter = dnsfilter.New(dnsfilter.Config{Sandbox: *sandbox, Upstreams: upstreams, Logger: logger, Guard: upstreamGuard}, nil)
		watcher.Also(filter)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go watcher.Run(ctx)

	var wg sync.WaitGroup
	// Direct flows never reach the listeners: their lines come from
	// conntrack. Failing to watch it costs those lines, not the proxy.
	if direct, err := openDirectLog(*sandbox, directEntries, *netnsPath, listeners[0], logger); err != nil {
		logger.Error("allowDirect flows are not logged", "sandbox", *sandbox, "err", err.Error())
		fmt.Fprintf(stderr, "doorman proxy: %v\n", err)
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := direct.Run(ctx); err != nil {
				logger.Error("allowDirect flows are no longer logged", "sandbox", *sandbox, "err", err.Error())
			}
		}()
	}
	for _, ln := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Serve(ln)
		}()
	}
	for _, ln := range dnsTCP {
		wg.Add(1)
		go func() {
			defer wg.Done()
			filter.ServeTCP(ln)
		}()
	}
	for _, pc := range dnsUDP {
		wg.Add(1)
		go func() {
			defer wg.Done()
			filter.ServeUDP(pc)
		}()
	}
	if *readyFD >= 0 {
		f := os.NewFile(uintptr(*readyFD), "ready")
		f.Write([]byte("ready\n"))
		f.Close()
	}
	// What the start touched of the binary need not stay mapped (see
	// dropBinaryPages); a second later, so as not to compete with the
	// plugin or hook that is still finishing the sandbox. Failing to drop
	// it costs only RSS.
	time.AfterFunc(time.Second, func() { dropBinaryPages() })

	go returnIdleMemory(ctx, p)

	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if filter != nil {
		filter.Shutdown(dctx)
	}
	p.Shutdown(dctx)
	wg.Wait()
	return 0
}

// hostResolvConf is where the Go resolver, the proxy's without --resolver,
// reads the host's DNS servers.
const hostResolvConf = "/etc/resolv.conf"

// parseResolvers parses the --resolver values.
func parseResolvers(raw []string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, r := range raw {
		ap, err := resolver.ParseServer(r)
		if err != nil {
			return nil, fmt.Errorf("--resolver %w", err)
		}
		out = append(out, ap)
	}
	return out, nil
}

// parseAllowDirect parses the --allow-direct values: address entries only.
func parseAllowDirect(raw []string) ([]conf.Entry, error) {
	var out []conf.Entry
	for _, r := range raw {
		e, err := conf.ParseEntry(r)
		if err != nil {
			return nil, fmt.Errorf("--allow-direct: %w", err)
		}
		if e.Kind != conf.KindPrefix {
			return nil, fmt.Errorf("--allow-direct %q: only an IP or CIDR (with an optional port) bypasses the proxy", r)
		}
		out = append(out, e)
	}
	return out, nil
}

// openDirectLog opens the watcher of the sandbox's allowDirect flows in
// the namespace at nsPath or, if that is empty, the one ln was created in.
// Without entries it opens nothing.
func openDirectLog(sandbox string, entries []conf.Entry, nsPath string, ln net.Listener, logger *slog.Logger) (*directlog.Watcher, error) {
	if len(entries) == 0 {
		return directlog.Open(directlog.Config{Sandbox: sandbox, Logger: logger})
	}
	var nsFile *os.File
	var err error
	if nsPath != "" {
		nsFile, err = os.Open(nsPath)
	} else if sc, ok := ln.(syscall.Conn); ok {
		nsFile, err = directlog.NetNSOf(sc)
	} else {
		err = fmt.Errorf("listener %v has no file descriptor: give --netns", ln.Addr())
	}
	if err != nil {
		return nil, fmt.Errorf("allowDirect log: %w", err)
	}
	defer nsFile.Close()
	return directlog.Open(directlog.Config{Sandbox: sandbox, Entries: entries, NetNS: int(nsFile.Fd()), Logger: logger})
}

// otlpSettings gathers the OTLP export settings from --otlp-config file,
// or else from the --otlp-endpoint, --otlp-insecure and --otlp-header
// flags (key=value each).
func otlpSettings(file, endpoint string, insecure bool, headerFlags []string) (otlplog.Config, error) {
	if file != "" {
		if endpoint != "" || insecure || len(headerFlags) > 0 {
			return otlplog.Config{}, fmt.Errorf("--otlp-config %s: give either it or the --otlp-endpoint, --otlp-insecure and --otlp-header flags", file)
		}
		return otlplog.LoadFile(file)
	}
	var headers map[string]string
	for _, kv := range headerFlags {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return otlplog.Config{}, fmt.Errorf("--otlp-header %q: want key=value", kv)
		}
		if headers == nil {
			headers = make(map[string]string, len(headerFlags))
		}
		headers[strings.TrimSpace(k)] = v
	}
	if endpoint == "" && (insecure || len(headers) > 0) {
		return otlplog.Config{}, fmt.Errorf("--otlp-insecure and --otlp-header need --otlp-endpoint")
	}
	return otlplog.Config{Endpoint: endpoint, Insecure: insecure, Headers: headers}, nil
}

// tcpListenerFD turns an inherited fd (given as flag's value s) into a
// TCP listener.
func tcpListenerFD(flag, s string) (net.Listener, error) {
	f, err := inheritedFile(flag, s)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", flag, s, err)
	}
	if _, ok := ln.(*net.TCPListener); !ok {
		ln.Close()
		return nil, fmt.Errorf("%s %s: not a TCP listening socket", flag, s)
	}
	return ln, nil
}

// udpConnFD turns an inherited fd into a UDP socket.
func udpConnFD(flag, s string) (net.PacketConn, error) {
	f, err := inheritedFile(flag, s)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", flag, s, err)
	}
	if _, ok := pc.(*net.UDPConn); !ok {
		pc.Close()
		return nil, fmt.Errorf("%s %s: not a UDP socket", flag, s)
	}
	return pc, nil
}

func inheritedFile(flag, s string) (*os.File, error) {
	fd, err := strconv.Atoi(s)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s %q: not a file descriptor number above 2", flag, s)
	}
	return os.NewFile(uintptr(fd), flag+"-"+s), nil
}

// idleDropAfter is how long a proxy goes without a connection before it
// unmaps the binary pages its work mapped (dropBinaryPages): a sandbox
// idle that long is likely to stay idle, while one between bursts would
// only map them again.
const idleDropAfter = time.Minute

// returnIdleMemory gives the heap's free pages back to the kernel once a
// burst of connections is over, and unmaps the binary's pages once the
// proxy has been idle for idleDropAfter. The Go runtime keeps free pages
// for minutes otherwise, and a host runs one proxy per sandbox: their idle
// footprint is what adds up.
func returnIdleMemory(ctx context.Context, p *proxy.Proxy) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	var seen int64
	lastBusy, dropped := time.Now(), true // dropped a second after start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := p.Stats()
			total := st.Allowed + st.Denied
			if total != seen || st.Active != 0 {
				lastBusy, dropped = now, false
			}
			if total != seen && st.Active == 0 {
				seen = total
				debug.FreeOSMemory()
			}
			if !dropped && st.Active == 0 && now.Sub(lastBusy) >= idleDropAfter {
				dropBinaryPages()
				dropped = true
			}
		}
	}
}
