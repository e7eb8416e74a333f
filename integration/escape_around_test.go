package integration

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/integration/testnet"
)

// What lies around an escape sandbox besides the fake internet: the host's
// LAN, a neighbour sandbox on the same bridge, and the runtime's namespace
// (see escapeWorld). The attempts that aim there are measured there.

// rebindZone is the wildcard zone every escape policy allows, whose names
// the fake internet's DNS answers with private addresses: a rebinding
// attacker's zone.
const rebindZone = "rebind.example.test"

// escapeLANHosts are the host's LAN as the suite lays it out: a machine on
// an RFC 1918 network, one in CGNAT space, the metadata services of the
// clouds that sit outside 169.254/16, and a ULA host; each with a name in
// the rebinding zone.
var escapeLANHosts = []struct {
	name   string // the servers' own name
	record string // the name in rebindZone that DNS answers with addr
	addr   netip.Addr
}{
	{"lan.internal", "lan." + rebindZone, netip.MustParseAddr("10.66.77.10")},
	{"cgnat.internal", "cgnat." + rebindZone, netip.MustParseAddr("100.64.77.10")},
	{"metadata.internal", "metadata." + rebindZone, netip.MustParseAddr("100.100.100.200")},
	{"metadata6.internal", "metadata6." + rebindZone, netip.MustParseAddr("fd00:ec2::254")},
	{"ula.internal", "ula." + rebindZone, netip.MustParseAddr("fdd0:7e57::10")},
}

// escapeNAT64LAN is a machine of the LAN reached through a NAT64 on the
// host's path: its IPv4 address, and that address in the local-use NAT64
// prefix 64:ff9b:1::/48 laid out as RFC 6052 does for a /48, a /56 and a
// /64 prefix inside it (the IPv4 bits not at the end; the u octet zero),
// each with a name in the rebinding zone. The suffix of each spells
// 203.0.113.7 where the /96 layout reads an IPv4 address, so that a guard
// reading that layout alone sees a public address. No translator runs
// here: the LAN host holds the IPv6 addresses itself (testnet.AddLANHost),
// so that the bytes a dial to them sends arrive there, as a NAT64 would
// deliver them to 10.66.77.203.
var escapeNAT64LAN = struct {
	name  string
	v4    netip.Addr
	forms []escapeNAT64Form
}{
	name: "nat64.internal",
	v4:   netip.MustParseAddr("10.66.77.203"),
	forms: []escapeNAT64Form{
		{"nat64-48." + rebindZone, netip.MustParseAddr("64:ff9b:1:a42:4d:cb00:cb00:7107")},
		{"nat64-56." + rebindZone, netip.MustParseAddr("64:ff9b:1:a:42:4dcb:cb00:7107")},
		{"nat64-64." + rebindZone, netip.MustParseAddr("64:ff9b:1:0:a:424d:cb00:7107")},
	},
}

// escapeNAT64Form is one NAT64 form of escapeNAT64LAN's address and the
// name in the rebinding zone whose AAAA record it is.
type escapeNAT64Form struct {
	record string
	addr   netip.Addr
}

// escapeICMPLAN are the LAN addresses the icmp-lan attempt aims at.
var escapeICMPLAN = []netip.Addr{netip.MustParseAddr("10.66.77.10"), netip.MustParseAddr("fdd0:7e57::10")}

// The link-layer attempts' parameters.
const (
	escapeSpoofPort = 7070            // ip-spoof's listener; the neighbour serves nothing there
	escapeSpoofTime = 3 * time.Second // how long arp-spoof, ip-spoof and router-advert go on
)

// escapeRAPrefix is the prefix the rogue router advertises.
var escapeRAPrefix = netip.MustParsePrefix("2001:db8:bad::/64")

// escapeLAN is the LAN of one Net, made once and shared by the kinds that
// run on it.
type escapeLAN struct {
	hosts []*testnet.Host
	icmp  *testnet.ICMPRecorder
	names []string // the rebinding names that point into it
	inet  *testnet.ICMPRecorder
	// nat64Names and nat64 are escapeNAT64LAN's names and addresses.
	nat64Names []string
	nat64      []netip.Addr
}

