package guard

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
)

// hostTTL is how long the host's addresses and connected subnets are
// reused before they are read again.
const hostTTL = time.Second

// Config says where a Guard learns about the proxy's host. The zero value
// reads the namespace of the calling thread.
type Config struct {
	// OwnAddrs lists the addresses of the proxy's host. nil: the
	// addresses of every interface of the namespace.
	OwnAddrs func() ([]netip.Addr, error)
	// ConnectedSubnets lists the subnets the proxy's host reaches
	// without a router. nil: ConnectedSubnets, the routes of the
	// namespace's main table that have no gateway.
	ConnectedSubnets func() ([]netip.Prefix, error)
	// Scopes open private ranges to the names under a domain only: a
	// Kubernetes cluster's service and pod CIDRs to the names under its
	// cluster domain (see Scope, and CheckName).
	Scopes []Scope
	// NAT64Prefixes are the prefixes of the NAT64 translators the
	// proxy's host reaches, besides the well-known 64:ff9b::/96 and the
	// local-use 64:ff9b:1::/48, each of a length RFC 6052 lays out (see
	// ValidateNAT64Prefix; others are ignored). An address inside one is
	// judged by the IPv4 address it carries in that prefix's layout, and
	// is not refused as private space or a connected subnet itself: it
	// is the translator's.
	NAT64Prefixes []netip.Prefix
}

// Scope lets the names under Domain reach the addresses inside Prefixes
// that would otherwise be refused as private space (RFC 1918, CGNAT, ULA,
// site-local, benchmarking) or as one of the host's connected subnets. It
// opens nothing else: not the host's own addresses (a pod subnet's
// gateway on a node's bridge is one), loopback, link-local, multicast or
// a metadata service, whatever a prefix holds, and not the IPv6 forms
// that carry an IPv4 address to a translator. Names outside Domain never
// reach Prefixes by it, and neither does an address the client chose.
//
// Cluster DNS answers for any name under its domain, some of it for
// names anyone can make up (CoreDNS's "pods insecure" gives
// 10-96-0-1.default.pod.cluster.local the address 10.96.0.1), so the
// prefixes, not the names, bound what a Scope opens: name exactly the
// cluster's ranges.
type Scope struct {
	// Domain is a DNS name in canonical form ("cluster.local"): the names
	// below it are in the scope, the domain itself is not.
	Domain string
	// Prefixes are the ranges those names may reach.
	Prefixes []netip.Prefix
}

