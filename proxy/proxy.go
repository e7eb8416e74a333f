package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/guard"
	"github.com/doorman-net/doorman/proxy/inspect"
	"github.com/doorman-net/doorman/proxy/relayloop"
)

// Config configures a Proxy. The zero value of every field but Sandbox has a
// sensible default.
type Config struct {
	// Sandbox names the sandbox this proxy serves, for logs and 403 pages.
	Sandbox string
	// Policy is the initial policy; nil means deny everything until
	// SetPolicy is called.
	Policy *conf.Policy
	// SniffTimeout bounds how long the proxy waits for the first bytes
	// that carry the name (default 10 s). A client that stays silent
	// that long is decided as a connection without a name.
	SniffTimeout time.Duration
	// DialTimeout bounds resolving and connecting upstream (default 10 s).
	DialTimeout time.Duration
	// Resolver resolves names admitted by name rules. nil: the Go
	// resolver with the host's /etc/resolv.conf. A sandbox's proxy gets
	// a resolver.Stub asking the sandbox's own resolvers (see package
	// resolver); a *net.Resolver satisfies it too.
	Resolver Resolver
	// ResolveCacheTTL is how long a name's addresses are reused (default
	// 5 s; negative disables the cache).
	ResolveCacheTTL time.Duration
	// Logger receives one record per connection. nil discards them.
	Logger *slog.Logger
	// LinesOnLoop, if set, reports whether the line of a connection the
	// relay loop carried may be written from the loop's goroutine when
	// the connection ends: true while Logger's writes are quick and do
	// not go through the runtime (decisionlog.LogFile.Quick), so that
	// they hold the proxy's one P no longer than a goroutine of their
	// own would. nil, or false: each such line is written from a
	// goroutine of its own, and the loop never waits for the log.
	LinesOnLoop func() bool
	// OriginalDst reads a redirected connection's original destination.
	// nil: SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST (see OriginalDst).
	OriginalDst func(*net.TCPConn) (netip.AddrPort, error)
	// Guard decides which upstream addresses may be dialed (see package
	// guard): no loopback, private, metadata or link-local address, none
	// of the host's own addresses or connected subnets, unless an address
	// entry inside that range admits it. nil: a guard reading the
	// proxy's own network namespace. The sandbox's DNS filter may share
	// it.
	Guard *guard.Guard
	// Destinations, if set, tells where the host really sends each
	// upstream connection (package realdst: its conntrack entry), so
	// that a connection a nat OUTPUT rule rewrote to an address the guard
	// refuses is closed (see checkRewrite). nil: not checked.
	Destinations Destinations
	// CADir is the network's CA (package ca), whose leaves the proxy
	// presents for inspected hosts; "" means none, and inspected hosts'
	// sessions fail their handshake.
	CADir string
	// UpstreamCAFile, if set, holds the PEM roots inspected hosts'
	// certificates are verified against, instead of the system's.
	UpstreamCAFile string
	// BatchWhileBulk runs the process's threads under SCHED_BATCH while
	// the proxy relays bulk data (see sched.go). It changes the policy of
	// every thread of the process, so only a process that is the proxy
	// should set it.
	BatchWhileBulk bool

	// The caps (see limits.go); zero means none. The daemon sets each
	// from the sandbox's configuration and the process's own limits.
	//
	// MaxConns bounds the connections the proxy holds at once, from
	// accept to close, decided or not: past it a new connection is
	// refused in its protocol.
	MaxConns int
	// MaxPending bounds the connections accepted and not decided yet,
	// and MaxPendingBytes the bytes their peek buffers hold together
	// (each grows up to the 96 KiB a ClientHello in 1-byte records may
	// take); what would go past either is refused.
	MaxPending      int
	MaxPendingBytes int64
	// MaxPerUpstream bounds the connections to one upstream address and
	// port, open or closed by the proxy within the last minute (their
	// source ports are still taken; see upstreamSlots): an upstream at
	// the cap is not dialed, and if no other address of the name is
	// free the connection is refused.
	MaxPerUpstream int
	// IdleTimeout closes a relayed connection that carried no byte
	// either way for that long.
	IdleTimeout time.Duration
}

