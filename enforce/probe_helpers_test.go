package enforce

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Probe timeouts. A probe that must fail should fail at once with the
// error of a rejection (refused, unreachable, prohibited); a dropped probe
// would instead time out after mustFail with no such error. immediate
// bounds how long a rejection may take on a busy 2-core machine.
const (
	mustWork  = 2 * time.Second
	mustFail  = time.Second
	immediate = mustFail
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and
// IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h): both 80.
const soOriginalDst = 80

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and nftables rules")
	}
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

func network(proto string, a netip.AddrPort) string {
	if a.Addr().Is4() {
		return proto + "4"
	}
	return proto + "6"
}

// in runs f with the calling thread in namespace n: sockets f creates stay
// in n.
func in(t *testing.T, n *testNS, f func() error) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatalf("in %s: %v", n.name, err)
	}
}

func listenTCP(t *testing.T, n *testNS, addr string) *net.TCPListener {
	t.Helper()
	a := ap(addr)
	var l net.Listener
	in(t, n, func() (err error) { l, err = net.Listen(network("tcp", a), addr); return err })
	t.Cleanup(func() { l.Close() })
	return l.(*net.TCPListener)
}

func listenUDP(t *testing.T, n *testNS, addr string) *net.UDPConn {
	t.Helper()
	a := ap(addr)
	var c net.PacketConn
	in(t, n, func() (err error) { c, err = net.ListenPacket(network("udp", a), addr); return err })
	t.Cleanup(func() { c.Close() })
	return c.(*net.UDPConn)
}

func port(l net.Listener) uint16 { return uint16(l.Addr().(*net.TCPAddr).Port) }

// dialTCP connects from inside n.
func dialTCP(n *testNS, addr string, timeout time.Duration) (*net.TCPConn, error) {
	var c net.Conn
	err := n.Do(func(ns.NetNS) (err error) {
		d := net.Dialer{Timeout: timeout}
		c, err = d.Dial(network("tcp", ap(addr)), addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// acceptWithin accepts one connection or fails after d.
func acceptWithin(l *net.TCPListener, d time.Duration) (*net.TCPConn, error) {
	_ = l.SetDeadline(time.Now().Add(d))
	defer l.SetDeadline(time.Time{})
	return l.AcceptTCP()
}

// expectNoConn fails if l has a pending connection.
func expectNoConn(t *testing.T, l *net.TCPListener, what string) {
	t.Helper()
	if c, err := acceptWithin(l, 100*time.Millisecond); err == nil {
		c.Close()
		t.Errorf("%s accepted a connection from %s", what, c.RemoteAddr())
	}
}

// expectNoDatagram fails if c has received a datagram.
func expectNoDatagram(t *testing.T, c *net.UDPConn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 512)
	if n, from, err := c.ReadFrom(buf); err == nil {
		t.Errorf("%s received %q from %s", what, buf[:n], from)
	}
}

// originalDst reads SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6)
// from an accepted, redirected connection.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		getsockopt := func(level int, p unsafe.Pointer, size uint32) error {
			_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
				uintptr(p), uintptr(unsafe.Pointer(&size)), 0)
			if e != 0 {
				return e
			}
			return nil
		}
		if c.LocalAddr().(*net.TCPAddr).IP.To4() != nil {
			var sa unix.RawSockaddrInet4
			serr = getsockopt(unix.SOL_IP, unsafe.Pointer(&sa), uint32(unsafe.Sizeof(sa)))
			port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
			out = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port)
		} else {
			var sa unix.RawSockaddrInet6
			serr = getsockopt(unix.SOL_IPV6, unsafe.Pointer(&sa), uint32(unsafe.Sizeof(sa)))
			port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
			out = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port)
		}
	})
	if err == nil {
		err = serr
	}
	return out, err
}

// udpExchange sends payload from inside n to addr over a connected UDP
// socket and waits up to timeout for a reply. A rejected datagram fails
// the send (EPERM) or the receive (the ICMP error).
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

// serveTCP answers on every connection of l with "hello from NAME" and
// closes it, until l is closed.
func serveTCP(l *net.TCPListener, name string) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello from " + name))
			c.Close()
		}
	}()
}

// readGreeting reads what serveTCP wrote.
func readGreeting(c net.Conn) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(mustWork))
	buf := make([]byte, 128)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// ping sends one ICMP(v6) echo request from inside n to dst over a raw
// socket and waits up to timeout for the reply.
func ping(n *testNS, dst netip.Addr, timeout time.Duration) error {
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

	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := int(binary.BigEndian.Uint16(idb[:]))
	var typ icmp.Type = ipv4.ICMPTypeEcho
	proto := 1
	if dst.Is6() {
		typ, proto = ipv6.ICMPTypeEchoRequest, 58
	}
	req, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("doorman")}}).Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(req, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
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
		switch msg.Type {
		case ipv4.ICMPTypeEchoReply, ipv6.ICMPTypeEchoReply:
			if e, ok := msg.Body.(*icmp.Echo); ok && e.ID == id {
				return nil
			}
		case ipv4.ICMPTypeDestinationUnreachable, ipv6.ICMPTypeDestinationUnreachable:
			return fmt.Errorf("destination unreachable (code %d)", msg.Code)
		}
	}
}

// isRejection reports whether err is what a client sees when the ruleset
// rejects its packet: a reset (ECONNREFUSED), the ICMP admin-prohibited
// error (EHOSTUNREACH for IPv4, EACCES for IPv6), or EPERM from the send
// itself, since a rejected local packet is also dropped.
func isRejection(err error) bool {
	for _, e := range []syscall.Errno{unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.EACCES, unix.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// expectRejected fails unless op fails with a rejection within immediate.
func expectRejected(t *testing.T, what string, op func() error) {
	t.Helper()
	start := time.Now()
	err := op()
	took := time.Since(start)
	switch {
	case err == nil:
		t.Errorf("%s: succeeded, want it rejected", what)
	case !isRejection(err):
		t.Errorf("%s: failed with %v after %v, want a rejection (refused/unreachable/prohibited)", what, err, took.Round(time.Millisecond))
	case took > immediate:
		t.Errorf("%s: rejected only after %v (%v), want at once", what, took.Round(time.Millisecond), err)
	}
}
