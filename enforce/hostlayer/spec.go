package hostlayer

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce/nft"
)

// Spec says what the host-side layer lets through from one sandbox.
type Spec struct {
	// Key identifies the sandbox (unique in the runtime's namespace). It
	// names the sandbox's chains, sbx-<Key>: letters, digits, '_', '.',
	// '-', at most 201, starting with a letter or digit (the sandbox keys
	// of package sandbox all qualify).
	Key string
	// SandboxNetNS is the path of the sandbox's network namespace. Apply
	// reads there, from the sandbox's end of each veth, the identity it
	// pins on the host interface unless Pins gives it (see Pin), and
	// finds the host interfaces there if HostIfaces is empty (see
	// FindHostPeers). It may be "" only if HostIfaces are all routed
	// interfaces with a pin each.
	SandboxNetNS string
	// HostIfaces are the sandbox's interfaces in the runtime's namespace:
	// the host-side ends of its veths (usually one; a container on several
	// networks has one per network). They must exist when Apply runs.
	// Empty means every veth of SandboxNetNS whose peer is in the runtime's
	// namespace.
	HostIfaces []string
	// Resolvers are the DNS servers the sandbox may query (UDP and TCP
	// port 53). Loopback resolvers (Docker's 127.0.0.11) live inside the
	// sandbox and need nothing here: they are skipped. IPv4-mapped IPv6
	// addresses count as IPv4.
	Resolvers []netip.Addr
	// AllowICMP lets ICMP and ICMPv6 echo requests through to the
	// AllowDirect prefixes (with or without ports), with at most 64 bytes
	// of data. Either way neighbour discovery and MLD on the link, replies
	// to queries sent to the sandbox, and the ICMP errors conntrack relates
	// to a flow (unreachable, time exceeded, parameter problem, packet too
	// big) pass; no other ICMP does.
	AllowICMP bool
	// AllowDirect are destinations the sandbox may reach without the proxy:
	// conf.KindPrefix entries (IP or CIDR). An entry with a port range
	// admits TCP and UDP to those ports; one without admits TCP and UDP to
	// every port.
	AllowDirect []conf.Entry
	// Pins are the sandbox's identities on its host interfaces, as an
	// earlier Apply returned them: a host interface with a pin has it
	// enforced as it is, whatever the sandbox's end of the veth says now,
	// so that a workload that changed its MAC or addresses (CAP_NET_ADMIN)
	// never gets them pinned by a later Apply. A host interface without
	// one has it read from the sandbox's end (see Pin).
	Pins []Pin
	// IPAM gives, by the name of an interface inside the sandbox, the
	// addresses its IPAM assigned it (those of a CNI result). A pin read
	// at this Apply from the sandbox's end of that name takes these as
	// the sandbox's addresses of their family instead of those the
	// interface has (of a family IPAM assigned none of, those the
	// interface has); its IPv6 link-local addresses are read as always.
	IPAM map[string][]netip.Addr
	// Redirect sends what the sandbox sends past its own ruleset (its
	// TCP, its DNS to the resolvers) to its proxy's listeners in the
	// runtime's namespace (see Redirect). Zero: nothing is redirected,
	// and that traffic is dropped.
	Redirect Redirect

	// logGroup is the NFLOG group the sandbox's drops are logged to:
	// Apply picks it, Check reads it (see LogRate).
	logGroup uint16
}

