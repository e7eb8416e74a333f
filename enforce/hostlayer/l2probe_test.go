package hostlayer

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// This file holds the probes of a workload that tunnels data through ICMP
// or impersonates its neighbours: ICMP queries from raw and ping sockets,
// and hand-made ARP and IPv6 frames written to a packet socket, which
// bypass every IP hook of the workload's own namespace.

// newMarker returns a marker unique to one probe, to find it among
// everything a receiver sees.
func newMarker(what string) []byte {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Appendf(nil, "dm-%s-%x", what, b)
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// icmpSniffer receives a copy of every ICMP (or ICMPv6) message that
// reaches a namespace, through a raw socket.
type icmpSniffer struct{ c *icmp.PacketConn }

func sniffICMP(t *testing.T, n *testNS, v6 bool) *icmpSniffer {
	t.Helper()
	var c *icmp.PacketConn
	in(t, n, func() (err error) {
		if v6 {
			c, err = icmp.ListenPacket("ip6:ipv6-icmp", "::")
		} else {
			c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		}
		return err
	})
	t.Cleanup(func() { c.Close() })
	return &icmpSniffer{c: c}
}

// saw reports whether a message containing marker arrives within d.
func (s *icmpSniffer) saw(marker []byte, d time.Duration) bool {
	_ = s.c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 2048)
	for {
		n, _, err := s.c.ReadFrom(buf)
		if err != nil {
			return false
		}
		if bytes.Contains(buf[:n], marker) {
			return true
		}
	}
}

// icmpProbe is one ICMP message a workload might tunnel data in.
type icmpProbe struct {
	name string
	typ  icmp.Type
	body []byte // everything after the type, code and checksum
}

// tunnelProbes are the ICMP queries that carry data, each with marker in
// it: echo with a 1000-byte payload, timestamp, information and address
// mask requests; ICMPv6 echo.
func tunnelProbes(marker []byte) (v4, v6 []icmpProbe) {
	idSeq := []byte{0x12, 0x34, 0, 1}
	big := append(bytes.Repeat([]byte{'x'}, 1000-len(marker)), marker...)
	v4 = []icmpProbe{
		{"echo with 1000 bytes", ipv4.ICMPTypeEcho, concat(idSeq, big)},
		{"timestamp request", ipv4.ICMPTypeTimestamp, concat(idSeq, make([]byte, 12), marker)},
		{"information request", ipv4.ICMPType(15), concat(idSeq, marker)},
		{"address mask request", ipv4.ICMPType(17), concat(idSeq, make([]byte, 4), marker)},
	}
	v6 = []icmpProbe{{"icmpv6 echo with 1000 bytes", ipv6.ICMPTypeEchoRequest, concat(idSeq, big)}}
	return v4, v6
}

// sendICMP sends one ICMP(v6) message from inside n to dst over a raw
// socket.
func sendICMP(t *testing.T, n *testNS, dst netip.Addr, typ icmp.Type, body []byte) {
	t.Helper()
	msg, err := (&icmp.Message{Type: typ, Body: &icmp.RawBody{Data: body}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	in(t, n, func() error {
		network, laddr := "ip4:icmp", "0.0.0.0"
		if dst.Is6() {
			network, laddr = "ip6:ipv6-icmp", "::"
		}
		c, err := icmp.ListenPacket(network, laddr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()})
		return err
	})
}

// pingSized sends an echo request with size data bytes (marker at the
// end) and identifier id from inside n to dst over a raw socket, and waits
// up to timeout for its reply.
func pingSized(n *testNS, dst netip.Addr, id, size int, marker []byte, timeout time.Duration) error {
	var c *icmp.PacketConn
	err := n.Do(func(ns.NetNS) (err error) {
		if dst.Is4() {
			c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		} else {
			c, err = icmp.ListenPacket("ip6:ipv6-icmp", "::")
		}
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	var typ icmp.Type = ipv4.ICMPTypeEcho
	proto := 1
	if dst.Is6() {
		typ, proto = ipv6.ICMPTypeEchoRequest, 58
	}
	data := append(bytes.Repeat([]byte{'p'}, max(0, size-len(marker))), marker...)
	req, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: data}}).Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(req, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 2048)
	for {
		m, _, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		msg, err := icmp.ParseMessage(proto, buf[:m])
		if err != nil {
			continue
		}
		if e, ok := msg.Body.(*icmp.Echo); ok && e.ID == id && bytes.Contains(e.Data, marker) &&
			(msg.Type == ipv4.ICMPTypeEchoReply || msg.Type == ipv6.ICMPTypeEchoReply) {
			return nil
		}
	}
}

