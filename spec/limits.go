package spec

import (
	"errors"
	"fmt"
	"time"

	"github.com/doorman-net/doorman/internal/strictjson"
	"github.com/doorman-net/doorman/proxy/sniff"
)

// The defaults of Limits, chosen so that a normal workload never meets
// them, and so that the default connection cap fits well inside a
// proxy's own descriptor and memory limits: a relayed connection costs
// the proxy about 6 descriptors (client, upstream, and a splice pipe
// each way) and 15-22 KiB, so 2048 of them take 12,288 descriptors and
// some 45 MiB.
const (
	DefaultConnections = 2048
	// DefaultPending connections not decided yet: a real client's
	// ClientHello or request head arrives in its first segment, so only
	// a burst of new connections is ever pending at once.
	DefaultPending = 512
	// DefaultPendingBytes is what their peek buffers may hold together:
	// 4 KiB each for a normal hello, up to 96 KiB for one trickled in
	// 1-byte records; 16 MiB is 170 of those.
	DefaultPendingBytes = 16 << 20
	// DefaultPerUpstreamShare: the cap of connections to one upstream
	// address and port is this fraction of the ephemeral ports of the
	// namespace the proxy dials from (3529 of the kernel's default
	// 32768-60999), unless configured.
	DefaultPerUpstreamShare = 8
	// DefaultIdleTimeout closes relayed connections that carried
	// nothing for an hour.
	DefaultIdleTimeout = time.Hour
	// DefaultDNSQueriesPerSecond is the DNS filter's rate, with as many
	// again saved up for a burst.
	DefaultDNSQueriesPerSecond = 1000
	// DefaultLogMaxSize is where the decision log rotates: a sandbox's
	// log takes at most twice that.
	DefaultLogMaxSize = 64 << 20
	// DefaultBufferBytes is what the proxy's TCP sockets may hold in
	// their queues together. A relay that keeps up holds little, but
	// one fast local stream into a busy proxy was seen to peak at 24
	// MiB; 64 MiB lets a few such streams and slow readers fill their
	// autotuned windows, and the host's TCP memory-pressure threshold
	// (tcp_mem, some 1/16 of its memory: 1.5 GiB of 24) takes two dozen
	// sandboxes that each hold all of theirs.
	DefaultBufferBytes = 64 << 20
	// DefaultHeartbeatTimeout is how long a proxy worker may go without
	// answering its supervisor's heartbeat before it is replaced (see
	// package supervise).
	DefaultHeartbeatTimeout = 5 * time.Second
	// DefaultSniffTimeout bounds the wait for the first bytes of a
	// connection that carry a name.
	DefaultSniffTimeout = 10 * time.Second
)

// MinBufferBytes is the least bufferBytes may be: below it a single
// stream's window no longer fits.
const MinBufferBytes = 1 << 20

// MinHeartbeatTimeout is the least heartbeatTimeout may be: below it a
// worker that the host starves of CPU for a moment would be killed.
const MinHeartbeatTimeout = time.Second

// MinPendingBytes is the least pendingBytes may be: one ClientHello of
// the largest size, in 1-byte records.
const MinPendingBytes = sniff.MaxHelloWireSize

// Limits are the caps of one sandbox's proxy, with the same JSON keys
// wherever they are set: a CNI network's "limits", the host's
// /etc/doorman/limits.json (see package hostconf), `doorman run
// --limits`, the sandbox's state and the proxy's config file. A zero or absent value means the default (Default*);
// idleTimeout absent means the default and "0s" none. Caps may be raised
// or lowered; none may be switched off except the idle timeout.
type Limits struct {
	// Connections bounds the connections the proxy holds at once,
	// decided or not. The proxy lowers it to what its descriptor limit
	// allows after its reserve (the limits line says so).
	Connections int `json:"connections,omitempty"`
	// Pending bounds the connections accepted and not decided yet, and
	// PendingBytes the bytes their peek buffers hold together.
	Pending      int   `json:"pending,omitempty"`
	PendingBytes int64 `json:"pendingBytes,omitempty"`
	// SniffTimeout bounds the wait for the first bytes that carry a
	// name (default DefaultSniffTimeout).
	SniffTimeout Duration `json:"sniffTimeout,omitempty"`
	// PerUpstream bounds the connections to one upstream address and
	// port, open or closed by the proxy within the last minute.
	PerUpstream int `json:"perUpstream,omitempty"`
	// IdleTimeout closes a relayed connection that carried no byte
	// either way for that long; "0s" never.
	IdleTimeout *Duration `json:"idleTimeout,omitempty"`
	// DNSQueriesPerSecond bounds the DNS filter's queries.
	DNSQueriesPerSecond int `json:"dnsQueriesPerSecond,omitempty"`
	// LogMaxSize is the size in bytes at which the decision log rotates.
	LogMaxSize int64 `json:"logMaxSize,omitempty"`
	// BufferBytes bounds what the proxy's TCP sockets hold in their
	// queues together, the bytes in flight between the sandbox and its
	// upstreams: the kernel charges them to the proxy's memory cgroup,
	// which on cgroup v1 gets this as its TCP limit
	// (memory.kmem.tcp.limit_in_bytes); on v2 they count in its memory
	// limit instead (see package cgroup).
	BufferBytes int64 `json:"bufferBytes,omitempty"`
	// HeartbeatTimeout is how long the proxy's worker may go without
	// answering its supervisor's heartbeat before the supervisor kills
	// and replaces it (see package supervise).
	HeartbeatTimeout Duration `json:"heartbeatTimeout,omitempty"`
}