// newEscapeLAN adds escapeLANHosts to n, with their names in rebindZone,
// and starts counting ICMP in the LAN and in the fake internet.
func newEscapeLAN(t *testing.T, n *testnet.Net) *escapeLAN {
	t.Helper()
	l := &escapeLAN{inet: n.InetNS().RecordICMP(t, "")}
	for _, h := range escapeLANHosts {
		l.hosts = append(l.hosts, n.AddLANHost(h.name, h.addr))
		n.AddRecord(h.record, h.addr)
		l.names = append(l.names, h.record)
	}
	addrs := []netip.Addr{escapeNAT64LAN.v4}
	for _, f := range escapeNAT64LAN.forms {
		addrs = append(addrs, f.addr)
		n.AddRecord(f.record, f.addr)
		l.nat64Names = append(l.nat64Names, f.record)
		l.nat64 = append(l.nat64, f.addr)
	}
	l.hosts = append(l.hosts, n.AddLANHost(escapeNAT64LAN.name, addrs...))
	l.icmp = n.LANNS().RecordICMP(t, "")
	return l
}

// world is the escapeWorld of a kind on this LAN.
func (l *escapeLAN) world(n *testnet.Net, api, evil, other *testnet.Host) escapeWorld {
	return escapeWorld{net: n, api: api, evil: evil, other: other, icmp: l.inet,
		lan: l.hosts, lanICMP: l.icmp, rebind: slices.Clone(l.names),
		rebindNAT64: slices.Clone(l.nat64Names), nat64: slices.Clone(l.nat64)}
}

// routeLANFromRoot routes the LAN's addresses from the root namespace to
// n's host namespace, through the link linkRootToNet made, so that
// dockerd's proxies reach the LAN as the host's own processes would; it
// removes the routes at cleanup.
func routeLANFromRoot(t *testing.T, n *testnet.Net) {
	t.Helper()
	for _, a := range n.LANAddrs() {
		gw := rootLinkHost4.Addr()
		if a.Is6() {
			gw = rootLinkHost6.Addr()
		}
		r := &netlink.Route{Dst: ipNet(netip.PrefixFrom(a, a.BitLen())), Gw: gw.AsSlice()}
		if err := netlink.RouteAdd(r); err != nil {
			t.Fatalf("route %s to the test's LAN in the root namespace: %v", a, err)
		}
		t.Cleanup(func() { netlink.RouteDel(r) }) // gone with the link anyway
	}
}

// newEscapeNeighbour serves the fake internet's ports on the addresses of
// eth0 in the namespace at nsPath (a second sandbox on the attacker's
// bridge), under the servers' name name, and counts the ICMP reaching it.
func newEscapeNeighbour(t *testing.T, n *testnet.Net, nsPath, name string) *escapeNeighbour {
	t.Helper()
	x := testnet.OpenNetns(t, nsPath)
	nb := &escapeNeighbour{ns: x}
	err := x.Links(func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		nb.mac = l.Attrs().HardwareAddr
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || !ip.IsGlobalUnicast() {
				continue
			}
			if ip = ip.Unmap(); ip.Is4() && !nb.addr4.IsValid() {
				nb.addr4 = ip
			} else if ip.Is6() && !nb.addr6.IsValid() {
				nb.addr6 = ip
			}
		}
		return nil
	})
	if err != nil || !nb.addr4.IsValid() {
		t.Fatalf("the neighbour's eth0 in %s: %v (IPv4 %v)", nsPath, err, nb.addr4)
	}
	nb.host = n.ServeHost(t, x, name, nb.addrs()...)
	nb.icmp = x.RecordICMP(t, "")
	return nb
}

func (nb *escapeNeighbour) addrs() []netip.Addr {
	var out []netip.Addr
	for _, a := range []netip.Addr{nb.addr4, nb.addr6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// addNeighbourRecords points neighbour4 and neighbour6 in rebindZone at
// the neighbour's addresses, and adds them to w's rebinding names.
func addNeighbourRecords(n *testnet.Net, w *escapeWorld) {
	for _, a := range w.nbr.addrs() {
		name := "neighbour4." + rebindZone
		if a.Is6() {
			name = "neighbour6." + rebindZone
		}
		n.AddRecord(name, a)
		w.rebind = append(w.rebind, name)
	}
}

// openPingGroupRange lets every group open ping sockets in x, as Docker
// does in its containers.
func openPingGroupRange(t *testing.T, x *testnet.Netns) {
	t.Helper()
	if err := x.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644)
	}); err != nil {
		t.Fatalf("ping_group_range in %s: %v", x.Name(), err)
	}
}