// errNoCaps is returned by pingUnprivileged when the thread it dropped
// its capabilities on could still open a raw socket.
var errNoCaps = errors.New("raw socket opened without capabilities")

// pingUnprivileged sends an echo request with marker from inside n to dst
// through a ping socket (SOCK_DGRAM, IPPROTO_ICMP or IPPROTO_ICMPV6), on
// a thread that has given up every capability, as an unprivileged
// workload would where ping_group_range admits it, and waits up to timeout
// for the reply. The thread is not given back to the runtime: it ends with
// the goroutine.
func pingUnprivileged(n *testNS, dst netip.Addr, marker []byte, timeout time.Duration) error {
	res := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		res <- func() error {
			f, err := os.Open(n.path)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns: %w", err)
			}
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var none [2]unix.CapUserData
			if err := unix.Capset(&hdr, &none[0]); err != nil {
				return fmt.Errorf("capset: %w", err)
			}
			domain, proto, reqType, repType := unix.AF_INET6, unix.IPPROTO_ICMPV6, byte(128), byte(129)
			var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: dst.As16()}
			if dst.Is4() {
				domain, proto, reqType, repType = unix.AF_INET, unix.IPPROTO_ICMP, 8, 0
				sa = &unix.SockaddrInet4{Addr: dst.As4()}
			}
			if fd, err := unix.Socket(domain, unix.SOCK_RAW, proto); err == nil {
				unix.Close(fd)
				return errNoCaps
			}
			fd, err := unix.Socket(domain, unix.SOCK_DGRAM, proto)
			if err != nil {
				return fmt.Errorf("ping socket: %w", err)
			}
			defer unix.Close(fd)
			// The kernel fills in the identifier and the checksum.
			if err := unix.Sendto(fd, concat([]byte{reqType, 0, 0, 0, 0, 0, 0, 1}, marker), 0, sa); err != nil {
				return err
			}
			tv := unix.NsecToTimeval(timeout.Nanoseconds())
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				return err
			}
			buf := make([]byte, 2048)
			for {
				m, _, err := unix.Recvfrom(fd, buf, 0)
				if err != nil {
					return err
				}
				if m > 8 && buf[0] == repType && bytes.Contains(buf[8:m], marker) {
					return nil
				}
			}
		}()
	}()
	return <-res
}

// icmpErrorAbout builds the body of an IPv4 ICMP error (after type, code
// and checksum) quoting a UDP datagram from src to dst, with marker after
// the quoted headers: what a workload sends to relate its data to a flow
// conntrack knows.
func icmpErrorAbout(src, dst netip.AddrPort, marker []byte) []byte {
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(marker)))
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(marker)))
	ip[8], ip[9] = 64, unix.IPPROTO_UDP
	copy(ip[12:16], src.Addr().AsSlice())
	copy(ip[16:20], dst.Addr().AsSlice())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	return concat(make([]byte, 4), ip, udp, marker) // unused (or the gateway of a redirect)
}

// rawFrame is an Ethernet frame of any type, written as is.
type rawFrame struct {
	dstMAC, srcMAC net.HardwareAddr
	etherType      uint16
	payload        []byte
}

func (f rawFrame) bytes() []byte {
	eth := concat(f.dstMAC, f.srcMAC)
	eth = binary.BigEndian.AppendUint16(eth, f.etherType)
	return append(eth, f.payload...)
}

// sendRawFrame writes f on dev of n through a packet socket.
func sendRawFrame(t *testing.T, n *testNS, dev string, f rawFrame) {
	t.Helper()
	ifc := n.link(t, dev)
	in(t, n, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
		copy(sa.Addr[:], f.dstMAC)
		if err := unix.Sendto(fd, f.bytes(), 0, sa); err != nil {
			return fmt.Errorf("send frame on %s: %w", dev, err)
		}
		return nil
	})
}

// ARP operations.
const (
	arpRequest = 1
	arpReply   = 2
)

// arpFrame is an ARP packet for IPv4 over Ethernet from srcMAC to dstMAC,
// whose sender is sha/spa and target tha/tpa.
func arpFrame(dstMAC, srcMAC net.HardwareAddr, op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) rawFrame {
	p := []byte{0, 1, 8, 0, 6, 4}
	p = binary.BigEndian.AppendUint16(p, op)
	p = concat(p, sha, spa.AsSlice(), tha, tpa.AsSlice())
	return rawFrame{dstMAC: dstMAC, srcMAC: srcMAC, etherType: unix.ETH_P_ARP, payload: p}
}

