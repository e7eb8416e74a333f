package directlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// DefaultReadBuffer is the receive buffer asked for the conntrack event
// socket: room for a few thousand events while the watcher writes lines.
const DefaultReadBuffer = 1 << 20

// Config says whose allowDirect flows to log, and where.
type Config struct {
	// Sandbox is the sandbox id written on every line.
	Sandbox string
	// Entries are the sandbox's allowDirect entries. Only address entries
	// (conf.KindPrefix) can match; with none, Open opens nothing.
	Entries []conf.Entry
	// NetNS is an open file descriptor of the sandbox's network
	// namespace. It is used only while Open runs (the sockets stay in that
	// namespace afterwards); the caller keeps and closes it.
	NetNS int
	// Logger gets the decision lines: the proxy's logger.
	Logger *slog.Logger
	// ReadBuffer is the event socket's receive buffer in bytes; 0 means
	// DefaultReadBuffer.
	ReadBuffer int
}

// Stats counts what a Watcher did.
type Stats struct {
	Logged   uint64 // decision lines written
	Overruns uint64 // times the kernel reported lost events (ENOBUFS)
}

// Watcher logs one sandbox's allowDirect flows. Make one with Open, then
// call Run.
type Watcher struct {
	sandbox string
	entries atomic.Pointer[[]conf.Entry] // address entries only
	logger  *slog.Logger

	events *netfilter.Conn // nil when there is nothing to watch

	mu     sync.Mutex
	addrs  *vnl.Handle // rtnetlink in the sandbox: its own addresses; nil once closed
	closed bool

	logged   atomic.Uint64
	overruns atomic.Uint64
}

// Open subscribes to conntrack NEW events in the namespace cfg.NetNS.
// Without address entries in cfg.Entries it opens no socket, and Run
// returns at once.
func Open(cfg Config) (*Watcher, error) {
	w := &Watcher{sandbox: cfg.Sandbox, logger: cfg.Logger}
	if w.logger == nil {
		w.logger = slog.Default()
	}
	if !w.SetEntries(cfg.Entries) {
		return w, nil
	}
	if cfg.NetNS < 0 {
		return nil, fmt.Errorf("allowDirect log for sandbox %s: no network namespace (fd %d)", cfg.Sandbox, cfg.NetNS)
	}
	// The socket is read here rather than through conntrack.Conn.Listen,
	// whose workers stop at the first receive error: ENOBUFS must be
	// counted and survived. conntrack.Event decodes the messages.
	var err error
	if w.events, err = netfilter.Dial(&netlink.Config{NetNS: cfg.NetNS}); err != nil {
		return nil, fmt.Errorf("allowDirect log for sandbox %s: conntrack netlink socket: %w", cfg.Sandbox, err)
	}
	size := cfg.ReadBuffer
	if size == 0 {
		size = DefaultReadBuffer
	}
	if err := w.events.SetReadBuffer(size); err != nil {
		w.Close()
		return nil, fmt.Errorf("allowDirect log for sandbox %s: conntrack socket buffer %d: %w", cfg.Sandbox, size, err)
	}
	if err := w.events.JoinGroups([]netfilter.NetlinkGroup{netfilter.GroupCTNew}); err != nil {
		w.Close()
		return nil, fmt.Errorf("allowDirect log for sandbox %s: subscribe to conntrack events: %w", cfg.Sandbox, err)
	}
	if w.addrs, err = vnl.NewHandleAt(netns.NsHandle(cfg.NetNS), unix.NETLINK_ROUTE); err != nil {
		w.Close()
		return nil, fmt.Errorf("allowDirect log for sandbox %s: rtnetlink socket: %w", cfg.Sandbox, err)
	}
	return w, nil
}

// SetEntries makes entries the allowDirect entries whose flows are logged
// from now on (a live change of the sandbox's allowDirect), and reports
// whether any of them can match (an address entry). A Watcher that Open
// made without such entries has no socket: entries given to it later
// match nothing, so a caller opens a new one instead.
func (w *Watcher) SetEntries(entries []conf.Entry) bool {
	var prefixes []conf.Entry
	for _, e := range entries {
		if e.Kind == conf.KindPrefix {
			prefixes = append(prefixes, e)
		}
	}
	w.entries.Store(&prefixes)
	return len(prefixes) > 0
}

// Run writes a line for every new allowDirect flow until ctx is done, then
// closes the watcher and returns nil. It returns an error only if the
// event socket fails for another reason than lost events.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.Close()
	if w.events == nil {
		return nil
	}
	// Closing the socket is what wakes a blocked Receive.
	stop := context.AfterFunc(ctx, func() { w.Close() })
	defer stop()
	for {
		msgs, err := w.events.Receive()
		if ctx.Err() != nil || w.isClosed() {
			w.reportOverruns(true)
			return nil
		}
		if errors.Is(err, unix.ENOBUFS) {
			// The socket stays usable: only the events that did not fit
			// are gone.
			if w.overruns.Add(1) == 1 {
				w.reportOverruns(false)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("allowDirect log for sandbox %s: conntrack events: %w", w.sandbox, err)
		}
		for _, m := range msgs {
			w.handle(ctx, m)
		}
	}
}

// handle logs the flow of one event if it is an allowDirect flow.
func (w *Watcher) handle(ctx context.Context, m netlink.Message) {
	var ev conntrack.Event
	if err := ev.Unmarshal(m); err != nil || ev.Type != conntrack.EventNew || ev.Flow == nil {
		return
	}
	rec, ok := directRecord(w.sandbox, ev.Flow, *w.entries.Load(), time.Now())
	if !ok || w.isLocal(rec.Dst.Addr()) {
		// A connection into the sandbox, to one of its own addresses,
		// is no way out of it.
		return
	}
	w.logged.Add(1)
	w.log(ctx, rec)
}

// log writes rec's decision line, at INFO: the flow was allowed.
func (w *Watcher) log(ctx context.Context, rec proxy.Record) {
	rec.Line().Log(ctx, w.logger)
}

// isLocal reports whether a is an address of the sandbox's namespace. If
// the addresses cannot be read, a is taken as not local: the line is
// written rather than lost.
func (w *Watcher) isLocal(a netip.Addr) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.addrs == nil {
		return false
	}
	addrs, err := w.addrs.AddrList(nil, vnl.FAMILY_ALL)
	if err != nil {
		return false
	}
	for _, x := range addrs {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == a.Unmap() {
			return true
		}
	}
	return false
}

// reportOverruns writes the line about lost events: on the first overrun,
// and at the end if more followed.
func (w *Watcher) reportOverruns(final bool) {
	n := w.overruns.Load()
	if n == 0 || final && n == 1 {
		return
	}
	w.logger.Warn(decisionlog.MsgDirectLost, decisionlog.SandboxKey, w.sandbox, decisionlog.OverrunsKey, n,
		decisionlog.ErrKey, "conntrack event queue overrun (ENOBUFS): allowDirect flows started meanwhile have no line")
}

// Stats returns what the watcher did so far.
func (w *Watcher) Stats() Stats {
	return Stats{Logged: w.logged.Load(), Overruns: w.overruns.Load()}
}

// Close releases the watcher's sockets; a Run in progress returns nil
// soon after. It is safe to call more than once and concurrently with Run.
func (w *Watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	var err error
	if w.events != nil {
		err = w.events.Close()
	}
	if w.addrs != nil {
		w.addrs.Close()
		w.addrs = nil
	}
	return err
}

func (w *Watcher) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}