// attackerLink is the MAC of the sandbox's eth0 and the index of its
// veth peer in the runtime's namespace (the host-side interface).
func attackerLink(nsPath string) (net.HardwareAddr, int, error) {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, 0, err
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, 0, err
	}
	defer nl.Close()
	l, err := nl.LinkByName("eth0")
	if err != nil {
		return nil, 0, err
	}
	return l.Attrs().HardwareAddr, l.Attrs().ParentIndex, nil
}

// spoofAllowed is the runtime namespace's own traffic during arp-spoof and
// ip-spoof that reaches the neighbour: what should happen.
func spoofAllowed(w escapeWorld) counters {
	if w.nbr == nil {
		return nil
	}
	where := "neighbour " + w.nbr.host.Name() + " ICMP requests"
	return counters{
		udpKey(w.nbr.host, testnet.PortUDPEcho, "bytes"): unlimited, udpKey(w.nbr.host, testnet.PortUDPEcho, "datagrams"): unlimited,
		{where, "packets"}: unlimited, {where, "bytes"}: unlimited,
	}
}

// forgetNeighbour deletes the runtime namespace's neighbour entries for
// addrs, so that an attempt starts (and the next one finds) the
// neighbour's own.
func forgetNeighbour(x *testnet.Netns, addrs []netip.Addr) {
	x.Links(func(h *netlink.Handle) error {
		neighs, err := h.NeighList(0, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, n := range neighs {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && slices.Contains(addrs, ip.Unmap()) {
				h.NeighDel(&n)
			}
		}
		return nil
	})
}

// spoofWatch measures arp-spoof and ip-spoof where they aim. While the
// probe claims the neighbour's addresses, the runtime's namespace keeps
// talking to the neighbour as a host does (UDP datagrams to its echo port
// and ICMP echo requests every 20 ms, and with tcp a connection to
// escapeSpoofPort every 100 ms); meanwhile the test polls the runtime's
// neighbour table for an entry giving a neighbour's address the attacker's
// MAC, and counts, on the attacker's host-side veth, the packets for the
// neighbour's addresses that go out towards the attacker addressed to the
// attacker's MAC: what the spoofing won it. With tcp
// it also counts the connections the attacker answered.
func spoofWatch(tcp bool) func(*testing.T, escapeWorld, *escapeSandbox) func() (counters, string) {
	return func(t *testing.T, w escapeWorld, s *escapeSandbox) func() (counters, string) {
		nb, rt := w.nbr, w.runtime
		if nb == nil || rt == nil {
			return func() (counters, string) { return nil, "no neighbour" }
		}
		mac, peer := s.mac, s.peer
		if mac == nil {
			t.Errorf("no MAC of the sandbox's eth0 in %s to watch for", s.nsPath)
			return func() (counters, string) { return nil, "" }
		}
		targets := nb.addrs()
		forgetNeighbour(rt.ns, targets)
		udpBefore := nb.host.UDPDatagrams(testnet.PortUDPEcho)
		echoBefore, _ := nb.icmp.ICMP(8)

		stop := make(chan struct{})
		var wg sync.WaitGroup
		var sentUDP, sentEcho, tcpTried, answered, answeredBytes, stolen, stolenBytes atomic.Int64
		var mu sync.Mutex
		poisoned := map[netip.Addr]bool{}
		every := func(d time.Duration, fn func()) {
			tick := time.NewTicker(d)
			defer tick.Stop()
			for {
				fn()
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}

		// The runtime's own traffic to the neighbour.
		var udp []*net.UDPConn
		echo := -1
		rt.ns.Do(func() error {
			for range targets {
				if c, err := net.ListenUDP("udp", nil); err == nil {
					udp = append(udp, c)
				}
			}
			echo, _ = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
			return nil
		})
		wg.Go(func() {
			msg := make([]byte, 64)
			msg[0] = 8
			binary.BigEndian.PutUint16(msg[4:], uint16(os.Getpid()))
			seq := uint16(0)
			every(20*time.Millisecond, func() {
				for i, c := range udp {
					if i < len(targets) {
						if _, err := c.WriteToUDPAddrPort([]byte("the runtime to its neighbour\n"), netip.AddrPortFrom(targets[i], testnet.PortUDPEcho)); err == nil {
							sentUDP.Add(1)
						}
					}
				}
				if echo >= 0 {
					seq++
					binary.BigEndian.PutUint16(msg[6:], seq)
					binary.BigEndian.PutUint16(msg[2:], 0)
					binary.BigEndian.PutUint16(msg[2:], icmpChecksum(msg))
					if unix.Sendto(echo, msg, 0, &unix.SockaddrInet4{Addr: nb.addr4.As4()}) == nil {
						sentEcho.Add(1)
					}
				}
			})
			for _, c := range udp {
				c.Close()
			}
			if echo >= 0 {
				unix.Close(echo)
			}
		})
		if tcp {
			wg.Go(func() {
				every(100*time.Millisecond, func() {
					for _, a := range targets {
						var c net.Conn
						rt.ns.Do(func() error {
							var err error
							c, err = net.DialTimeout("tcp", netip.AddrPortFrom(a, escapeSpoofPort).String(), 300*time.Millisecond)
							return err
						})
						tcpTried.Add(1)
						if c == nil {
							continue
						}
						c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
						buf := make([]byte, 512)
						n, _ := c.Read(buf)
						if bytes.HasPrefix(buf[:n], []byte(escapeSpoofBanner)) {
							answered.Add(1)
							answeredBytes.Add(int64(n))
						}
						c.Close()
					}
				})
			})
		}
		// The runtime's neighbour table.
		wg.Go(func() {
			every(25*time.Millisecond, func() {
				rt.ns.Links(func(h *netlink.Handle) error {
					neighs, err := h.NeighList(0, netlink.FAMILY_ALL)
					if err != nil {
						return err
					}
					for _, n := range neighs {
						ip, ok := netip.AddrFromSlice(n.IP)
						if ok && slices.Contains(targets, ip.Unmap()) && bytes.Equal(n.HardwareAddr, mac) {
							mu.Lock()
							poisoned[ip.Unmap()] = true
							mu.Unlock()
						}
					}
					return nil
				})
			})
		})
		// The attacker's host-side veth, from the runtime's side.
		capture, capErr := -1, ""
		if err := rt.ns.Do(func() error {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return err
			}
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: peer}); err != nil {
				unix.Close(fd)
				return err
			}
			tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
			unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
			capture = fd
			return nil
		}); err != nil {
			// The veth is gone (nothing goes through it then) or the
			// socket failed: say so in the table.
			capErr = fmt.Sprintf("; no packet socket on the attacker's veth (index %d): %v", peer, err)
			t.Logf("packet socket on the attacker's veth (index %d) in %s: %v", peer, rt.ns.Name(), err)
		}
		if capture >= 0 {
			wg.Go(func() {
				defer unix.Close(capture)
				buf := make([]byte, 65536)
				for {
					select {
					case <-stop:
						return
					default:
					}
					n, from, err := unix.Recvfrom(capture, buf, 0)
					ll, ok := from.(*unix.SockaddrLinklayer)
					if err != nil || !ok || ll.Pkttype != unix.PACKET_OUTGOING || n < 14 {
						continue
					}
					// Frames addressed to the attacker's MAC: those a
					// poisoned neighbour entry sends it. (A bridge that
					// has not learned the neighbour's MAC yet floods a
					// frame for it to every port; that is not the
					// attacker's doing, and it does not count.)
					if !bytes.Equal(buf[0:6], mac) {
						continue
					}
					if dst, size := packetDestination(buf[14:n], binary.BigEndian.Uint16(buf[12:])); slices.Contains(targets, dst) {
						stolen.Add(1)
						stolenBytes.Add(int64(size))
					}
				}
			})
		}

		return func() (counters, string) {
			close(stop)
			wg.Wait()
			forgetNeighbour(rt.ns, targets)
			c := counters{}
			for a := range poisoned {
				c[counterKey{fmt.Sprintf("the runtime's neighbour entry for %s (the attacker's MAC)", a), "entries"}] = 1
			}
			veth := "packets for the neighbour sent to the attacker's MAC"
			c[counterKey{veth, "packets"}] = int(stolen.Load())
			c[counterKey{veth, "bytes"}] = int(stolenBytes.Load())
			seen := fmt.Sprintf("the runtime's namespace sent the neighbour %d UDP datagrams and %d echo requests; the neighbour got %d and %d; %d packets for it went to the attacker's MAC",
				sentUDP.Load(), sentEcho.Load(), nb.host.UDPDatagrams(testnet.PortUDPEcho)-udpBefore, first(nb.icmp.ICMP(8))-echoBefore, stolen.Load()) + capErr
			if tcp {
				answer := fmt.Sprintf("the runtime's connections to the neighbour's tcp/%d answered by the attacker", escapeSpoofPort)
				c[counterKey{answer, "connections"}] = int(answered.Load())
				c[counterKey{answer, "bytes"}] = int(answeredBytes.Load())
				seen += fmt.Sprintf("; %d connections to tcp/%d tried, %d answered by the attacker", tcpTried.Load(), escapeSpoofPort, answered.Load())
			}
			return c, seen
		}
	}
}

