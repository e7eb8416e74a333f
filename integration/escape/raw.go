package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ipv4UDP returns an IPv4 packet carrying a UDP datagram from src to dst,
// checksums included.
func ipv4UDP(src, dst netip.AddrPort, data []byte) []byte {
	b := make([]byte, 20+8+len(data))
	b[0] = 0x45 // version 4, 20-byte header
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], uint16(time.Now().UnixNano())) // identification
	b[6] = 0x40                                                      // don't fragment
	b[8] = 64                                                        // TTL
	b[9] = unix.IPPROTO_UDP
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(b[12:16], s4[:])
	copy(b[16:20], d4[:])
	binary.BigEndian.PutUint16(b[10:], checksum(b[:20], 0))
	copy(b[20:], udpDatagram(src, dst, data))
	return b
}

// udpDatagram returns a UDP header and data, with the checksum over the
// IPv4 pseudo-header of src and dst.
func udpDatagram(src, dst netip.AddrPort, data []byte) []byte {
	u := make([]byte, 8+len(data))
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], data)
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	pseudo := append(append(s4[:], d4[:]...), 0, unix.IPPROTO_UDP, byte(len(u)>>8), byte(len(u)))
	sum := checksum(u, sum16(pseudo))
	if sum == 0 {
		sum = 0xffff // 0 means "no checksum" in UDP over IPv4
	}
	binary.BigEndian.PutUint16(u[6:], sum)
	return u
}

// sum16 is the one's complement sum of b's 16-bit words, not yet folded.
func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

// checksum is the Internet checksum of b, starting from the partial sum
// initial.
func checksum(b []byte, initial uint32) uint16 {
	s := initial + sum16(b)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// sourceFor is the address the kernel would send from to reach dst (a
// connected UDP socket sends nothing).
func sourceFor(dst netip.Addr) (netip.Addr, error) {
	c, err := net.Dial("udp", netip.AddrPortFrom(dst, 9).String())
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

func tryRawIP(cfg *config) row {
	var t tally
	dst := netip.AddrPortFrom(cfg.denied4, cfg.udpPort)
	src, err := sourceFor(cfg.denied4)
	if err != nil {
		t.fail("route to "+cfg.denied4.String(), err)
		return t.row("raw-ip")
	}
	from := netip.AddrPortFrom(src, 40000+uint16(time.Now().UnixNano()%20000))
	sa := &unix.SockaddrInet4{Addr: cfg.denied4.As4()}

	// IPPROTO_RAW: the probe writes the IP header itself.
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
		t.fail("socket(AF_INET, SOCK_RAW, IPPROTO_RAW)", err)
	} else {
		pkt := ipv4UDP(from, dst, payload("raw-ip"))
		if err := unix.Sendto(fd, pkt, 0, sa); err != nil {
			t.fail("IPPROTO_RAW send to "+dst.String(), err)
		} else {
			t.wrote(len(pkt))
			t.note("IPPROTO_RAW: %d-byte IPv4/UDP packet to %s sent", len(pkt), dst)
		}
		unix.Close(fd)
	}
	// A raw UDP socket: the kernel writes the IP header, the probe the UDP one.
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP); err != nil {
		t.fail("socket(AF_INET, SOCK_RAW, IPPROTO_UDP)", err)
	} else {
		u := udpDatagram(from, dst, payload("raw-ip"))
		if err := unix.Sendto(fd, u, 0, sa); err != nil {
			t.fail("raw UDP send to "+dst.String(), err)
		} else {
			t.wrote(len(u))
			t.note("raw UDP socket: %d-byte datagram to %s sent", len(u), dst)
		}
		unix.Close(fd)
	}
	return t.row("raw-ip")
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// defaultRoute4 reads the interface and gateway of the IPv4 default route
// from /proc/net/route.
func defaultRoute4() (string, netip.Addr, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return "", netip.Addr{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[1] != "00000000" || fields[7] != "00000000" {
			continue
		}
		gw, err := strconv.ParseUint(fields[2], 16, 32)
		if err != nil || gw == 0 {
			continue
		}
		var a [4]byte
		binary.LittleEndian.PutUint32(a[:], uint32(gw))
		return fields[0], netip.AddrFrom4(a), nil
	}
	return "", netip.Addr{}, errors.New("no IPv4 default route with a gateway in /proc/net/route")
}

// neighbourMAC looks ip up in /proc/net/arp (complete entries on ifname).
func neighbourMAC(ifname string, ip netip.Addr) net.HardwareAddr {
	data, err := os.ReadFile("/proc/net/arp")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		// IP address, HW type, Flags, HW address, Mask, Device
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != ip.String() || f[5] != ifname {
			continue
		}
		flags, _ := strconv.ParseUint(f[2], 0, 32)
		if mac, err := net.ParseMAC(f[3]); err == nil && flags&0x2 != 0 {
			return mac
		}
	}
	return nil
}

