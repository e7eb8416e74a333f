package hostlayer

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// hostIface is a sandbox's interface as found in the runtime's namespace.
type hostIface struct {
	name  string
	index int
	// bridge and bridgeIndex name the Linux bridge it is a port of; ""
	// and 0 for a routed interface.
	bridge      string
	bridgeIndex int
	// pin is the sandbox's identity on it: given in the spec, or read
	// from the sandbox's end at this Apply.
	pin Pin
	// mac is the sandbox's MAC as pinned (pin.MAC).
	mac net.HardwareAddr
	// peerMAC is the MAC the sandbox's end has now, where it was read
	// (bridge ports always, routed interfaces when their pin is read).
	peerMAC net.HardwareAddr
	// brnf4 and brnf6 say whether br_netfilter passes the bridge's IPv4
	// and IPv6 frames through the inet hooks (bridge ports only).
	brnf4, brnf6 bool
	// isolated says whether the port's isolation (IFLA_BRPORT_ISOLATED)
	// is on now, and isolationOwned whether the layer holds it: it turns
	// it on at Apply (see isolatePorts) and off at Remove. Isolation that
	// was on before the layer's first Apply (another tool's) is not the
	// layer's, and stays when it goes. Bridge ports only.
	isolated, isolationOwned bool
}

// addrs4 and addrs6 are the sandbox's pinned addresses of each family.
func (i hostIface) addrs4() []netip.Addr { return filterAddrs(i.pin.Addrs, netip.Addr.Is4) }
func (i hostIface) addrs6() []netip.Addr { return filterAddrs(i.pin.Addrs, netip.Addr.Is6) }

func filterAddrs(addrs []netip.Addr, keep func(netip.Addr) bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if keep(a) {
			out = append(out, a)
		}
	}
	return out
}

// resolveIfaces looks up every interface of s in the runtime's namespace
// (all veth peers of s.SandboxNetNS if s names none) and checks that the
// layer can hold on it: it exists, it is not loopback or a bridge itself,
// and it is a routed interface or a port of a Linux bridge. It finds the
// sandbox's identity there, from s.Pins or read from the sandbox's end,
// and for a bridge port whether br_netfilter passes the bridge's IP
// through the inet hooks.
func (n *runtimeNS) resolveIfaces(s Spec) ([]hostIface, error) {
	names := s.HostIfaces
	if len(names) == 0 {
		var err error
		if names, err = findHostPeers(s.SandboxNetNS, n.path); err != nil {
			return nil, fmt.Errorf("find the sandbox's host interfaces: %w", err)
		}
	}
	var out []hostIface
	for _, name := range names {
		i, err := n.resolveIface(s, name)
		if err != nil {
			return nil, fmt.Errorf("host interface %q: %w", name, err)
		}
		out = append(out, i)
	}
	return out, nil
}

func (n *runtimeNS) resolveIface(s Spec, name string) (hostIface, error) {
	l, err := n.link.LinkByName(name)
	if linkNotFound(err) {
		return hostIface{}, fmt.Errorf("does not exist in %s", n.path)
	}
	if err != nil {
		return hostIface{}, fmt.Errorf("look it up: %w", err)
	}
	a := l.Attrs()
	switch {
	case a.Flags&net.FlagLoopback != 0:
		return hostIface{}, fmt.Errorf("is the loopback interface, not a sandbox's")
	case l.Type() == "bridge":
		return hostIface{}, fmt.Errorf("is a bridge: give the sandbox's own port of it (its veth), not the bridge that every container shares")
	}
	hi := hostIface{name: name, index: a.Index}
	pin, pinned := s.pin(name, a.Index)
	if a.MasterIndex != 0 {
		m, err := n.link.LinkByIndex(a.MasterIndex)
		if err != nil {
			return hostIface{}, fmt.Errorf("look up its master (index %d): %w", a.MasterIndex, err)
		}
		if m.Type() != "bridge" {
			return hostIface{}, fmt.Errorf("is enslaved to %q, a %s: its frames would bypass the nftables hooks (only Linux bridge ports and routed interfaces are supported)",
				m.Attrs().Name, m.Type())
		}
		hi.bridge, hi.bridgeIndex = m.Attrs().Name, m.Attrs().Index
		if s.SandboxNetNS == "" {
			return hostIface{}, fmt.Errorf("is a port of bridge %q: the sandbox's network namespace is needed to find its end of the veth", hi.bridge)
		}
		if hi.brnf4, hi.brnf6, err = bridgeNetfilter(n.path, hi.bridgeIndex); err != nil {
			return hostIface{}, fmt.Errorf("read the br_netfilter state of bridge %q: %w", hi.bridge, err)
		}
		if hi.isolated, err = n.portIsolated(l); err != nil {
			return hostIface{}, fmt.Errorf("read its port isolation on bridge %q: %w", hi.bridge, err)
		}
	}
	// A bridge port's peer is always looked at: the layer must know that
	// the frames it pins come from the sandbox, and Check reports a MAC
	// the sandbox changed since.
	if hi.bridge != "" || !pinned {
		if s.SandboxNetNS == "" {
			return hostIface{}, fmt.Errorf("is a routed interface without a pin: the sandbox's network namespace is needed to read its addresses")
		}
		peer, err := n.readPeer(s.SandboxNetNS, l, !pinned)
		if err != nil {
			return hostIface{}, err
		}
		hi.peerMAC = peer.mac
		if !pinned {
			pin = newPin(hi, peer, s.IPAM)
		}
	}
	if hi.bridge != "" && len(pin.MAC) != 6 {
		return hostIface{}, fmt.Errorf("is a port of bridge %q, and its pin has no mac address", hi.bridge)
	}
	hi.pin, hi.mac = pin, pin.MAC
	return hi, nil
}