// escapeSpoofBanner starts what the probe's ip-spoof listener writes.
const escapeSpoofBanner = "doorman-escape ip-spoof: not the neighbour\n"

func first(a, _ int) int { return a }

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// icmpChecksum is the Internet checksum of an ICMP message.
func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// packetDestination is the destination address and length of an IPv4 or
// IPv6 packet.
func packetDestination(p []byte, etherType uint16) (netip.Addr, int) {
	switch {
	case etherType == unix.ETH_P_IP && len(p) >= 20:
		a, _ := netip.AddrFromSlice(p[16:20])
		return a, int(binary.BigEndian.Uint16(p[2:]))
	case etherType == unix.ETH_P_IPV6 && len(p) >= 40:
		a, _ := netip.AddrFromSlice(p[24:40])
		return a, 40 + int(binary.BigEndian.Uint16(p[4:]))
	}
	return netip.Addr{}, 0
}

// raEffects are the routes a namespace learned from router advertisements
// and its addresses in escapeRAPrefix, on link (all links if "").
func raEffects(x *testnet.Netns, link string) (routes []netlink.Route, addrs []netlink.Addr) {
	x.Links(func(h *netlink.Handle) error {
		index := 0
		if link != "" {
			l, err := h.LinkByName(link)
			if err != nil {
				return err
			}
			index = l.Attrs().Index
		}
		rs, err := h.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Protocol: unix.RTPROT_RA}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if index == 0 || r.LinkIndex == index {
				routes = append(routes, r)
			}
		}
		as, err := h.AddrList(nil, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range as {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && escapeRAPrefix.Contains(ip) && (index == 0 || a.LinkIndex == index) {
				addrs = append(addrs, a)
			}
		}
		return nil
	})
	return routes, addrs
}