// arpResolve asks for ip's MAC with an ARP request sent from ifc through an
// AF_PACKET socket, and waits up to timeout for the reply.
func arpResolve(ifc *net.Interface, src, ip netip.Addr, timeout time.Duration) (net.HardwareAddr, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return nil, fmt.Errorf("socket(AF_PACKET): %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.Index}); err != nil {
		return nil, fmt.Errorf("bind AF_PACKET to %s: %w", ifc.Name, err)
	}
	broadcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	s4, t4 := src.As4(), ip.As4()
	var frame bytes.Buffer
	frame.Write(broadcast)
	frame.Write(ifc.HardwareAddr)
	binary.Write(&frame, binary.BigEndian, []uint16{unix.ETH_P_ARP, 1, unix.ETH_P_IP})
	frame.Write([]byte{6, 4, 0, 1}) // hlen, plen, op request
	frame.Write(ifc.HardwareAddr)
	frame.Write(s4[:])
	frame.Write(make([]byte, 6))
	frame.Write(t4[:])
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.Index, Halen: 6}
	copy(to.Addr[:], broadcast)
	if err := unix.Sendto(fd, frame.Bytes(), 0, to); err != nil {
		return nil, fmt.Errorf("send ARP request: %w", err)
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf := make([]byte, 1500)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil || n < 42 {
			continue
		}
		// ethertype ARP, op reply, sender protocol address ip
		if binary.BigEndian.Uint16(buf[12:]) == unix.ETH_P_ARP && binary.BigEndian.Uint16(buf[20:]) == 2 && bytes.Equal(buf[28:32], t4[:]) {
			return net.HardwareAddr(bytes.Clone(buf[22:28])), nil
		}
	}
	return nil, fmt.Errorf("no ARP reply from %s on %s within %v", ip, ifc.Name, timeout)
}

func tryAFPacket(cfg *config) row {
	var t tally
	ifname, gw, err := defaultRoute4()
	if err != nil {
		t.fail("default route", err)
		return t.row("af-packet")
	}
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		t.fail("interface "+ifname, err)
		return t.row("af-packet")
	}
	var src netip.Addr
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			src = p.Addr()
			break
		}
	}
	if !src.IsValid() {
		t.fail("address of "+ifname, errors.New("no IPv4 address"))
		return t.row("af-packet")
	}
	gwMAC, how := neighbourMAC(ifname, gw), "from /proc/net/arp"
	if gwMAC == nil {
		if gwMAC, err = arpResolve(ifc, src, gw, cfg.timeout); err != nil {
			t.fail("gateway MAC", err)
			return t.row("af-packet")
		}
		how = "by ARP"
	}
	// A UDP socket on the frame's source port catches the echo, should the
	// frame get through. The port is outside the ephemeral range: an echo
	// that comes back leaves a conntrack entry for it, which would let a
	// later attempt's socket that happened to get the same port out as
	// a reply.
	echo, err := net.ListenUDP("udp4", &net.UDPAddr{IP: src.AsSlice(), Port: afPacketSourcePort})
	if err != nil {
		t.fail("UDP socket for the echo", err)
		return t.row("af-packet")
	}
	defer echo.Close()
	from := netip.AddrPortFrom(src, uint16(echo.LocalAddr().(*net.UDPAddr).Port))
	dst := netip.AddrPortFrom(cfg.denied4, cfg.udpPort)

	var frame bytes.Buffer
	frame.Write(gwMAC)
	frame.Write(ifc.HardwareAddr)
	binary.Write(&frame, binary.BigEndian, uint16(unix.ETH_P_IP))
	frame.Write(ipv4UDP(from, dst, payload("af-packet")))

	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.fail("socket(AF_PACKET, SOCK_RAW)", err)
		return t.row("af-packet")
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifc.Index, Halen: 6}
	copy(to.Addr[:], gwMAC)
	if err := unix.Sendto(fd, frame.Bytes(), 0, to); err != nil {
		t.fail("send frame on "+ifname, err)
		return t.row("af-packet")
	}
	t.wrote(frame.Len())
	t.note("%d-byte frame %s -> %s on %s to gateway %s at %s (MAC %s)", frame.Len(), from, dst, ifname, gw, gwMAC, how)
	echo.SetReadDeadline(time.Now().Add(cfg.timeout))
	if n, _, err := echo.ReadFrom(make([]byte, 2048)); err == nil {
		t.note("echo of %d bytes came back", n)
	} else {
		t.note("no echo (%s)", describe(err))
	}
	return t.row("af-packet")
}

