package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/doorman-net/doorman/enforce/hostlayer"
	"github.com/doorman-net/doorman/proxy"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/dnsfilter"
	"github.com/doorman-net/doorman/proxy/droplog"
	"github.com/doorman-net/doorman/proxy/droplog/nflog"
	"github.com/doorman-net/doorman/proxy/guard"
	"github.com/doorman-net/doorman/proxy/internal/realdst"
	"github.com/doorman-net/doorman/proxy/launch"
	"github.com/doorman-net/doorman/proxy/otlplog"
	"github.com/doorman-net/doorman/proxy/resolver"
	"github.com/doorman-net/doorman/spec"
)

// otlpShutdownTimeout bounds how long an exiting proxy spends sending the
// last OTLP records: the local log has them anyway.
const otlpShutdownTimeout = 2 * time.Second

// hostResolvConf is where the Go resolver, the proxy's without Resolvers,
// reads the host's DNS servers.
const hostResolvConf = "/etc/resolv.conf"

// Run serves cfg until ctx is done or the process gets SIGTERM or SIGINT,
// then stops accepting and lets open connections finish for the drain
// timeout. ready, if not nil, is called once every listener is served.
// heartbeat, if not -1, is the descriptor of a supervisor's heartbeats,
// answered from then on (see proxy.Proxy.AnswerHeartbeats). What goes
// wrong before serving is the error; what goes wrong later (a policy file
// that does not load, allowDirect flows that cannot be watched) is logged
// and also written to stderr, and the proxy serves on: a policy that does
// not load means deny-all. configFile, if not empty, is the file cfg was
// read from: a change of its allowDirect is followed (see directLog).
func Run(ctx context.Context, cfg launch.Config, configFile string, stderr io.Writer, ready func(), heartbeat int) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger, quick, closeLog, err := openLog(cfg, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	socks, err := openSockets(cfg.Listeners)
	if err != nil {
		return err
	}
	p, filter, watcher, err := newServers(cfg, logger, quick, socks, stderr)
	if err != nil {
		socks.close()
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var wg sync.WaitGroup
	direct := startDirectLog(ctx, &wg, cfg, configFile, socks.tcp[0], logger, stderr)
	// One inotify instance follows the policy file and, for a worker
	// started from one, the config file's allowDirect.
	follow := watcher.Follower()
	if f, ok := direct.File(); ok {
		follow.Files = append(follow.Files, f)
	}
	go follow.Run(ctx)
	watchHostDrops(ctx, &wg, cfg, logger)
	socks.serve(&wg, p, filter)
	if ready != nil {
		ready()
	}
	if heartbeat >= 0 {
		// Unanswered, the supervisor replaces this worker: say why.
		if err := p.AnswerHeartbeats(heartbeat); err != nil {
			fmt.Fprintf(stderr, "doorman proxy: heartbeats: %v\n", err)
		}
	}
	// What the start touched of the binary need not stay mapped (see
	// dropBinaryPages); a second later, so as not to compete with the
	// plugin or hook that is still finishing the sandbox. Failing to drop
	// it costs only RSS.
	time.AfterFunc(time.Second, func() { dropBinaryPages() })
	go returnIdleMemory(ctx, p)

	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout.Or(launch.DefaultDrainTimeout))
	defer cancel()
	if filter != nil {
		filter.Shutdown(dctx)
	}
	p.Shutdown(dctx)
	wg.Wait()
	return nil
}

