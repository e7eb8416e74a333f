package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/doorman-net/doorman/conf"
)

// forbiddenRanges are upstream addresses the proxy refuses to dial unless
// an entry names them: reaching them from the proxy's namespace would turn
// the proxy into a way into the host.
var forbiddenRanges = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("255.255.255.255/32"),
}

// upstreamGuard decides whether an upstream address may be dialed.
type upstreamGuard struct {
	// ownAddrs lists the addresses of the proxy's own namespace; nil
	// means read them from the interfaces (cached for a second).
	ownAddrs func() ([]netip.Addr, error)
	// permit, set only by tests, lets loopback test servers stand in
	// for the internet.
	permit func(netip.Addr) bool

	mu      sync.Mutex
	cached  []netip.Addr
	expires time.Time
}

// forbidden reports why a is not a permissible upstream under p, or "" if
// it is. An address in a forbidden range is permitted only when an IP/CIDR
// entry lies within that range (so 0.0.0.0/0 does not open loopback, while
// 127.0.0.1 or 169.254.169.254 named on their own do); one of the host's
// own addresses only when an entry names exactly that address.
func (g *upstreamGuard) forbidden(p *conf.Policy, a netip.Addr, port uint16) string {
	a = a.Unmap()
	if g.permit != nil && g.permit(a) {
		return ""
	}
	for _, r := range forbiddenRanges {
		if r.Contains(a) {
			if namedWithin(p, a, port, r) {
				return ""
			}
			return fmt.Sprintf("upstream %v is in %v", a, r)
		}
	}
	own, err := g.own()
	if err != nil {
		return fmt.Sprintf("cannot list the proxy's own addresses: %v", err)
	}
	for _, o := range own {
		if o == a {
			if namedWithin(p, a, port, netip.PrefixFrom(a, a.BitLen())) {
				return ""
			}
			return fmt.Sprintf("upstream %v is an address of the proxy's host", a)
		}
	}
	return ""
}

// namedWithin reports whether an entry of p that lies inside r admits a:port.
func namedWithin(p *conf.Policy, a netip.Addr, port uint16, r netip.Prefix) bool {
	for _, e := range p.Entries {
		if e.Kind == conf.KindPrefix && e.Prefix.Bits() >= r.Bits() && r.Contains(e.Prefix.Addr()) && e.MatchAddr(a, port) {
			return true
		}
	}
	return false
}

func (g *upstreamGuard) own() ([]netip.Addr, error) {
	if g.ownAddrs != nil {
		return g.ownAddrs()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Now().Before(g.expires) {
		return g.cached, nil
	}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	fresh := make([]netip.Addr, 0, len(ifaddrs))
	for _, ia := range ifaddrs {
		if pfx, err := netip.ParsePrefix(ia.String()); err == nil {
			fresh = append(fresh, pfx.Addr().Unmap())
		}
	}
	g.cached = fresh
	g.expires = time.Now().Add(time.Second)
	return g.cached, nil
}

// errForbiddenUpstream means every address the connection could go to is
// one the proxy must not dial (see upstreamGuard): a policy denial, unlike
// a name that does not resolve or a host that refuses.
var errForbiddenUpstream = errors.New("no permissible upstream")

// dialUpstream connects to the upstream for decision d: the addresses of
// d.dialName (resolved by the proxy) at the original port, or else the
// original destination itself. It returns the connection and the address it
// reached.
func (p *Proxy) dialUpstream(ctx context.Context, pol *conf.Policy, d decision, dst netip.AddrPort) (*net.TCPConn, error) {
	var candidates []netip.Addr
	if d.dialName != "" {
		addrs, err := p.resolver.LookupNetIP(ctx, "ip", d.dialName)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", d.dialName, err)
		}
		candidates = addrs
	} else {
		candidates = []netip.Addr{dst.Addr()}
	}
	var reasons []string
	var permitted []netip.Addr
	for _, a := range candidates {
		if why := p.guard.forbidden(pol, a, dst.Port()); why != "" {
			reasons = append(reasons, why)
			continue
		}
		permitted = append(permitted, a.Unmap())
	}
	if len(permitted) == 0 {
		return nil, fmt.Errorf("%w: %s", errForbiddenUpstream, strings.Join(reasons, "; "))
	}
	var errs []error
	for _, a := range permitted {
		c, err := p.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, dst.Port()).String())
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %s port %d: %w", nameOr(d.dialName, dst.Addr().String()), dst.Port(), errors.Join(errs...))
}

func nameOr(name, alt string) string {
	if name != "" {
		return name
	}
	return alt
}