// covers reports whether name lies under s.Domain and a inside one of its
// prefixes. name is compared case-insensitively, without a final dot.
func (s Scope) covers(name string, a netip.Addr) bool {
	if s.Domain == "" || !strings.HasSuffix(strings.ToLower(strings.TrimSuffix(name, ".")), "."+s.Domain) {
		return false
	}
	for _, p := range s.Prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Guard decides whether an upstream address may be dialed under a policy.
// Its methods are safe for concurrent use.
type Guard struct {
	ownAddrs  func() ([]netip.Addr, error)
	connected func() ([]netip.Prefix, error)
	scopes    []Scope
	// nat64 are the valid Config.NAT64Prefixes; translators those and
	// builtinTranslators, whose connected routes are no subnets.
	nat64       []netip.Prefix
	translators []netip.Prefix

	mu      sync.Mutex
	host    hostView
	expires time.Time
}

// hostView is what the guard knows of the proxy's host.
type hostView struct {
	own       []netip.Addr
	connected []netip.Prefix
}

// New returns a guard configured by cfg.
func New(cfg Config) *Guard {
	g := &Guard{ownAddrs: cfg.OwnAddrs, connected: cfg.ConnectedSubnets, scopes: cfg.Scopes}
	for _, p := range cfg.NAT64Prefixes {
		if ValidateNAT64Prefix(p) == nil {
			g.nat64 = append(g.nat64, p)
		}
	}
	g.translators = append(slices.Clone(builtinTranslators), g.nat64...)
	if g.ownAddrs == nil {
		g.ownAddrs = interfaceAddrs
	}
	if g.connected == nil {
		g.connected = ConnectedSubnets
	}
	return g
}

// Refusal says why an address may not be dialed.
type Refusal struct {
	// Addr is the address refused (IPv4-mapped IPv6 unmapped).
	Addr netip.Addr
	// Embedded, when valid, is the IPv4 address Addr carries (Form
	// names how: "NAT64", "local-use NAT64 /48", "NAT64
	// 2001:db8:64::/96", "6to4", "Teredo client", "ISATAP", ...), and
	// the one that is refused.
	Embedded netip.Addr
	Form     string
	// Range is the narrowest refused range holding the address (or
	// Embedded); an entry must lie inside it to admit the address.
	// Invalid when Err is set.
	Range netip.Prefix
	// What says what Range is, as the refusal reads: "RFC 1918
	// (10.0.0.0/8)", "connected subnet 198.51.100.128/25 of the proxy's
	// host", "an address of the proxy's host".
	What string
	// Err is set when the guard could not read the host's addresses or
	// routes: it refuses then, since it cannot tell.
	Err error

	// private: Range is private space or a connected subnet, which a
	// Scope may open.
	private bool
}

// String renders r as a log reason reads after "private upstream ":
//
//	10.0.0.5: RFC 1918 (10.0.0.0/8)
//	64:ff9b::a00:5: NAT64 form of 10.0.0.5, RFC 1918 (10.0.0.0/8)
func (r *Refusal) String() string {
	s := r.Addr.String() + ": "
	if r.Embedded.IsValid() {
		s += fmt.Sprintf("%s form of %v, ", r.Form, r.Embedded)
	}
	if r.Err != nil {
		return s + fmt.Sprintf("cannot tell whether it is private (%v)", r.Err)
	}
	return s + r.What
}

// maxListed bounds how many refusals Reason lists.
const maxListed = 3

// Reason renders refusals as one log reason: each as prefix and its
// String, joined by "; ", the first few and then how many more. prefix
// says what was refused ("private upstream ", "private answer ").
func Reason(prefix string, refusals []*Refusal) string {
	var b strings.Builder
	for i, r := range refusals {
		if i == maxListed {
			fmt.Fprintf(&b, "; and %d more", len(refusals)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(prefix + r.String())
	}
	return b.String()
}

// Check returns nil if a may be dialed on port under policy p, or else
// why not (see the package documentation).
func (g *Guard) Check(p *conf.Policy, a netip.Addr, port uint16) *Refusal {
	return g.CheckName(p, "", a, port)
}

// CheckName is Check for an address the proxy found for name, which a
// name entry of p admits: the Scopes of that name apply too. name "" is
// Check.
func (g *Guard) CheckName(p *conf.Policy, name string, a netip.Addr, port uint16) *Refusal {
	return g.check(p, name, a, func(e conf.Entry, a netip.Addr) bool { return e.MatchAddr(a, port) })
}

// CheckAnyPort is Check for an address that may be dialed on whatever
// port an entry allows: a DNS answer carries no port, and the address may
// be dialed on any of them.
func (g *Guard) CheckAnyPort(p *conf.Policy, a netip.Addr) *Refusal {
	return g.CheckNameAnyPort(p, "", a)
}

// CheckNameAnyPort is CheckAnyPort for an address of an answer for name,
// which a name entry of p admits (see CheckName).
func (g *Guard) CheckNameAnyPort(p *conf.Policy, name string, a netip.Addr) *Refusal {
	return g.check(p, name, a, func(e conf.Entry, a netip.Addr) bool { return e.Prefix.Contains(a) })
}

// check judges a, then each IPv4 address it embeds (see embeddedIPv4);
// admits says whether an address entry admits an address. The Scopes of
// name apply to a itself, never to an embedded address; an address in a
// configured NAT64 prefix is not refused as private itself (its prefix
// is the translator's), only for what it carries.
func (g *Guard) check(p *conf.Policy, name string, a netip.Addr, admits func(conf.Entry, netip.Addr) bool) *Refusal {
	a = a.Unmap().WithZone("")
	r := g.judge(p, a, admits)
	if r != nil && r.private && (name != "" && g.scoped(name, a) || g.inNAT64(a)) {
		r = nil
	}
	if r != nil {
		return r
	}
	for _, e := range g.embeddedIPv4(a) {
		if r := g.judge(p, e.v4, admits); r != nil {
			r.Addr, r.Embedded, r.Form = a, e.v4, e.form
			return r
		}
	}
	return nil
}

// inNAT64 reports whether a lies in a configured NAT64 prefix.
func (g *Guard) inNAT64(a netip.Addr) bool {
	_, ok := g.nat64Prefix(a)
	return ok
}

// judge finds the narrowest refused range holding a (a fixed range, one
// of the host's addresses, or a connected subnet, in that order on a tie)
// and returns nil if there is none or an entry inside it admits a.
func (g *Guard) judge(p *conf.Policy, a netip.Addr, admits func(conf.Entry, netip.Addr) bool) *Refusal {
	var r *Refusal
	narrower := func(pfx netip.Prefix) bool { return r == nil || pfx.Bits() > r.Range.Bits() }
	for _, s := range specialRanges {
		if s.prefix.Contains(a) && narrower(s.prefix) {
			r = &Refusal{Addr: a, Range: s.prefix, What: s.describe(), private: s.private}
		}
	}
	host, err := g.hostView()
	if err != nil {
		return &Refusal{Addr: a, Err: err}
	}
	for _, o := range host.own {
		if o == a && narrower(netip.PrefixFrom(a, a.BitLen())) {
			r = &Refusal{Addr: a, Range: netip.PrefixFrom(a, a.BitLen()), What: "an address of the proxy's host"}
		}
	}
	for _, c := range host.connected {
		if c.Contains(a) && narrower(c) {
			r = &Refusal{Addr: a, Range: c, What: fmt.Sprintf("connected subnet %v of the proxy's host", c), private: true}
		}
	}
	if r == nil || admitted(p, a, r.Range, admits) {
		return nil
	}
	return r
}

// Local reports whether a is the proxy's host itself: a loopback address
// or one of the host's own addresses. It is false when the host's
// addresses cannot be read.
func (g *Guard) Local(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if a.IsLoopback() {
		return true
	}
	host, err := g.hostView()
	if err != nil {
		return false
	}
	return slices.Contains(host.own, a)
}

// scoped reports whether a Scope of the guard opens a to name.
func (g *Guard) scoped(name string, a netip.Addr) bool {
	for _, s := range g.scopes {
		if s.covers(name, a) {
			return true
		}
	}
	return false
}

// admitted reports whether an address entry of p that lies inside r
// admits a.
func admitted(p *conf.Policy, a netip.Addr, r netip.Prefix, admits func(conf.Entry, netip.Addr) bool) bool {
	if p == nil {
		return false
	}
	for _, e := range p.Entries {
		if e.Kind == conf.KindPrefix && within(e.Prefix, r) && admits(e, a) {
			return true
		}
	}
	return false
}

// hostView returns the host's addresses and connected subnets, read at
// most once per hostTTL. A failed read is not cached: the next check
// tries again.
func (g *Guard) hostView() (hostView, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Now().Before(g.expires) {
		return g.host, nil
	}
	own, err := g.ownAddrs()
	if err != nil {
		return hostView{}, fmt.Errorf("listing the addresses of the proxy's host: %w", err)
	}
	conn, err := g.connected()
	if err != nil {
		return hostView{}, fmt.Errorf("listing the routes of the proxy's host: %w", err)
	}
	v := hostView{own: make([]netip.Addr, 0, len(own))}
	for _, a := range own {
		v.own = append(v.own, a.Unmap().WithZone(""))
	}
	for _, c := range conn {
		if c.Addr().Is4In6() {
			c = netip.PrefixFrom(c.Addr().Unmap(), max(c.Bits()-96, 0))
		}
		if c = c.Masked(); usefulConnected(c, g.translators) {
			v.connected = append(v.connected, c)
		}
	}
	g.host, g.expires = v, time.Now().Add(hostTTL)
	return v, nil
}

// interfaceAddrs lists the addresses of every interface of the calling
// thread's namespace.
func interfaceAddrs() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ifaddrs))
	for _, ia := range ifaddrs {
		if pfx, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, pfx.Addr())
		}
	}
	return out, nil
}