// pin returns the spec's pin for host interface name with index index.
func (s Spec) pin(name string, index int) (Pin, bool) {
	for _, p := range s.Pins {
		if p.HostIface == name && (p.HostIndex == 0 || p.HostIndex == index) {
			return p, true
		}
	}
	return Pin{}, false
}

// peer is the sandbox's end of a veth, as read in its namespace.
type peer struct {
	name  string
	mac   net.HardwareAddr
	addrs []netip.Addr
}

// readPeer reads the other end of veth l, which must be in the sandbox's
// namespace and name l as its own peer: its name, its MAC and, if
// withAddrs, its addresses.
func (n *runtimeNS) readPeer(sandboxNetNS string, l netlink.Link, withAddrs bool) (peer, error) {
	a := l.Attrs()
	if l.Type() != "veth" {
		return peer{}, fmt.Errorf("is a %s, not a veth: the sandbox's end cannot be found to pin its identity", l.Type())
	}
	sf, err := nft.OpenNetNSFile(sandboxNetNS)
	if err != nil {
		return peer{}, err
	}
	defer sf.Close()
	sandboxID, err := n.link.GetNetNsIdByFd(int(sf.Fd()))
	if err != nil {
		return peer{}, fmt.Errorf("namespace id of %s: %w", sandboxNetNS, err)
	}
	if sandboxID < 0 || a.NetNsID != sandboxID {
		return peer{}, fmt.Errorf("its peer is not in the sandbox's namespace %s", sandboxNetNS)
	}
	sh, err := newRouteHandle(sf)
	if err != nil {
		return peer{}, fmt.Errorf("netlink handle in %s: %w", sandboxNetNS, err)
	}
	defer sh.Close()
	pl, err := sh.LinkByIndex(a.ParentIndex)
	if err != nil {
		return peer{}, fmt.Errorf("look up its peer (index %d) in %s: %w", a.ParentIndex, sandboxNetNS, err)
	}
	if pl.Type() != "veth" || pl.Attrs().ParentIndex != a.Index || len(pl.Attrs().HardwareAddr) != 6 {
		return peer{}, fmt.Errorf("interface index %d in %s is not its peer", a.ParentIndex, sandboxNetNS)
	}
	p := peer{name: pl.Attrs().Name, mac: pl.Attrs().HardwareAddr}
	if !withAddrs {
		return p, nil
	}
	addrs, err := sh.AddrList(pl, netlink.FAMILY_ALL)
	if err != nil {
		return peer{}, fmt.Errorf("list the addresses of its peer %q in %s: %w", p.name, sandboxNetNS, err)
	}
	for _, ad := range addrs {
		if ip, ok := netip.AddrFromSlice(ad.IP); ok {
			p.addrs = append(p.addrs, ip.Unmap())
		}
	}
	return p, nil
}

