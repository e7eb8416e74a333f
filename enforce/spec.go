package enforce

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/doorman-net/doorman/enforce/nft"
)

// Spec says what to enforce in one sandbox netns.
type Spec struct {
	// Port4 and Port6 are the proxy's listener ports inside the sandbox
	// (bound by the caller on 0.0.0.0:Port4 and [::]:Port6). 0 means that
	// family has no listener: its TCP is rejected, not redirected.
	Port4, Port6 uint16
	// Resolvers are the DNS servers the sandbox may query (UDP and TCP 53).
	// IPv4-mapped IPv6 addresses count as IPv4.
	Resolvers []netip.Addr
	// AllowICMP lets ICMP and ICMPv6 echo requests out to the Direct
	// prefixes (any of their ports), with at most 64 bytes of data; their
	// replies come back. Without Direct entries it admits nothing. Either
	// way the ICMP errors that keep admitted flows working (unreachable,
	// time exceeded, parameter problem, packet too big, related to a flow
	// by conntrack), replies to queries sent to the sandbox and IPv6
	// neighbour discovery pass; no other ICMP leaves.
	AllowICMP bool
	// DenyAll is mode none: no redirects, no DNS, no ICMP; only loopback
	// and replies to inbound connections leave the sandbox.
	DenyAll bool
	// DNSPort4 and DNSPort6 are the proxy's DNS filter ports inside the
	// sandbox (UDP and TCP, bound on 0.0.0.0 and [::]). When set, DNS to
	// the resolvers goes to the filter instead of straight out; 0 lets
	// that family's DNS go to the resolvers directly.
	DNSPort4, DNSPort6 uint16
	// Direct lists destinations that bypass the proxy (allowDirect):
	// neither redirected nor rejected, TCP and UDP.
	Direct []Direct
}

// Direct is one allowDirect destination: a prefix and a port range.
type Direct struct {
	Prefix         netip.Prefix
	PortLo, PortHi uint16 // inclusive; both 0 means every port
}

func (d Direct) String() string {
	if d.PortLo == 0 && d.PortHi == 0 {
		return d.Prefix.String()
	}
	return fmt.Sprintf("%v port %d-%d", d.Prefix, d.PortLo, d.PortHi)
}

// normalized returns a copy of s with the resolvers unmapped, sorted and
// deduplicated, or an error naming the first resolver that cannot be
// expressed as an nftables destination match.
func (s Spec) normalized() (Spec, error) {
	out := s
	out.Resolvers = make([]netip.Addr, 0, len(s.Resolvers))
	for i, a := range s.Resolvers {
		if err := nft.CheckResolver(a); err != nil {
			return Spec{}, fmt.Errorf("resolver #%d %q: %w", i+1, a, err)
		}
		out.Resolvers = append(out.Resolvers, a.Unmap())
	}
	slices.SortFunc(out.Resolvers, netip.Addr.Compare)
	out.Resolvers = slices.Compact(out.Resolvers)
	out.Direct = nil
	for _, d := range s.Direct {
		if !d.Prefix.IsValid() || d.PortLo > d.PortHi {
			return Spec{}, fmt.Errorf("allowDirect %v: not a prefix with a port range", d)
		}
		d.Prefix = netip.PrefixFrom(d.Prefix.Addr().Unmap(), d.Prefix.Bits()-unmapBits(d.Prefix)).Masked()
		out.Direct = append(out.Direct, d)
	}
	if s.DenyAll {
		// Mode none ignores listeners and resolvers: nothing leaves.
		out.Port4, out.Port6, out.Resolvers, out.AllowICMP = 0, 0, nil, false
		out.DNSPort4, out.DNSPort6, out.Direct = 0, 0, nil
	}
	return out, nil
}

// unmapBits is how many prefix bits an IPv4-mapped IPv6 prefix loses when
// unmapped (96), or 0.
func unmapBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return 96
	}
	return 0
}
