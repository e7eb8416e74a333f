package hostlayer

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Probe timeouts. The layer drops, so a probe that must fail times out:
// mustFail is how long it is given (a working probe between namespaces
// takes well under a millisecond), quiet how long a listener must then
// stay silent.
const (
	mustWork = 2 * time.Second
	mustFail = 300 * time.Millisecond
	quiet    = 100 * time.Millisecond
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and nftables rules")
	}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func hostPort(addr string, port int) string {
	return netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(port)).String()
}

func network(proto string, a netip.AddrPort) string {
	if a.Addr().Is4() {
		return proto + "4"
	}
	return proto + "6"
}

// in runs f with the calling thread in namespace n: sockets f creates stay
// in n.
func in(t testing.TB, n *testNS, f func() error) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatalf("in %s: %v", n.name, err)
	}
}

func listenTCP(t testing.TB, n *testNS, addr string) *net.TCPListener {
	t.Helper()
	var l net.Listener
	in(t, n, func() (err error) { l, err = net.Listen(network("tcp", ap(addr)), addr); return err })
	t.Cleanup(func() { l.Close() })
	return l.(*net.TCPListener)
}

func listenUDP(t testing.TB, n *testNS, addr string) *net.UDPConn {
	t.Helper()
	var c net.PacketConn
	in(t, n, func() (err error) { c, err = net.ListenPacket(network("udp", ap(addr)), addr); return err })
	t.Cleanup(func() { c.Close() })
	return c.(*net.UDPConn)
}

// dialTCP connects from inside n, from local address from if not "".
func dialTCP(n *testNS, from, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func(ns.NetNS) (err error) {
		d := net.Dialer{Timeout: timeout}
		if from != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		c, err = d.Dial(network("tcp", ap(addr)), addr)
		return err
	})
	return c, err
}

// server is a TCP server that greets every connection with "hello from
// NAME" and counts them.
type server struct {
	addr     string
	accepted atomic.Int64
}

func serveTCP(t testing.TB, n *testNS, addr, name string) *server {
	t.Helper()
	l := listenTCP(t, n, addr)
	s := &server{addr: addr}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			_, _ = c.Write([]byte("hello from " + name))
			c.Close()
		}
	}()
	return s
}

// expectTCPWorks dials addr from n and reads the greeting of its server.
func expectTCPWorks(t *testing.T, n *testNS, addr, want string) {
	t.Helper()
	c, err := dialTCP(n, "", addr, mustWork)
	if err != nil {
		t.Errorf("tcp from %s to %s: %v", n.name, addr, err)
		return
	}
	defer c.Close()
	if got, err := readGreeting(c); got != "hello from "+want {
		t.Errorf("tcp from %s to %s: read %q (%v), want the greeting of %s", n.name, addr, got, err, want)
	}
}

// expectTCPBlocked dials srv from n (from local address from, if not "")
// and fails if the connection is made or srv sees it.
func expectTCPBlocked(t *testing.T, n *testNS, from string, srv *server) {
	t.Helper()
	before := srv.accepted.Load()
	if c, err := dialTCP(n, from, srv.addr, mustFail); err == nil {
		c.Close()
		t.Errorf("tcp from %s to %s: connected, want it dropped", n.name, srv.addr)
	}
	time.Sleep(quiet)
	if got := srv.accepted.Load() - before; got != 0 {
		t.Errorf("tcp server %s accepted %d connections from %s", srv.addr, got, n.name)
	}
}

// udpExchange sends payload from inside n to addr and waits up to timeout
// for a reply.
func udpExchange(n *testNS, addr string, payload []byte, timeout time.Duration) ([]byte, error) {
	var c net.Conn
	err := n.Do(func(ns.NetNS) (err error) {
		c, err = net.Dial(network("udp", ap(addr)), addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 512)
	m, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:m], nil
}

func expectUDPWorks(t *testing.T, n *testNS, addr string) {
	t.Helper()
	reply, err := udpExchange(n, addr, []byte("query"), mustWork)
	if err != nil || string(reply) != "re:query" {
		t.Errorf("udp from %s to %s: reply %q, %v", n.name, addr, reply, err)
	}
}

// expectUDPBlocked sends a datagram from n to the UDP server l and fails
// if l receives it.
func expectUDPBlocked(t *testing.T, n *testNS, l *net.UDPConn) {
	t.Helper()
	addr := l.LocalAddr().String()
	if reply, err := udpExchange(n, addr, []byte("leak"), mustFail); err == nil {
		t.Errorf("udp from %s to %s: reply %q, want the datagram dropped", n.name, addr, reply)
	}
	expectNoDatagram(t, l, "udp server "+addr)
}

// expectNoDatagram fails if c has received a datagram.
func expectNoDatagram(t *testing.T, c *net.UDPConn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(quiet))
	buf := make([]byte, 2048)
	if n, from, err := c.ReadFrom(buf); err == nil {
		t.Errorf("%s received %q from %s", what, buf[:n], from)
	}
}

// expectDatagram fails unless c receives a datagram holding payload.
func expectDatagram(t *testing.T, c *net.UDPConn, payload []byte, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(mustWork))
	buf := make([]byte, 2048)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			t.Errorf("%s: nothing received: %v", what, err)
			return
		}
		if bytes.Equal(buf[:n], payload) {
			return
		}
	}
}