// newPin is the pin of hi read from its peer: the peer's MAC and
// addresses, and the EUI-64 link-local address of its MAC. Where ipam
// names the peer, its addresses of a family replace those the peer has
// of that family, IPv6 link-local ones excepted.
func newPin(hi hostIface, p peer, ipam map[string][]netip.Addr) Pin {
	pin := Pin{HostIface: hi.name, HostIndex: hi.index, SandboxIface: p.name, MAC: p.mac}
	assigned := ipam[p.name]
	for _, a := range p.addrs {
		a = a.Unmap()
		replaced := slices.ContainsFunc(assigned, func(b netip.Addr) bool { return b.Unmap().Is4() == a.Is4() })
		if !replaced || a.Is6() && a.IsLinkLocalUnicast() {
			pin.Addrs = append(pin.Addrs, a)
		}
	}
	pin.Addrs = append(pin.Addrs, assigned...)
	pin.Addrs = append(pin.Addrs, eui64LinkLocal(p.mac))
	// The peer's addresses are an interface's: valid, unicast.
	pin.Addrs, _ = pinAddrs(filterAddrs(pin.Addrs, func(a netip.Addr) bool {
		return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && !a.IsLoopback()
	}))
	return pin
}

// eui64LinkLocal is the IPv6 link-local address the kernel derives from
// mac (RFC 4291 appendix A) when the interface comes up.
func eui64LinkLocal(mac net.HardwareAddr) netip.Addr {
	b := [16]byte{0: 0xfe, 1: 0x80}
	b[8], b[9], b[10] = mac[0]^0x02, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// bridgeNetfilter reports whether br_netfilter calls the IPv4 and the IPv6
// hooks for the frames of the bridge with index brIndex in the namespace
// at nsPath: br_netfilter must be there (/proc/sys/net/bridge exists), and
// either the namespace's sysctl or the bridge's own option must be on. The
// sysctls are per namespace, so it reads them from inside.
func bridgeNetfilter(nsPath string, brIndex int) (v4, v6 bool, err error) {
	err = ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		g4, err := readSysctlBool("net/bridge/bridge-nf-call-iptables")
		if errors.Is(err, os.ErrNotExist) {
			return nil // no br_netfilter: the bridge's options do nothing
		}
		if err != nil {
			return err
		}
		g6, err := readSysctlBool("net/bridge/bridge-nf-call-ip6tables")
		if err != nil {
			return err
		}
		b4, b6, err := bridgeNFOptions(brIndex)
		if err != nil {
			return err
		}
		v4, v6 = g4 || b4, g6 || b6
		return nil
	})
	return v4, v6, err
}

func readSysctlBool(key string) (bool, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", key))
	if err != nil {
		return false, err
	}
	return string(bytes.TrimSpace(b)) != "0", nil
}

// bridgeNFOptions reads the bridge's nf_call_iptables and
// nf_call_ip6tables options (IFLA_BR_NF_CALL_IPTABLES, _IP6TABLES) over
// netlink in the calling thread's namespace.
func bridgeNFOptions(brIndex int) (v4, v6 bool, err error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(brIndex)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return false, false, err
	}
	if len(msgs) != 1 || len(msgs[0]) < unix.SizeofIfInfomsg {
		return false, false, fmt.Errorf("unexpected answer to RTM_GETLINK for index %d", brIndex)
	}
	data, err := nestedAttr(msgs[0][unix.SizeofIfInfomsg:], unix.IFLA_LINKINFO, unix.IFLA_INFO_DATA)
	if err != nil || data == nil {
		return false, false, err
	}
	attrs, err := nl.ParseRouteAttr(data)
	if err != nil {
		return false, false, err
	}
	for _, a := range attrs {
		switch a.Attr.Type & nlaTypeMask {
		case unix.IFLA_BR_NF_CALL_IPTABLES:
			v4 = len(a.Value) > 0 && a.Value[0] != 0
		case unix.IFLA_BR_NF_CALL_IP6TABLES:
			v6 = len(a.Value) > 0 && a.Value[0] != 0
		}
	}
	return v4, v6, nil
}

// nestedAttr follows a path of nested netlink attribute types through b
// and returns the payload of the last one, or nil if one is missing.
func nestedAttr(b []byte, path ...uint16) ([]byte, error) {
	for _, typ := range path {
		attrs, err := nl.ParseRouteAttr(b)
		if err != nil {
			return nil, err
		}
		b = nil
		for _, a := range attrs {
			if a.Attr.Type&nlaTypeMask == typ {
				b = a.Value
				break
			}
		}
		if b == nil {
			return nil, nil
		}
	}
	return b, nil
}

// nlaTypeMask strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from an
// attribute type.
const nlaTypeMask = 0x3fff