// Pin is the identity of a sandbox on one of its host interfaces: what
// the layer lets it call itself there. Frames and packets from that
// interface must carry its MAC (bridge ports) and one of its addresses as
// their source (ARP sender, IPv4 and IPv6 source), and neighbour
// advertisements and duplicate address detection must name one of its
// addresses as their target.
//
// A pin that Apply reads from the sandbox's end of the veth holds its MAC
// and every address it has (IPv4; IPv6, global and link-local, tentative
// ones included), with the IPAM addresses in place of those of their
// family where Spec.IPAM names the interface, and the EUI-64 link-local
// address of its MAC, which the kernel gives it once the link is up.
type Pin struct {
	// HostIface is the host interface the pin holds on.
	HostIface string
	// HostIndex is HostIface's interface index when the pin was read: a
	// pin for an index that the interface no longer has belongs to a veth
	// that was replaced, and is read again. 0 matches any index.
	HostIndex int
	// SandboxIface is the name the sandbox's end had when the pin was
	// read, for messages ("" if it was not read).
	SandboxIface string
	// MAC is the hardware address of the sandbox's end of the veth. A
	// bridge port's pin must have one.
	MAC net.HardwareAddr
	// Addrs are the sandbox's addresses on the interface, IPv4 and IPv6.
	Addrs []netip.Addr
}

func (p Pin) String() string {
	return fmt.Sprintf("%s: mac %s, addresses %v", p.HostIface, p.MAC, p.Addrs)
}