// echoUDP answers every datagram on c with "re:" + its payload until c is
// closed.
func echoUDP(c *net.UDPConn) {
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo(append([]byte("re:"), buf[:n]...), from)
		}
	}()
}

func readGreeting(c net.Conn) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(mustWork))
	buf := make([]byte, 128)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// ping sends one ICMP(v6) echo request from inside n to dst over a raw
// socket and waits up to timeout for the reply.
func ping(n *testNS, dst string, timeout time.Duration) error {
	a := netip.MustParseAddr(dst)
	var c *icmp.PacketConn
	err := n.Do(func(ns.NetNS) (err error) {
		if a.Is4() {
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
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := int(binary.BigEndian.Uint16(idb[:]))
	var typ icmp.Type = ipv4.ICMPTypeEcho
	proto := 1
	if a.Is6() {
		typ, proto = ipv6.ICMPTypeEchoRequest, 58
	}
	req, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("doorman")}}).Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(req, &net.IPAddr{IP: a.AsSlice()}); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1500)
	for {
		m, _, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		msg, err := icmp.ParseMessage(proto, buf[:m])
		if err != nil {
			continue
		}
		if msg.Type == ipv4.ICMPTypeEchoReply || msg.Type == ipv6.ICMPTypeEchoReply {
			if e, ok := msg.Body.(*icmp.Echo); ok && e.ID == id {
				return nil
			}
		}
	}
}

// sendND sends from n an ICMPv6 neighbour solicitation with hop limit 255
// to dst over a raw socket, with marker after the target address: a
// message that neighbour discovery lets through, aimed off the link.
func sendND(t *testing.T, n *testNS, dst, marker string) {
	t.Helper()
	in(t, n, func() error {
		c, err := net.ListenPacket("ip6:ipv6-icmp", "::")
		if err != nil {
			return err
		}
		defer c.Close()
		p := ipv6.NewPacketConn(c)
		if err := p.SetHopLimit(255); err != nil {
			return err
		}
		body := append(make([]byte, 4+16), marker...) // reserved, target, then the payload
		msg, err := (&icmp.Message{Type: ipv6.ICMPTypeNeighborSolicitation, Body: &icmp.RawBody{Data: body}}).Marshal(nil)
		if err != nil {
			return err
		}
		_, err = c.WriteTo(msg, &net.IPAddr{IP: net.ParseIP(dst)})
		return err
	})
}

// icmpv6Sniffer receives every ICMPv6 message that reaches n.
type icmpv6Sniffer struct{ c net.PacketConn }

func sniffICMPv6(t *testing.T, n *testNS) *icmpv6Sniffer {
	t.Helper()
	var c net.PacketConn
	in(t, n, func() (err error) { c, err = net.ListenPacket("ip6:ipv6-icmp", "::"); return err })
	t.Cleanup(func() { c.Close() })
	return &icmpv6Sniffer{c: c}
}

// saw reports whether a message containing marker arrives within d.
func (s *icmpv6Sniffer) saw(marker string, d time.Duration) bool {
	_ = s.c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 1500)
	for {
		n, _, err := s.c.ReadFrom(buf)
		if err != nil {
			return false
		}
		if bytes.Contains(buf[:n], []byte(marker)) {
			return true
		}
	}
}

// frame is a hand-built Ethernet frame carrying IPv4 and UDP, optionally
// with an 802.1Q tag: what a workload holding CAP_NET_RAW can write with a
// packet socket, bypassing every IP hook of its own namespace.
type frame struct {
	dstMAC, srcMAC net.HardwareAddr
	vlan           uint16 // 0: untagged
	src, dst       netip.Addr
	dport          uint16
	payload        []byte
}

func (f frame) bytes() []byte {
	udp := make([]byte, 8+len(f.payload))
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], f.dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], f.payload) // checksum 0: none, which IPv4 allows

	ip := make([]byte, 20, 20+len(udp))
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	ip[8], ip[9] = 64, unix.IPPROTO_UDP
	copy(ip[12:16], f.src.AsSlice())
	copy(ip[16:20], f.dst.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	ip = append(ip, udp...)

	eth := append(append([]byte{}, f.dstMAC...), f.srcMAC...)
	if f.vlan != 0 {
		eth = binary.BigEndian.AppendUint16(eth, unix.ETH_P_8021Q)
		eth = binary.BigEndian.AppendUint16(eth, f.vlan)
	}
	eth = binary.BigEndian.AppendUint16(eth, unix.ETH_P_IP)
	return append(eth, ip...)
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// sendFrame writes f on dev of n through a packet socket.
func sendFrame(t *testing.T, n *testNS, dev string, f frame) {
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

// frameSniffer reads every frame arriving on dev of n, whatever its type,
// through a packet socket, the way an accomplice would.
type frameSniffer struct{ fd int }

func sniffFrames(t *testing.T, n *testNS, dev string) *frameSniffer {
	t.Helper()
	ifc := n.link(t, dev)
	var fd int
	in(t, n, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index})
	})
	t.Cleanup(func() { unix.Close(fd) })
	return &frameSniffer{fd: fd}
}

// saw reports whether a frame containing marker arrives within d.
func (s *frameSniffer) saw(marker []byte, d time.Duration) bool {
	deadline := time.Now().Add(d)
	buf := make([]byte, 4096)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		_ = unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return false
		}
		if bytes.Contains(buf[:n], marker) {
			return true
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