// forgetRAs removes what raEffects finds.
func forgetRAs(x *testnet.Netns, link string) {
	routes, addrs := raEffects(x, link)
	x.Links(func(h *netlink.Handle) error {
		for _, r := range routes {
			h.RouteDel(&r)
		}
		for _, a := range addrs {
			if l, err := h.LinkByIndex(a.LinkIndex); err == nil {
				h.AddrDel(l, &a)
			}
		}
		return nil
	})
}

// routerAdvertWatch measures router-advert where the advertisements land:
// the neighbour (did it take the attacker for a router, or an address in
// the attacker's prefix?) and the runtime's namespace, on the bridge. The
// advertisements that arrive are counted by the ICMP recorders of the
// snapshot; what they changed is counted here, then undone.
func routerAdvertWatch(t *testing.T, w escapeWorld, s *escapeSandbox) func() (counters, string) {
	if w.nbr == nil || w.runtime == nil {
		return func() (counters, string) { return nil, "no neighbour" }
	}
	places := []struct {
		name string
		ns   *testnet.Netns
		link string
	}{{"the neighbour", w.nbr.ns, ""}, {"the runtime's namespace", w.runtime.ns, w.runtime.bridge}}
	for _, p := range places {
		forgetRAs(p.ns, p.link)
	}
	return func() (counters, string) {
		c := counters{}
		var seen []string
		// The kernel acts on an advertisement as it receives it; give
		// the last one a moment.
		deadline := time.Now().Add(time.Second)
		for {
			found := false
			for _, p := range places {
				if r, a := raEffects(p.ns, p.link); len(r)+len(a) > 0 {
					found = true
				}
			}
			if found || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, p := range places {
			routes, addrs := raEffects(p.ns, p.link)
			c[counterKey{p.name + "'s routes learned from router advertisements", "routes"}] = len(routes)
			c[counterKey{p.name + "'s addresses in " + escapeRAPrefix.String(), "addresses"}] = len(addrs)
			var rs, as []string
			for _, r := range routes {
				rs = append(rs, routeString(r))
			}
			for _, a := range addrs {
				as = append(as, a.IPNet.String())
			}
			seen = append(seen, fmt.Sprintf("%s: routes [%s], addresses [%s]", p.name, strings.Join(rs, ", "), strings.Join(as, ", ")))
			forgetRAs(p.ns, p.link)
		}
		return c, strings.Join(seen, "; ")
	}
}

func routeString(r netlink.Route) string {
	dst := "default"
	if r.Dst != nil {
		dst = r.Dst.String()
	}
	if r.Gw != nil {
		return dst + " via " + r.Gw.String()
	}
	return dst
}

// frameTap is a packet socket on one interface, counting the frames from
// one MAC that reach it.
type frameTap struct {
	where string // as the counters name it
	fd    int
	// outgoing: count the frames the interface sends (a bridge port, seen
	// from the runtime's namespace), else those it receives (the
	// neighbour's eth0, from inside).
	outgoing            bool
	frames, bytes, free int // counted; and exempt (address resolution with the gateway)
	drops               int // frames the socket could not keep
}

// frameWatch counts, while an attempt runs, the frames from the
// attacker's MAC that reach the neighbour sandbox's eth0 (a packet socket
// inside the neighbour) and that leave by every other port of the bridge
// (packet sockets on the ports in the runtime's namespace), beyond what
// address resolution with the gateway needs: an ARP request or reply for
// one of the bridge's addresses, or a neighbour solicitation for one,
// each in its plain shape, is not counted. (Sandboxes on one bridge must
// not reach each other at layer 2, so 0 frames is what a sound layer
// gives; the exemption keeps a bridge without the host-side layer from
// counting what any host on a link sends.) Frames a socket could not
// keep count as arrived: they cannot be told apart.
func frameWatch(t *testing.T, w escapeWorld, s *escapeSandbox) func() (counters, string) {
	nb, rt := w.nbr, w.runtime
	if nb == nil || rt == nil {
		return func() (counters, string) { return nil, "no neighbour" }
	}
	attacker := s.mac
	if attacker == nil {
		t.Errorf("no MAC of the sandbox's eth0 in %s to count frames from", s.nsPath)
		return func() (counters, string) { return nil, "" }
	}
	gateway := map[netip.Addr]bool{}
	var ports []netlink.Link
	if err := rt.ns.Links(func(h *netlink.Handle) error {
		br, err := h.LinkByName(rt.bridge)
		if err != nil {
			return err
		}
		addrs, err := h.AddrList(br, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				gateway[ip.Unmap()] = true
			}
		}
		links, err := h.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Attrs().MasterIndex == br.Attrs().Index && l.Attrs().Index != s.peer {
				ports = append(ports, l)
			}
		}
		return nil
	}); err != nil {
		t.Errorf("the ports of %s in %s: %v", rt.bridge, rt.ns.Name(), err)
	}
	var taps []*frameTap
	open := func(x *testnet.Netns, index int, where string, outgoing bool) {
		var fd int
		err := x.Do(func() (err error) {
			fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return err
			}
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: index}); err != nil {
				unix.Close(fd)
				return err
			}
			return nil
		})
		if err != nil {
			t.Errorf("packet socket on %s: %v", where, err)
			return
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		taps = append(taps, &frameTap{where: where, fd: fd, outgoing: outgoing})
	}
	if err := nb.ns.Links(func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err == nil {
			open(nb.ns, l.Attrs().Index, "the neighbour's eth0", false)
		}
		return err
	}); err != nil {
		t.Errorf("the neighbour's eth0: %v", err)
	}
	for _, p := range ports {
		open(rt.ns, p.Attrs().Index, "bridge port "+p.Attrs().Name, true)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, tp := range taps {
		wg.Go(func() {
			buf := make([]byte, 65536)
			stopping := false
			for {
				n, from, err := unix.Recvfrom(tp.fd, buf, 0)
				if err != nil {
					if stopping {
						return // drained
					}
					select {
					case <-stop:
						stopping = true
					default:
					}
					continue
				}
				ll, ok := from.(*unix.SockaddrLinklayer)
				if !ok || n < 14 || (ll.Pkttype == unix.PACKET_OUTGOING) != tp.outgoing || !bytes.Equal(buf[6:12], attacker) {
					continue
				}
				if gatewayResolution(buf[:n], gateway) {
					tp.free++
					continue
				}
				tp.frames++
				tp.bytes += n
			}
		})
	}
	return func() (counters, string) {
		time.Sleep(100 * time.Millisecond) // frames still in the bridge
		close(stop)
		wg.Wait()
		c := counters{}
		var seen []string
		for _, tp := range taps {
			if st, err := unix.GetsockoptTpacketStats(tp.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				tp.drops = int(st.Drops)
			}
			unix.Close(tp.fd)
			where := tp.where + ": frames from the attacker's MAC"
			c[counterKey{where, "frames"}] = tp.frames + tp.drops
			c[counterKey{where, "bytes"}] = tp.bytes
			s := fmt.Sprintf("%s got %d frames (%d bytes) from the attacker's MAC", tp.where, tp.frames, tp.bytes)
			if tp.free > 0 {
				s += fmt.Sprintf(", and %d for address resolution with the gateway", tp.free)
			}
			if tp.drops > 0 {
				s += fmt.Sprintf(", and dropped %d unread", tp.drops)
			}
			seen = append(seen, s)
		}
		return c, strings.Join(seen, "; ")
	}
}