// validKey reports whether key may name a sandbox's chains: it matches
// sandbox.ValidKey, and makes a chain name of at most 205 bytes
// (nftables allows 255). Hand-written, not a regexp: this package is in
// every doorman process, and a package-level regexp costs each of them
// at start.
func validKey(key string) bool {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if len(key) == 0 || len(key) > 201 || !alnum(key[0]) {
		return false
	}
	for i := 1; i < len(key); i++ {
		if c := key[i]; !alnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// normalized returns a copy of s with the interfaces and resolvers sorted
// and deduplicated, loopback resolvers dropped, IPv4-mapped addresses
// unmapped and duplicate entries dropped, or an error naming the first
// value that cannot be enforced and saying why.
func (s Spec) normalized() (Spec, error) {
	if err := checkKey(s.Key); err != nil {
		return Spec{}, err
	}
	out := Spec{Key: s.Key, SandboxNetNS: s.SandboxNetNS, AllowICMP: s.AllowICMP, IPAM: map[string][]netip.Addr{}}
	var err error
	if out.Redirect, err = s.Redirect.normalized(); err != nil {
		return Spec{}, fmt.Errorf("sandbox %s: %w", s.Key, err)
	}
	if len(s.HostIfaces) == 0 && s.SandboxNetNS == "" {
		return Spec{}, fmt.Errorf("sandbox %s: neither host interfaces nor the sandbox's namespace given", s.Key)
	}
	for _, name := range s.HostIfaces {
		if err := checkIfName(name); err != nil {
			return Spec{}, fmt.Errorf("sandbox %s: host interface %q: %w", s.Key, name, err)
		}
		out.HostIfaces = append(out.HostIfaces, name)
	}
	slices.Sort(out.HostIfaces)
	out.HostIfaces = slices.Compact(out.HostIfaces)

	for i, a := range s.Resolvers {
		if err := nft.CheckResolver(a); err != nil {
			return Spec{}, fmt.Errorf("sandbox %s: resolver #%d %q: %w", s.Key, i+1, a, err)
		}
		if a.Unmap().IsLoopback() {
			continue
		}
		out.Resolvers = append(out.Resolvers, a.Unmap())
	}
	slices.SortFunc(out.Resolvers, netip.Addr.Compare)
	out.Resolvers = slices.Compact(out.Resolvers)

	for i, e := range s.AllowDirect {
		if err := checkDirect(e); err != nil {
			return Spec{}, fmt.Errorf("sandbox %s: allowDirect entry #%d %q: %w", s.Key, i+1, e, err)
		}
		e.Prefix = unmapPrefix(e.Prefix)
		if !slices.ContainsFunc(out.AllowDirect, e.Equal) {
			out.AllowDirect = append(out.AllowDirect, e)
		}
	}

	for _, p := range s.Pins {
		if err := checkIfName(p.HostIface); err != nil {
			return Spec{}, fmt.Errorf("sandbox %s: pin for host interface %q: %w", s.Key, p.HostIface, err)
		}
		if slices.ContainsFunc(out.Pins, func(q Pin) bool { return q.HostIface == p.HostIface }) {
			return Spec{}, fmt.Errorf("sandbox %s: two pins for host interface %q", s.Key, p.HostIface)
		}
		if p.MAC != nil && len(p.MAC) != 6 {
			return Spec{}, fmt.Errorf("sandbox %s: pin for host interface %q: mac %s is not an Ethernet address", s.Key, p.HostIface, p.MAC)
		}
		addrs, err := pinAddrs(p.Addrs)
		if err != nil {
			return Spec{}, fmt.Errorf("sandbox %s: pin for host interface %q: %w", s.Key, p.HostIface, err)
		}
		p.MAC, p.Addrs = slices.Clone(p.MAC), addrs
		out.Pins = append(out.Pins, p)
	}
	for name, addrs := range s.IPAM {
		if err := checkIfName(name); err != nil {
			return Spec{}, fmt.Errorf("sandbox %s: ipam addresses of sandbox interface %q: %w", s.Key, name, err)
		}
		a, err := pinAddrs(addrs)
		if err != nil {
			return Spec{}, fmt.Errorf("sandbox %s: ipam addresses of sandbox interface %q: %w", s.Key, name, err)
		}
		out.IPAM[name] = a
	}
	return out, nil
}

// pinAddrs returns addrs unmapped, sorted and deduplicated, or an error
// naming the first that cannot be a sandbox's own address.
func pinAddrs(addrs []netip.Addr) ([]netip.Addr, error) {
	out := []netip.Addr{} // not nil: no address is an answer too
	for _, a := range addrs {
		switch {
		case !a.IsValid():
			return nil, fmt.Errorf("address %q: not an IP address", a)
		case a.Zone() != "":
			return nil, fmt.Errorf("address %q: give it without its zone", a)
		case a.Unmap().IsUnspecified(), a.IsMulticast(), a.Unmap().IsLoopback():
			return nil, fmt.Errorf("address %s: not a unicast address an interface can have", a)
		}
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// CheckKey returns an error naming key unless it may name a sandbox in
// the layer (what Spec.Key must be).
func CheckKey(key string) error { return checkKey(key) }

func checkKey(key string) error {
	if !validKey(key) {
		return fmt.Errorf("sandbox key %q: want letters, digits, '_', '.', '-' (at most 201), starting with a letter or digit", key)
	}
	return nil
}

func checkIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name")
	case len(name) >= nft.IfNameSize:
		return fmt.Errorf("longer than %d bytes, no interface has such a name", nft.IfNameSize-1)
	case name == "." || name == ".." || strings.ContainsAny(name, "/:% \t\n"):
		return fmt.Errorf("not a valid interface name")
	}
	return nil
}

func checkDirect(e conf.Entry) error {
	switch {
	case e.Kind != conf.KindPrefix:
		return fmt.Errorf("a %s entry cannot bypass the proxy: only IP addresses and CIDR prefixes can", e.Kind)
	case !e.Prefix.IsValid():
		return fmt.Errorf("no valid IP prefix")
	case e.Prefix.Addr().Zone() != "":
		return fmt.Errorf("scoped address: nftables cannot match an IPv6 zone")
	case e.Ports.Lo > e.Ports.Hi:
		return fmt.Errorf("port range %d-%d is reversed", e.Ports.Lo, e.Ports.Hi)
	case !e.Ports.Any() && e.Ports.Lo == 0:
		return fmt.Errorf("port range starts at 0")
	}
	return nil
}

// unmapPrefix turns an IPv4-mapped IPv6 prefix into the IPv4 prefix it
// covers, so that it matches IPv4 packets; a mapped prefix shorter than
// /96 covers no IPv4 address alone and is kept as it is. The result is
// masked.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// chainName is the name of the sandbox's chain in both tables.
func chainName(key string) string { return chainPrefix + key }
