package dnsfilter

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
	"github.com/doorman-net/doorman/proxy/resolver"
)

// Defaults for the zero values of Config's fields.
const (
	defaultTimeout     = resolver.DefaultTimeout
	defaultMaxInFlight = 256
)

// Config configures a Filter. The zero value of every field but Sandbox and
// Upstreams has a sensible default.
type Config struct {
	// Sandbox names the sandbox the filter serves, for the logs.
	Sandbox string
	// Upstreams are the real resolvers, tried in order. With none, every
	// admitted query is answered SERVFAIL.
	Upstreams []netip.AddrPort
	// Logger receives one record per query (see the package
	// documentation for its fields). nil discards them.
	Logger *slog.Logger
	// Timeout bounds each attempt at one upstream (default 2 s).
	Timeout time.Duration
	// MaxInFlight bounds the queries handled at once, over UDP and TCP
	// together (default 256).
	MaxInFlight int
	// DenyRcode is the rcode of the answer to a query that is not
	// admitted: dns.RcodeRefused (the default; any other value than
	// dns.RcodeNameError means it) or dns.RcodeNameError (NXDOMAIN).
	// REFUSED says what happened, but musl's resolver (Alpine) ignores
	// REFUSED answers and waits for its timeout, and stops at the first
	// refused name of a search list; NXDOMAIN lets such clients go on.
	DenyRcode int
	// Guard decides which addresses of an answer the sandbox may learn:
	// those the proxy would dial (see package guard). nil: a guard
	// reading the filter's own network namespace; the sandbox's proxy
	// may share its own.
	Guard *guard.Guard
	// QueriesPerSecond caps the queries the filter takes a second, over
	// UDP and TCP together, with a second's worth saved up for a burst
	// (0: no cap). A query past it is answered REFUSED without being
	// forwarded, and counted in a limit line (decisionlog.Limit) rather
	// than logged: the sandbox's resolvers are its neighbours' too.
	QueriesPerSecond int
}

// Stats counts queries by verdict since the filter was made.
type Stats struct {
	Allowed, Denied, Failed int64
	// Limited counts the queries refused past QueriesPerSecond.
	Limited int64
}

// ErrClosed is returned by ServeUDP and ServeTCP once their listener is
// closed or Shutdown was called.
var ErrClosed = errors.New("dnsfilter: closed")

// Filter is the DNS filter of one sandbox: it answers queries received on
// the listeners it serves, forwarding those for admitted names to the
// upstream resolvers. Its methods are safe for concurrent use.
type Filter struct {
	sandbox   string
	upstreams []netip.AddrPort
	logger    *slog.Logger
	timeout   time.Duration
	denyRcode int
	guard     *guard.Guard
	// udp forwards UDP queries over a few sockets per upstream, so
	// that a flood holds a handful of the host's conntrack entries,
	// not one a query (see resolver.UDPPool).
	udp *resolver.UDPPool

	policy                           atomic.Pointer[conf.Policy]
	allowed, denied, failed, limited atomic.Int64
	rate                             *rateLimit // nil: no cap

	slots    chan struct{} // one per query in flight
	tcpSlots chan struct{} // one per TCP connection served

	// ctx is cancelled when Shutdown stops waiting; it aborts the
	// upstream exchanges still running.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when Shutdown is called

	mu          sync.Mutex
	closed      bool
	packetConns map[net.PacketConn]struct{}
	listeners   map[net.Listener]struct{}
	conns       map[net.Conn]struct{}
	wg          sync.WaitGroup // serve loops and the queries they started
}

// New returns a filter configured by cfg with policy p in force; a nil p
// means deny everything until SetPolicy is called. It does not listen:
// call ServeUDP and ServeTCP with each listener.
func New(cfg Config, p *conf.Policy) *Filter {
	f := &Filter{
		sandbox:     cfg.Sandbox,
		upstreams:   append([]netip.AddrPort(nil), cfg.Upstreams...),
		logger:      cfg.Logger,
		timeout:     cfg.Timeout,
		denyRcode:   dns.RcodeRefused,
		guard:       cfg.Guard,
		udp:         &resolver.UDPPool{},
		done:        make(chan struct{}),
		packetConns: make(map[net.PacketConn]struct{}),
		listeners:   make(map[net.Listener]struct{}),
		conns:       make(map[net.Conn]struct{}),
		tcpSlots:    make(chan struct{}, maxTCPConns),
		rate:        newRateLimit(cfg.QueriesPerSecond),
	}
	if f.logger == nil {
		f.logger = slog.New(slog.DiscardHandler)
	}
	if f.timeout <= 0 {
		f.timeout = defaultTimeout
	}
	if f.guard == nil {
		f.guard = guard.New(guard.Config{})
	}
	if cfg.DenyRcode == dns.RcodeNameError {
		f.denyRcode = dns.RcodeNameError
	}
	n := cfg.MaxInFlight
	if n <= 0 {
		n = defaultMaxInFlight
	}
	f.slots = make(chan struct{}, n)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.SetPolicy(p)
	return f
}

// SetPolicy puts p in force for the queries received from now on. A nil p
// means deny everything.
func (f *Filter) SetPolicy(p *conf.Policy) {
	if p == nil {
		p = conf.DenyAll()
	}
	f.policy.Store(p)
}

// Policy returns the policy in force.
func (f *Filter) Policy() *conf.Policy { return f.policy.Load() }

// Stats returns the query counters.
func (f *Filter) Stats() Stats {
	return Stats{Allowed: f.allowed.Load(), Denied: f.denied.Load(), Failed: f.failed.Load(), Limited: f.limited.Load()}
}

// Shutdown stops serving: it closes the listeners and the idle TCP
// connections, waits for the queries in flight to be answered until ctx is
// done, then aborts the rest.
func (f *Filter) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.done)
	}
	for pc := range f.packetConns {
		pc.Close()
	}
	for ln := range f.listeners {
		ln.Close()
	}
	for c := range f.conns {
		// Wakes a connection waiting for its next query; one that is
		// answering writes its answer first, then finds the deadline.
		c.SetReadDeadline(time.Unix(1, 0))
	}
	f.mu.Unlock()

	finished := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		f.cancel()
		f.udp.Close()
		return nil
	case <-ctx.Done():
	}
	f.cancel()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	<-finished
	f.udp.Close()
	return ctx.Err()
}

// isClosed reports whether Shutdown was called.
func (f *Filter) isClosed() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// acquire takes a slot for one query in flight, waiting for one to be
// free; it fails once Shutdown is called.
func (f *Filter) acquire() bool {
	select {
	case f.slots <- struct{}{}:
		return true
	case <-f.done:
		return false
	}
}

func (f *Filter) release() { <-f.slots }