// gatewayResolution reports whether frame is address resolution with
// the gateway in its plain shape: an ARP request or reply for IPv4 over
// Ethernet (28 bytes, or padded with zeros to 46) whose target is one of
// gateway's addresses, or a neighbour solicitation (no extension header,
// hop limit 255, with at most a link-layer address option, nothing after
// it) whose target is.
func gatewayResolution(frame []byte, gateway map[netip.Addr]bool) bool {
	p := frame[14:]
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case unix.ETH_P_ARP:
		if len(p) != 28 && (len(p) != 46 || !bytes.Equal(p[28:], make([]byte, 18))) {
			return false
		}
		if !bytes.Equal(p[:6], []byte{0, 1, 8, 0, 6, 4}) {
			return false
		}
		if op := binary.BigEndian.Uint16(p[6:8]); op != 1 && op != 2 {
			return false
		}
		tpa, _ := netip.AddrFromSlice(p[24:28])
		return gateway[tpa]
	case unix.ETH_P_IPV6:
		if len(p) < 40+24 || p[6] != unix.IPPROTO_ICMPV6 || p[7] != 255 {
			return false
		}
		plen := int(binary.BigEndian.Uint16(p[4:6]))
		m := p[40:]
		if len(m) != plen || m[0] != 135 || m[1] != 0 || plen != 24 && (plen != 32 || m[24] != 1 || m[25] != 1) {
			return false
		}
		return gateway[netip.AddrFrom16([16]byte(m[8:24]))]
	}
	return false
}

// withFrames runs frameWatch beside watch (nil: none).
func withFrames(watch func(*testing.T, escapeWorld, *escapeSandbox) func() (counters, string)) func(*testing.T, escapeWorld, *escapeSandbox) func() (counters, string) {
	return func(t *testing.T, w escapeWorld, s *escapeSandbox) func() (counters, string) {
		var stopWatch func() (counters, string)
		if watch != nil {
			stopWatch = watch(t, w, s)
		}
		stopFrames := frameWatch(t, w, s)
		return func() (counters, string) {
			c, seen := stopFrames()
			if stopWatch == nil {
				return c, seen
			}
			c2, seen2 := stopWatch()
			maps.Copy(c, c2)
			return c, seen2 + "; " + seen
		}
	}
}
