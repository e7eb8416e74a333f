package enforce

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// This file holds the ICMP probes: what a workload holding CAP_NET_RAW
// sends to tunnel data out through ICMP (ptunnel-ng, icmptunnel, hans),
// or to reconfigure its neighbours, and what an unprivileged one sends
// through a ping socket.

// quiet is how long a receiver must stay silent after a probe that must
// not arrive (a working probe between namespaces takes well under a
// millisecond).
const quiet = 200 * time.Millisecond

// newMarker returns a marker unique to one probe, to find it among
// everything a receiver sees.
func newMarker(what string) []byte {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Appendf(nil, "dm-%s-%x", what, b)
}

// icmpSniffer receives every ICMP (or ICMPv6) message that reaches a
// namespace, through a raw socket: a copy of each, whatever the kernel
// then does with it.
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

// tunnelProbes are the ICMP queries that carry data: echo with a 1000-byte
// payload, timestamp, information and address mask requests, each with
// marker in it, and ICMPv6 echo.
func tunnelProbes(marker []byte) (v4, v6 []icmpProbe) {
	idSeq := []byte{0x12, 0x34, 0, 1}
	big := append(bytes.Repeat([]byte{'x'}, 1000-len(marker)), marker...)
	v4 = []icmpProbe{
		{"echo with 1000 bytes", ipv4.ICMPTypeEcho, append(idSeq, big...)},
		{"timestamp request", ipv4.ICMPTypeTimestamp, concat(idSeq, make([]byte, 12), marker)},
		{"information request", ipv4.ICMPType(15), concat(idSeq, marker)},
		{"address mask request", ipv4.ICMPType(17), concat(idSeq, make([]byte, 4), marker)},
	}
	v6 = []icmpProbe{{"icmpv6 echo with 1000 bytes", ipv6.ICMPTypeEchoRequest, append(idSeq, big...)}}
	return v4, v6
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// sendICMP sends one ICMP(v6) message from inside n to dst over a raw
// socket and returns the error of the send (EPERM when the sandbox's own
// ruleset rejects it).
func sendICMP(t *testing.T, n *testNS, dst netip.Addr, typ icmp.Type, body []byte) error {
	t.Helper()
	msg, err := (&icmp.Message{Type: typ, Body: &icmp.RawBody{Data: body}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	var c *icmp.PacketConn
	in(t, n, func() (err error) {
		if dst.Is4() {
			c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		} else {
			c, err = icmp.ListenPacket("ip6:ipv6-icmp", "::")
		}
		return err
	})
	defer c.Close()
	_, err = c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()})
	return err
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
// for the reply. The send error is returned as is. The thread is not given
// back to the runtime: it ends with the goroutine.
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
			req := append([]byte{reqType, 0, 0, 0, 0, 0, 0, 1}, marker...)
			if err := unix.Sendto(fd, req, 0, sa); err != nil {
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

// openPingGroups lets every group use ping sockets in n, as Docker does in
// its containers (net.ipv4.ping_group_range, which covers ICMPv6 too).
func openPingGroups(t *testing.T, n *testNS) {
	t.Helper()
	n.sysctl(t, "net.ipv4.ping_group_range", "0 2147483647")
}

// icmpErrorAbout builds the body of an ICMP error of type typ (after type,
// code and checksum) quoting a UDP datagram from src to dst, with marker
// after the quoted headers: what a workload sends to relate its data to a
// flow conntrack knows.
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

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// routerAdvert is the body of an ICMPv6 router advertisement (after type,
// code and checksum) that makes a host which accepts it a default router
// and gives it an address in prefix: router lifetime 1800 s, one prefix
// information option with the on-link and autonomous flags.
func routerAdvert(prefix netip.Prefix) []byte {
	b := []byte{64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0} // hop limit, flags, lifetime 1800, reachable, retrans
	pio := []byte{3, 4, byte(prefix.Bits()), 0xc0, 0, 1, 0x51, 0x80, 0, 0, 0x38, 0x40, 0, 0, 0, 0}
	a := prefix.Addr().As16()
	return concat(b, pio, a[:])
}

// sendRouterAdvert sends body as a router advertisement from src (a
// link-local address of dev in n) to all nodes on dev, with hop limit 255,
// over a raw socket, and returns the error of the send.
func sendRouterAdvert(t *testing.T, n *testNS, dev string, src netip.Addr, body []byte) error {
	t.Helper()
	var c net.PacketConn
	in(t, n, func() (err error) {
		c, err = net.ListenPacket("ip6:ipv6-icmp", src.WithZone(dev).String())
		return err
	})
	defer c.Close()
	p := ipv6.NewPacketConn(c)
	ifc := n.link(t, dev)
	if err := p.SetMulticastInterface(ifc); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMulticastHopLimit(255); err != nil {
		t.Fatal(err)
	}
	msg, err := (&icmp.Message{Type: ipv6.ICMPTypeRouterAdvertisement, Body: &icmp.RawBody{Data: body}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.WriteTo(msg, &net.IPAddr{IP: net.ParseIP("ff02::1"), Zone: dev})
	return err
}

// link returns interface dev of the namespace.
func (n *testNS) link(t *testing.T, dev string) *net.Interface {
	t.Helper()
	var ifc *net.Interface
	in(t, n, func() (err error) { ifc, err = net.InterfaceByName(dev); return err })
	return ifc
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