// ConnectedSubnets lists the subnets that the calling thread's namespace
// reaches without a router: the destinations of the unicast routes of its
// main table, IPv4 and IPv6, that have an output interface and no gateway
// (neither a gateway nor a via, on the route or any of its next hops).
// A default route is no subnet, even on a point-to-point link ("default
// dev wg0"): it is the way to the internet.
func ConnectedSubnets() ([]netip.Prefix, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_TYPE)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, rt := range routes {
		if rt.Dst == nil || !connected(rt) {
			continue
		}
		a, ok := netip.AddrFromSlice(rt.Dst.IP)
		if !ok {
			continue
		}
		bits, _ := rt.Dst.Mask.Size()
		if a.Is4() || a.Is4In6() {
			a = a.Unmap()
			if len(rt.Dst.IP) == net.IPv6len && len(rt.Dst.Mask) == net.IPv6len {
				bits -= 96
			}
		}
		if pfx := netip.PrefixFrom(a, bits); pfx.IsValid() && pfx.Bits() > 0 {
			out = append(out, pfx.Masked())
		}
	}
	return out, nil
}

// connected reports whether rt delivers on a link without a router.
func connected(rt netlink.Route) bool {
	if rt.Gw != nil || rt.Via != nil {
		return false
	}
	if len(rt.MultiPath) == 0 {
		return rt.LinkIndex != 0
	}
	for _, nh := range rt.MultiPath {
		if nh.Gw != nil || nh.Via != nil || nh.LinkIndex == 0 {
			return false
		}
	}
	return true
}
