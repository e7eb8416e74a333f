package resolver

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPort is the port of a server given without one.
const DefaultPort = 53

// wantServer says, in every parse error, what a server address looks like.
const wantServer = "want addr or addr:port, such as 203.0.113.53, 203.0.113.53:5353, 2001:db8::53 or [2001:db8::53]:5353"

// ParseServer parses the address of a DNS server the proxy is to ask, as
// every way of configuring doorman takes it (the upstreamResolver keys,
// the --upstream-resolver flags, the proxy's --resolver): an IP address,
// with the port after a colon if it is not 53, an IPv6 address with a port
// in brackets. Surrounding spaces are ignored and an IPv4-mapped IPv6
// address is taken as the IPv4 one. A name is not accepted: the proxy
// would need a resolver to find its resolver. Neither is an address no
// server can have (unspecified, multicast), port 0, nor an address with a
// zone (fe80::1%eth0).
//
// The error names the value and says why it is not an address; the
// caller adds the key or flag it came from.
func ParseServer(s string) (netip.AddrPort, error) {
	s = strings.TrimSpace(s)
	bad := func(format string, a ...any) (netip.AddrPort, error) {
		return netip.AddrPort{}, fmt.Errorf("%q: %s; %s", s, fmt.Sprintf(format, a...), wantServer)
	}
	if s == "" {
		return bad("empty")
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return server(s, a, DefaultPort)
	}
	if inner, ok := strings.CutPrefix(s, "["); ok && strings.HasSuffix(inner, "]") {
		// An IPv6 address in brackets without a port.
		inner = strings.TrimSuffix(inner, "]")
		if a, err := netip.ParseAddr(inner); err != nil || !a.Is6() {
			return bad("%q in brackets is not an IPv6 address", inner)
		}
		return server(s, netip.MustParseAddr(inner), DefaultPort)
	}
	addr, port, err := net.SplitHostPort(s)
	if err != nil {
		switch {
		case !strings.Contains(s, ":"):
			return bad("not an IP address (name the server by its address)")
		case strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "["):
			return bad("not an IP address (an IPv6 address with a port goes in brackets)")
		}
		return bad("not an IP address with a port")
	}
	a, err := netip.ParseAddr(addr)
	switch {
	case err != nil:
		return bad("%q is not an IP address (name the server by its address)", addr)
	case a.Is4() && strings.HasPrefix(s, "["):
		return bad("brackets are for IPv6 addresses")
	case port == "":
		return bad("the port after the colon is empty")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return bad("port %q is not a number from 1 to 65535", port)
	}
	return server(s, a, uint16(p))
}

// server checks that a can be a server's address.
func server(s string, a netip.Addr, port uint16) (netip.AddrPort, error) {
	a = a.Unmap()
	switch {
	case a.Zone() != "":
		return netip.AddrPort{}, fmt.Errorf("%q: an address with a zone is not supported; %s", s, wantServer)
	case a.IsUnspecified():
		return netip.AddrPort{}, fmt.Errorf("%q: the unspecified address is no server's; %s", s, wantServer)
	case a.IsMulticast():
		return netip.AddrPort{}, fmt.Errorf("%q: a multicast address is no server's; %s", s, wantServer)
	}
	return netip.AddrPortFrom(a, port), nil
}