// Destinations tells where the host really sends a TCP connection it
// made from local to remote: remote, or where a nat OUTPUT rule rewrote
// it to (rewritten). *realdst.Table is one.
type Destinations interface {
	Destination(local, remote netip.AddrPort) (real netip.AddrPort, rewritten bool, err error)
}

// Resolver looks up the addresses of a name.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Stats counts connections by verdict since the proxy started.
type Stats struct {
	Allowed, Denied int64
	// Limited counts the connections a cap refused (not in Denied).
	Limited int64
	// Active counts the relayed connections, Held all the connections
	// open (pending ones and those being refused included), Pending
	// those not decided yet and PendingBytes what their buffers hold.
	Active, Held, Pending int
	PendingBytes          int64
}

// Proxy is a transparent proxy for one sandbox: it accepts connections that
// nftables redirected to its listeners, sniffs the name each asks for,
// decides by the policy, and relays or refuses them. Its methods are safe
// for concurrent use.
type Proxy struct {
	sandbox      string
	sniffTimeout time.Duration
	dialTimeout  time.Duration
	origDst      func(*net.TCPConn) (netip.AddrPort, error)
	logger       *slog.Logger
	linesOnLoop  func() bool // Config.LinesOnLoop
	dialer       net.Dialer
	resolver     *cachingResolver
	guard        *guard.Guard
	realDst      Destinations // nil: rewrites are not checked
	// dial connects to an upstream; p.dialer's unless a test stands in.
	dial func(ctx context.Context, to netip.AddrPort) (net.Conn, error)
	// permitUpstream, set only by tests, lets loopback test servers
	// stand in for the internet.
	permitUpstream func(netip.Addr) bool
	// dialGuard, set only by tests with dial, refuses what the relay
	// loop's own dial (dialloop.go) may not connect to.
	dialGuard func(netip.AddrPort) error
	bulk      *bulkSched // nil unless Config.BatchWhileBulk

	// The relay loop that carries established spliced connections
	// (see loop.go), started with the first of them.
	loopMu sync.Mutex
	loop   *relayloop.Loop
	noLoop bool // it cannot run here, or the proxy is shut down
	// The loop's accept (see accept.go): nil until a listener is
	// served there. origDstFD reads a redirected connection's original
	// destination from its bare socket, given the port of the listener
	// that accepted it (see originalDstFD); nil when a stand-in for
	// OriginalDst needs a *net.TCPConn, and then every connection is
	// accepted by Serve's own goroutine.
	accept        *loopAccept
	loopListeners []loopListener
	origDstFD     func(fd int, client netip.AddrPort, listenPort uint16) (netip.AddrPort, error)
	stopping      chan struct{} // closed by Shutdown

	caDir, upstreamCAFile string
	inspectOnce           sync.Once
	inspect               *inspect.Server // made by inspector()

	policy  atomic.Pointer[conf.Policy]
	allowed atomic.Int64
	denied  atomic.Int64

	// The caps and what counts against them (see limits.go).
	maxConns, maxPending, maxPendingBytes int64
	idleTimeout                           time.Duration
	upstreams                             upstreamSlots
	held, pending, pendingBytes           atomic.Int64
	refusing, limited                     atomic.Int64
	stopHousekeeping                      chan struct{}
	// parses counts the looks at peeked bytes, for the tests that show a
	// trickled ClientHello costs a few dozen of them.
	parses atomic.Int64
	// decidedOnLoop counts the connections decided on the relay loop
	// (see accept.go), for the tests that show the common case is.
	decidedOnLoop atomic.Int64
	dialedOnLoop  atomic.Int64

	mu        sync.Mutex
	conns     map[*tracked]struct{}
	listeners map[net.Listener]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// New returns a proxy configured by cfg. It does not listen: call Serve with
// each listener.
func New(cfg Config) *Proxy {
	p := &Proxy{
		sandbox:        cfg.Sandbox,
		sniffTimeout:   cfg.SniffTimeout,
		dialTimeout:    cfg.DialTimeout,
		origDst:        cfg.OriginalDst,
		logger:         cfg.Logger,
		linesOnLoop:    cfg.LinesOnLoop,
		guard:          cfg.Guard,
		realDst:        cfg.Destinations,
		caDir:          cfg.CADir,
		upstreamCAFile: cfg.UpstreamCAFile,
		conns:          make(map[*tracked]struct{}),
		listeners:      make(map[net.Listener]struct{}),
	}
	if p.sniffTimeout <= 0 {
		p.sniffTimeout = 10 * time.Second
	}
	if p.dialTimeout <= 0 {
		p.dialTimeout = 10 * time.Second
	}
	if p.origDst == nil {
		p.origDst = OriginalDst
		p.origDstFD = originalDstFD
	}
	p.stopping = make(chan struct{})
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	if p.guard == nil {
		p.guard = guard.New(guard.Config{})
	}
	p.dialer = net.Dialer{KeepAlive: 15 * time.Second}
	p.dial = func(ctx context.Context, to netip.AddrPort) (net.Conn, error) {
		return p.dialer.DialContext(ctx, "tcp", to.String())
	}
	ttl := cfg.ResolveCacheTTL
	if ttl == 0 {
		ttl = 5 * time.Second
	}
	p.resolver = newCachingResolver(cfg.Resolver, ttl)
	pol := cfg.Policy
	if pol == nil {
		pol = conf.DenyAll()
	}
	p.policy.Store(pol)
	if cfg.BatchWhileBulk {
		p.bulk = newBulkSched()
	}
	p.maxConns, p.maxPending, p.maxPendingBytes = int64(max(cfg.MaxConns, 0)), int64(max(cfg.MaxPending, 0)), max(cfg.MaxPendingBytes, 0)
	p.upstreams.max = max(cfg.MaxPerUpstream, 0)
	p.idleTimeout = max(cfg.IdleTimeout, 0)
	p.stopHousekeeping = make(chan struct{})
	if p.idleTimeout > 0 || p.upstreams.max > 0 {
		// Idle connections are found within a quarter of the timeout.
		tick := 10 * time.Second
		if p.idleTimeout > 0 {
			tick = min(max(p.idleTimeout/4, 100*time.Millisecond), tick)
		}
		go p.housekeeping(tick)
	}
	return p
}

// Policy returns the policy in force.
func (p *Proxy) Policy() *conf.Policy { return p.policy.Load() }

// SetPolicy puts pol in force for new connections and closes established
// connections (and plaintext keep-alive connections) that it no longer
// admits. A nil pol means deny everything.
func (p *Proxy) SetPolicy(pol *conf.Policy) {
	if pol == nil {
		pol = conf.DenyAll()
	}
	p.policy.Store(pol)
	p.mu.Lock()
	established := make([]*tracked, 0, len(p.conns))
	for t := range p.conns {
		established = append(established, t)
	}
	p.mu.Unlock()
	for _, t := range established {
		if why := p.lostPermission(pol, t); why != "" {
			t.kill(decisionlog.ReasonPolicyChanged + why)
		}
	}
}

// Stats returns the connection counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	active := len(p.conns)
	p.mu.Unlock()
	return Stats{
		Allowed: p.allowed.Load(), Denied: p.denied.Load(), Limited: p.limited.Load(),
		Active: active, Held: int(p.held.Load()), Pending: int(p.pending.Load()), PendingBytes: p.pendingBytes.Load(),
	}
}