// openLog opens the decision log of cfg, with the OTLP export beside it.
// The returned close flushes the export first, so that its last "otlp"
// line still reaches the file. quick is the log file's LogFile.Quick
// (nil when the log goes to stderr): whether a line may be written from
// the relay loop (see proxy.Config.LinesOnLoop).
func openLog(cfg launch.Config, stderr io.Writer) (logger *slog.Logger, quick func() bool, closeLog func(), err error) {
	out, closeFile := stderr, func() {}
	if cfg.LogFile != "" && cfg.LogFile != "-" {
		f, err := decisionlog.OpenLogFile(cfg.LogFile, cfg.Limits.Effective(0).LogMaxSize, cfg.Sandbox)
		if err != nil {
			return nil, nil, nil, err
		}
		out, closeFile, quick = f, func() { f.Close() }, f.Quick
	}
	handler, shutdown, err := otlplog.NewHandler(decisionlog.NewJSONHandler(out), otlplog.Config{OTLP: cfg.OTLP, Sandbox: cfg.Sandbox})
	if err != nil {
		closeFile()
		return nil, nil, nil, err
	}
	// Repeated denials and a cap's refusals are counted, not written one
	// by one (see decisionlog.Aggregator).
	agg := decisionlog.NewAggregator(handler, decisionlog.AggregatorConfig{})
	closeAll := func() {
		agg.Close()
		ctx, cancel := context.WithTimeout(context.Background(), otlpShutdownTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			fmt.Fprintf(stderr, "doorman proxy: %v\n", err)
		}
		closeFile()
	}
	return decisionlog.WithPod(slog.New(agg), cfg.PodUID), quick, closeAll, nil
}

// newServers makes the proxy and, with DNS listeners, the DNS filter,
// sharing one upstream guard (they judge the same addresses and share one
// reading of the host's addresses and routes), and the watcher that keeps
// both on the policy file.
func newServers(cfg launch.Config, logger *slog.Logger, linesOnLoop func() bool, socks *sockets, stderr io.Writer) (*proxy.Proxy, *dnsfilter.Filter, *proxy.PolicyWatcher, error) {
	upstreamGuard := guard.New(guard.Config{Scopes: scopes(cfg.ClusterNames), NAT64Prefixes: cfg.NAT64Prefixes})
	// This process is the proxy and nothing else: it may change its
	// threads' scheduling while it relays bulk data.
	pc := proxy.Config{Sandbox: cfg.Sandbox, Logger: logger, LinesOnLoop: linesOnLoop,
		BatchWhileBulk: true, Guard: upstreamGuard, CADir: cfg.CADir, UpstreamCAFile: cfg.UpstreamCAFile}
	// Where the host really sends each upstream connection: its
	// conntrack entry, read in this process's namespace, where the
	// proxy dials from. The table stays open for the process's life.
	if table, err := realdst.Open(); err != nil {
		logger.Warn(decisionlog.MsgRewritesUnchecked, decisionlog.SandboxKey, cfg.Sandbox, decisionlog.ErrKey, err.Error())
	} else {
		pc.Destinations = table
	}
	caps := computeCaps(cfg)
	caps.apply(&pc)
	hasDNS := len(socks.dnsTCP)+len(socks.dnsUDP) > 0
	caps.line(cfg.Sandbox, hasDNS).Log(context.Background(), logger)
	if len(cfg.Resolvers) > 0 {
		stub, err := resolver.New(resolver.Config{Servers: cfg.Resolvers})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("resolvers: %w", err)
		}
		pc.Resolver = stub
		decisionlog.Resolver{Sandbox: cfg.Sandbox, Servers: cfg.Resolvers}.Log(context.Background(), logger)
	} else {
		decisionlog.Resolver{Sandbox: cfg.Sandbox, ResolvConf: hostResolvConf,
			Why: "no --resolver given: names admitted by name rules resolve with this host's resolv.conf, not the sandbox's resolvers"}.Log(context.Background(), logger)
	}
	p := proxy.New(pc)
	// A policy that does not load leaves the proxy serving in deny-all:
	// connections are refused visibly, never let through.
	watcher, err := proxy.NewPolicyWatcher(p, cfg.PolicyFile, logger)
	if err != nil {
		fmt.Fprintf(stderr, "doorman proxy: %v (denying everything until it is fixed)\n", err)
	}
	var filter *dnsfilter.Filter
	if hasDNS {
		filter = dnsfilter.New(dnsfilter.Config{Sandbox: cfg.Sandbox, Upstreams: cfg.DNSUpstreams, Logger: logger, Guard: upstreamGuard,
			QueriesPerSecond: caps.DNSQueriesPerSecond}, nil)
		watcher.Also(filter)
	}
	return p, filter, watcher, nil
}