// afPacketSourcePort is the AF_PACKET frame's UDP source port, above Linux's
// default ephemeral range (32768-60999).
const afPacketSourcePort = 61999

// tryIPv4Mapped reaches the denied host's IPv4 address through AF_INET6
// sockets, as ::ffff:a.b.c.d.
func tryIPv4Mapped(cfg *config) row {
	var t tally
	mapped := netip.AddrFrom16(cfg.denied4.As16())
	tv := unix.NsecToTimeval(cfg.timeout.Nanoseconds())
	socket6 := func(typ int) (int, error) {
		fd, err := unix.Socket(unix.AF_INET6, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		return fd, nil
	}
	buf := make([]byte, 2048)

	tcpDst := netip.AddrPortFrom(mapped, cfg.tcpPort)
	if fd, err := socket6(unix.SOCK_STREAM); err != nil {
		t.fail("socket(AF_INET6, SOCK_STREAM)", err)
	} else {
		if err := unix.Connect(fd, &unix.SockaddrInet6{Port: int(cfg.tcpPort), Addr: mapped.As16()}); err != nil {
			t.fail("TCP connect "+tcpDst.String(), err)
		} else if n, err := unix.Write(fd, payload("ipv4-mapped")); err != nil {
			t.fail("TCP write "+tcpDst.String(), err)
		} else {
			t.wrote(n)
			switch n, err := unix.Read(fd, buf); {
			case n > 0:
				t.note("TCP %s: reply %q", tcpDst, firstLine(buf[:n]))
			case errors.Is(err, unix.EAGAIN):
				t.note("TCP %s: sent, no reply, still open", tcpDst)
			default:
				t.fail("TCP "+tcpDst.String()+" after write", err)
			}
		}
		unix.Close(fd)
	}

	udpDst := netip.AddrPortFrom(mapped, cfg.udpPort)
	if fd, err := socket6(unix.SOCK_DGRAM); err != nil {
		t.fail("socket(AF_INET6, SOCK_DGRAM)", err)
	} else {
		data := payload("ipv4-mapped")
		if err := unix.Sendto(fd, data, 0, &unix.SockaddrInet6{Port: int(cfg.udpPort), Addr: mapped.As16()}); err != nil {
			t.fail("UDP send "+udpDst.String(), err)
		} else {
			t.wrote(len(data))
			switch n, _, err := unix.Recvfrom(fd, buf, 0); {
			case err == nil:
				t.note("UDP %s: %d bytes echoed", udpDst, n)
			case errors.Is(err, unix.EAGAIN):
				t.note("UDP %s: sent, no echo", udpDst)
			default:
				t.fail("UDP "+udpDst.String()+" after send", err)
			}
		}
		unix.Close(fd)
	}
	return t.row("ipv4-mapped")
}
