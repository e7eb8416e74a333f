package daemon

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/launch"
	"github.com/doorman-net/doorman/proxy/relayloop"
	"github.com/doorman-net/doorman/spec"
)

// fdsPerConn is what one relayed connection costs the proxy in
// descriptors: the client's socket and the upstream's. The relay loop's
// splice pipes are bounded apart from the connections (proxy.RelayPipes,
// in the reserve). Paths off the loop can take more for a while (a
// plaintext body spliced by io.Copy holds a pipe of the runtime's while it
// flows); a sandbox that makes its proxy run out that way only has its own
// connections refused at accept or dial, and its neighbours' proxies are
// processes of their own.
const fdsPerConn = 2

// fdReserve is how many descriptors the connection cap leaves for the
// proxy's own housekeeping, so that it never fails for want of one: the
// guard's netlink reads of the host's addresses and routes, the log file
// and its rotation, the policy watcher, the allowDirect watcher, the
// resolver's sockets, and the DNS filter's (up to 256 queries in flight
// and 64 TCP connections), plus the connections being refused over the
// cap (up to 64, one each) and the one accept takes before it refuses,
// and the relay loop's pipes, in use and pooled (two descriptors each).
const fdReserve = 128 + 256 + 64 + 64 + 1 + 2*(proxy.RelayPipes+relayloop.MaxFreePipes)

// portRangeFile holds the ephemeral ports of the namespace the proxy
// dials from.
const portRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// caps are the caps a proxy runs with: the configured ones, with the
// connection cap lowered to what the descriptor limit allows.
type caps struct {
	spec.Effective
	noFile    uint64
	portRange int
	limitedBy string
}

// computeCaps raises the process's descriptor limit to its hard limit
// and works out the caps of cfg within it.
func computeCaps(cfg launch.Config) caps {
	return capsWithin(cfg, raiseNoFile(), portRange())
}

// capsWithin works out the caps of cfg for a descriptor limit of noFile
// and portRange ephemeral ports.
func capsWithin(cfg launch.Config, noFile uint64, portRange int) caps {
	c := caps{noFile: noFile, portRange: portRange}
	c.Effective = cfg.Limits.Effective(c.portRange)
	if cfg.SniffTimeout != 0 {
		c.SniffTimeout = cfg.SniffTimeout.Or(spec.DefaultSniffTimeout)
	}
	if fit := (int64(c.noFile) - fdReserve) / fdsPerConn; fit < int64(c.Connections) {
		c.limitedBy = fmt.Sprintf("a descriptor limit of %d, less a reserve of %d, fits %d connections of %d descriptors",
			c.noFile, fdReserve, max(fit, 1), fdsPerConn)
		c.Connections = int(max(fit, 1))
	}
	c.Pending = min(c.Pending, c.Connections)
	return c
}

// apply sets the caps on the proxy's config.
func (c caps) apply(pc *proxy.Config) {
	pc.MaxConns, pc.MaxPending, pc.MaxPendingBytes = c.Connections, c.Pending, c.PendingBytes
	pc.MaxPerUpstream, pc.IdleTimeout, pc.SniffTimeout = c.PerUpstream, c.IdleTimeout, c.SniffTimeout
}

// line is the limits line of the caps.
func (c caps) line(sandbox string, dnsFilter bool) decisionlog.Limits {
	l := decisionlog.Limits{
		Sandbox: sandbox, Connections: c.Connections, Pending: c.Pending, PendingBytes: c.PendingBytes,
		PerUpstream: c.PerUpstream, PortRange: c.portRange, SniffTimeout: c.SniffTimeout, IdleTimeout: c.IdleTimeout,
		LogMaxSize: c.LogMaxSize, NoFile: c.noFile, Reserve: fdReserve, LimitedBy: c.limitedBy,
	}
	if dnsFilter {
		l.DNSQueriesPerSecond = c.DNSQueriesPerSecond
	}
	return l
}

// raiseNoFile raises RLIMIT_NOFILE's soft limit to the hard one and
// returns the soft limit in force.
func raiseNoFile() uint64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 1024
	}
	if r.Cur < r.Max {
		raised := unix.Rlimit{Cur: r.Max, Max: r.Max}
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &raised) == nil {
			r.Cur = r.Max
		}
	}
	return r.Cur
}

// portRange counts the ephemeral ports of the calling thread's network
// namespace (0 if it cannot tell).
func portRange() int {
	b, err := os.ReadFile(portRangeFile)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || hi < lo {
		return 0
	}
	return hi - lo + 1
}