// ErrClosed is returned by Serve after Shutdown.
var ErrClosed = errors.New("proxy: shut down")

// Serve accepts connections on ln until ln is closed or Shutdown is
// called. ln must yield *net.TCPConn (a TCP listener, possibly made from a
// file descriptor created inside the sandbox's network namespace).
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	p.mu.Unlock()
	if ok, err := p.serveOnLoop(ln); ok {
		if err != nil {
			return err
		}
		<-p.stopping
		return ErrClosed
	}
	p.mu.Lock()
	p.listeners[ln] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, ln)
		p.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return ErrClosed
			}
			// Out of file descriptors and the like: back off, keep serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.logger.Error(decisionlog.MsgAccept, decisionlog.SandboxKey, p.sandbox, decisionlog.ErrKey, err)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		if p.maxConns > 0 && p.held.Load() >= p.maxConns {
			p.refuseAtAccept(tc)
			continue
		}
		p.held.Add(1)
		p.wg.Add(1)
		go func() {
			if !p.handle(tc) {
				p.connDone()
			}
		}()
	}
}

// connDone accounts for the end of a connection Serve accepted.
func (p *Proxy) connDone() {
	p.held.Add(-1)
	p.wg.Done()
}

// Shutdown stops accepting, waits for the connections in flight to end
// until ctx is done, then closes the rest.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		close(p.stopHousekeeping)
		close(p.stopping)
	}
	p.closed = true
	for ln := range p.listeners {
		ln.Close()
	}
	p.mu.Unlock()
	p.stopLoopListeners()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		p.closeRelayLoop()
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	var all []*tracked
	for t := range p.conns {
		all = append(all, t)
	}
	p.mu.Unlock()
	for _, t := range all {
		t.kill(decisionlog.ReasonShutdown)
	}
	<-done
	p.closeRelayLoop()
	p.inspectOnce.Do(func() {}) // p.inspect is set, or never will be
	if p.inspect != nil {
		p.inspect.Close()
	}
	return ctx.Err()
}