// Validate reports the first value of l that is not a cap, naming its
// key (as in limits.connections) and the value.
func (l Limits) Validate() error {
	for _, v := range []struct {
		key string
		n   int64
	}{
		{"connections", int64(l.Connections)},
		{"pending", int64(l.Pending)},
		{"pendingBytes", l.PendingBytes},
		{"perUpstream", int64(l.PerUpstream)},
		{"dnsQueriesPerSecond", int64(l.DNSQueriesPerSecond)},
		{"logMaxSize", l.LogMaxSize},
		{"bufferBytes", l.BufferBytes},
	} {
		if v.n < 0 {
			return fmt.Errorf("limits.%s: %d is negative (leave it out for the default)", v.key, v.n)
		}
	}
	if l.PendingBytes != 0 && l.PendingBytes < MinPendingBytes {
		return fmt.Errorf("limits.pendingBytes: %d is less than one ClientHello may take (%d)", l.PendingBytes, MinPendingBytes)
	}
	if l.LogMaxSize != 0 && l.LogMaxSize < 64<<10 {
		return fmt.Errorf("limits.logMaxSize: %d is less than 65536 bytes: the log would rotate away the lines it just wrote", l.LogMaxSize)
	}
	if l.BufferBytes != 0 && l.BufferBytes < MinBufferBytes {
		return fmt.Errorf("limits.bufferBytes: %d is less than %d bytes: one stream's window would not fit", l.BufferBytes, MinBufferBytes)
	}
	if d := time.Duration(l.HeartbeatTimeout); d != 0 && d < MinHeartbeatTimeout {
		return fmt.Errorf("limits.heartbeatTimeout: %v is less than %v: a worker the host starves of CPU for a moment would be replaced", d, MinHeartbeatTimeout)
	}
	return nil
}

// Or returns l with each value that o sets in place of l's: o's caps
// win over l's (a network's over the host's).
func (l Limits) Or(o Limits) Limits {
	set := func(a *int, b int) {
		if b != 0 {
			*a = b
		}
	}
	set(&l.Connections, o.Connections)
	set(&l.Pending, o.Pending)
	set(&l.PerUpstream, o.PerUpstream)
	set(&l.DNSQueriesPerSecond, o.DNSQueriesPerSecond)
	if o.PendingBytes != 0 {
		l.PendingBytes = o.PendingBytes
	}
	if o.LogMaxSize != 0 {
		l.LogMaxSize = o.LogMaxSize
	}
	if o.SniffTimeout != 0 {
		l.SniffTimeout = o.SniffTimeout
	}
	if o.BufferBytes != 0 {
		l.BufferBytes = o.BufferBytes
	}
	if o.HeartbeatTimeout != 0 {
		l.HeartbeatTimeout = o.HeartbeatTimeout
	}
	if o.IdleTimeout != nil {
		d := *o.IdleTimeout
		l.IdleTimeout = &d
	}
	return l
}

// Effective are the caps of Limits with the defaults filled in, before
// the proxy lowers Connections to what its descriptors allow.
type Effective struct {
	Connections, Pending, PerUpstream, DNSQueriesPerSecond int
	PendingBytes, LogMaxSize, BufferBytes                  int64
	SniffTimeout, IdleTimeout, HeartbeatTimeout            time.Duration
}

// Effective returns l's caps with the defaults in place of the values it
// leaves out; portRange is the count of ephemeral ports the proxy dials
// from (0 if unknown), which the default PerUpstream is a share of.
func (l Limits) Effective(portRange int) Effective {
	or := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	e := Effective{
		Connections:         or(l.Connections, DefaultConnections),
		Pending:             or(l.Pending, DefaultPending),
		PerUpstream:         l.PerUpstream,
		DNSQueriesPerSecond: or(l.DNSQueriesPerSecond, DefaultDNSQueriesPerSecond),
		PendingBytes:        l.PendingBytes,
		LogMaxSize:          l.LogMaxSize,
		SniffTimeout:        l.SniffTimeout.Or(DefaultSniffTimeout),
		IdleTimeout:         DefaultIdleTimeout,
		BufferBytes:         l.BufferBytes,
		HeartbeatTimeout:    l.HeartbeatTimeout.Or(DefaultHeartbeatTimeout),
	}
	if e.BufferBytes == 0 {
		e.BufferBytes = DefaultBufferBytes
	}
	if e.PendingBytes == 0 {
		e.PendingBytes = DefaultPendingBytes
	}
	if e.LogMaxSize == 0 {
		e.LogMaxSize = DefaultLogMaxSize
	}
	if e.PerUpstream == 0 {
		e.PerUpstream = e.Connections
		if portRange > 0 {
			e.PerUpstream = max(portRange/DefaultPerUpstreamShare, 1)
		}
	}
	if l.IdleTimeout != nil {
		e.IdleTimeout = time.Duration(*l.IdleTimeout)
	}
	return e
}

// ParseLimits decodes caps in the keys of Limits, refusing unknown keys
// (a misspelt cap must not pass silently) and values that are no cap;
// each error names the key as limits.<key>, the value and why.
func ParseLimits(data []byte) (Limits, error) {
	var l Limits
	if err := strictjson.Decode("limits", data, &l); err != nil {
		return Limits{}, err
	}
	return l, l.Validate()
}

// Duration is a time.Duration written as in Go ("500ms", "10s").
type Duration time.Duration

// MarshalText renders d as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses text with time.ParseDuration; negative durations
// are refused. The error says why, not what: the caller names the key
// and the value.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return errors.New(`want a duration such as "10s", "1m30s" or "0s"`)
	}
	if v < 0 {
		return errors.New("a negative duration")
	}
	*d = Duration(v)
	return nil
}

// Or returns d, or def if d is zero.
func (d Duration) Or(def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}