// broadcastMAC is the Ethernet broadcast address.
var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// icmpv6Frame is an IPv6 packet with hop limit 255 carrying an ICMPv6
// message of type typ and body (after type, code and checksum), with its
// checksum computed, from srcMAC/src to dstMAC/dst: what neighbour
// discovery sends.
func icmpv6Frame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, typ byte, body []byte) rawFrame {
	msg := concat([]byte{typ, 0, 0, 0}, body)
	s, d := src.As16(), dst.As16()
	pseudo := concat(s[:], d[:], binary.BigEndian.AppendUint32(nil, uint32(len(msg))), []byte{0, 0, 0, unix.IPPROTO_ICMPV6})
	binary.BigEndian.PutUint16(msg[2:], ipChecksumPadded(concat(pseudo, msg)))
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(msg)))
	ip[6], ip[7] = unix.IPPROTO_ICMPV6, 255
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	return rawFrame{dstMAC: dstMAC, srcMAC: srcMAC, etherType: unix.ETH_P_IPV6, payload: concat(ip, msg)}
}

// ipChecksumPadded is the Internet checksum of b, padded to an even
// length.
func ipChecksumPadded(b []byte) uint16 {
	if len(b)%2 == 1 {
		b = append(b[:len(b):len(b)], 0)
	}
	return ipChecksum(b)
}

// routerAdvert is the body of an ICMPv6 router advertisement that makes a
// host which accepts it take a default route and an address in prefix:
// router lifetime 1800 s, one prefix information option with the on-link
// and autonomous flags.
func routerAdvert(prefix netip.Prefix) []byte {
	b := []byte{64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0} // hop limit, flags, lifetime 1800, reachable, retrans
	pio := []byte{3, 4, byte(prefix.Bits()), 0xc0, 0, 1, 0x51, 0x80, 0, 0, 0x38, 0x40, 0, 0, 0, 0}
	a := prefix.Addr().As16()
	return concat(b, pio, a[:])
}

// neighbourAdvert is the body of an unsolicited ICMPv6 neighbour
// advertisement with the override flag for target at mac.
func neighbourAdvert(target netip.Addr, mac net.HardwareAddr) []byte {
	a := target.As16()
	return concat([]byte{0x20, 0, 0, 0}, a[:], []byte{2, 1}, mac) // flags: override; target link-layer address option
}

// allNodes is ff02::1 and its Ethernet multicast address.
var (
	allNodes    = netip.MustParseAddr("ff02::1")
	allNodesMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
)

// linkLocal is the EUI-64 link-local address of mac, which the kernel
// gives an interface with that MAC.
func linkLocal(mac net.HardwareAddr) netip.Addr { return eui64LinkLocal(mac) }

// neighMAC returns the link-layer address n's neighbour table holds for
// addr on dev, or "" if it holds none.
func neighMAC(t *testing.T, n *testNS, dev string, addr netip.Addr) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", n.name, "neigh", "show", "to", addr.String(), "dev", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("ip neigh: %v: %s", err, out)
	}
	f := strings.Fields(string(out))
	for i := range f {
		if f[i] == "lladdr" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}

// hasAddrIn reports whether dev in n has an address in prefix.
func (n *testNS) hasAddrIn(t *testing.T, dev string, prefix netip.Prefix) bool {
	t.Helper()
	var addrs []net.Addr
	in(t, n, func() (err error) {
		ifc, err := net.InterfaceByName(dev)
		if err == nil {
			addrs, err = ifc.Addrs()
		}
		return err
	})
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && prefix.Contains(ip.Unmap()) {
				return true
			}
		}
	}
	return false
}

// routesVia returns the IPv6 routes of n that go through gw, as ip prints
// them.
func routesVia(t *testing.T, n *testNS, gw netip.Addr) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", n.name, "-6", "route", "show", "via", gw.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// eventually reports whether f becomes true within mustWork.
func eventually(f func() bool) bool {
	deadline := time.Now().Add(mustWork)
	for !f() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// warmUp has every sandbox of the lab reach inet over both families once
// before any layer is applied, so that their neighbour caches are filled:
// the first IPv6 packet to a new destination can get lost on the way even
// without the layer, and a probe that must arrive should not be that one.
func (l *lab) warmUp(t *testing.T) {
	t.Helper()
	for _, n := range []*testNS{l.a, l.b, l.c} {
		for _, dst := range []string{inet4, inet6} {
			var err error
			for range 3 {
				if err = pingSized(n, netip.MustParseAddr(dst), 1, 8, newMarker("warm"), mustWork); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("%s cannot reach %s without a layer: %v", n.name, dst, err)
			}
		}
	}
}