// scopes are the guard's scopes of the cluster names c.
func scopes(c []spec.NameScope) []guard.Scope {
	var out []guard.Scope
	for _, n := range c {
		out = append(out, guard.Scope{Domain: n.Domain, Prefixes: n.Prefixes})
	}
	return out
}

// watchHostDrops logs what the sandbox's host-side layer drops: each
// packet its rules log to the sandbox's NFLOG group, and the rest from
// its counters, in this process's namespace, where the layer lives.
// Failing to read them costs those lines, not the proxy.
func watchHostDrops(ctx context.Context, wg *sync.WaitGroup, cfg launch.Config, logger *slog.Logger) {
	if cfg.HostLayerKey == "" {
		return
	}
	h := hostDrops{cfg.HostLayerKey}
	p, err := droplog.New(droplog.Config{
		Sandbox: cfg.Sandbox, Reader: h, Logger: logger,
		OpenPackets: h.openPackets, StateFile: cfg.HostDropsState,
	})
	if err != nil {
		logger.Error(decisionlog.MsgHostDropsNotLogged, decisionlog.SandboxKey, cfg.Sandbox, decisionlog.ErrKey, err.Error())
		return
	}
	// Bound before the proxy says it is ready: the packets the layer
	// logs from then on reach it.
	p.Open()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := p.Run(ctx); err != nil {
			logger.Error(decisionlog.MsgHostDropsNotLogged, decisionlog.SandboxKey, cfg.Sandbox, decisionlog.ErrKey, err.Error())
		}
	}()
}

// hostDrops reads the counters of sandbox key's drop rules in the
// host-side layer of this process's namespace, and the packets they log.
type hostDrops struct{ key string }

// ReadDrops implements droplog.Reader.
func (h hostDrops) ReadDrops() ([]droplog.Count, error) {
	drops, err := hostlayer.ReadDrops(ownNetNS, h.key)
	if err != nil {
		return nil, err
	}
	out := make([]droplog.Count, len(drops))
	for i, d := range drops {
		out[i] = droplog.Count{Table: d.Table, Rule: d.Rule, Handle: d.Handle, Mark: d.Mark, Packets: d.Packets}
	}
	return out, nil
}

// openPackets binds the sandbox's NFLOG group in this process's
// namespace.
func (h hostDrops) openPackets() (droplog.Packets, error) {
	g, err := hostlayer.ReadLogGroup(ownNetNS, h.key)
	if errors.Is(err, hostlayer.ErrNoLogGroup) {
		return nil, nil // a layer that logs nothing (yet): its counters only
	}
	if err != nil {
		return nil, err
	}
	c, err := nflog.Open(g)
	if err != nil {
		return nil, err
	}
	return nflogPackets{c, g}, nil
}

// nflogPackets is an NFLOG group as droplog.Packets: only the packets of
// that group (the socket is bound to it alone).
type nflogPackets struct {
	c     *nflog.Conn
	group uint16
}

func (n nflogPackets) Receive(deadline time.Time) ([]droplog.Logged, error) {
	got, err := n.c.Receive(deadline)
	out := make([]droplog.Logged, 0, len(got))
	for _, p := range got {
		if p.Group != n.group {
			continue
		}
		out = append(out, droplog.Logged{Table: p.Prefix, Mark: p.Mark, HWProto: p.HWProto, Payload: p.Payload})
	}
	return out, err
}

func (n nflogPackets) Close() error { return n.c.Close() }

// ownNetNS is the namespace of the calling thread: the process's.
const ownNetNS = "/proc/thread-self/ns/net"

// errNotSocket is the error of a descriptor that is not the socket its
// place in Listeners says.
var errNotSocket = errors.New("not the socket it is listed as")