// tracked is an established, relayed connection, kept so that a policy
// change can close it.
type tracked struct {
	// client and upstream are nil once the connection is handed to the
	// relay loop (then pair is set).
	client, upstream *net.TCPConn
	dst              netip.AddrPort // the original destination
	upAddr           netip.AddrPort // the upstream's address
	realAddr         netip.AddrPort // where the host sends it, if a nat rule rewrote upAddr

	// inspected: the proxy terminates this connection (package
	// inspect); it has no one upstream.
	inspected bool

	mu      sync.Mutex
	pair    *relayloop.Pair // set by handOff
	name    string
	killed  string // why it was closed by the proxy as a denial, "" if not
	expired string // why it was closed by the proxy, still allowed (idle), "" if not
}

func (t *tracked) currentName() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name
}

func (t *tracked) setName(name string) {
	t.mu.Lock()
	t.name = name
	t.mu.Unlock()
}

// kill closes both ends, the client's with a reset; the relay then ends.
func (t *tracked) kill(reason string) {
	t.mu.Lock()
	if t.killed == "" {
		t.killed = reason
	}
	pair, client, upstream := t.pair, t.client, t.upstream
	t.mu.Unlock()
	if pair != nil {
		pair.Abort()
		return
	}
	if client != nil {
		client.SetLinger(0)
		client.Close()
	}
	if upstream != nil {
		upstream.Close()
	}
}

func (t *tracked) killReason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.killed
}

// expire closes both ends gracefully, for reason, which is no denial: the
// connection was allowed and ended for want of traffic (see closeIdle).
func (t *tracked) expire(reason string) {
	t.mu.Lock()
	if t.killed != "" || t.expired != "" {
		t.mu.Unlock()
		return
	}
	t.expired = reason
	pair, client, upstream := t.pair, t.client, t.upstream
	t.mu.Unlock()
	if pair != nil {
		pair.Close()
		return
	}
	if client != nil {
		client.Close()
	}
	if upstream != nil {
		upstream.Close()
	}
}

// idleFor returns how long t has carried no data either way.
func (t *tracked) idleFor() time.Duration {
	t.mu.Lock()
	pair, client, upstream := t.pair, t.client, t.upstream
	t.mu.Unlock()
	if pair != nil {
		return pair.IdleFor()
	}
	if client == nil || upstream == nil {
		return 0
	}
	return min(idleFor(client), idleFor(upstream))
}

func (t *tracked) expireReason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expired
}

func (p *Proxy) track(t *tracked) {
	p.mu.Lock()
	p.conns[t] = struct{}{}
	p.mu.Unlock()
}

func (p *Proxy) untrack(t *tracked) {
	p.mu.Lock()
	delete(p.conns, t)
	p.mu.Unlock()
}
