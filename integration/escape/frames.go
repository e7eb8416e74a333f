package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// The layer-2 attempts: frames written to a packet socket that carry the
// workload's data to whoever receives them on the bridge. Address
// resolution is broadcast and multicast, so its frames reach every port
// unless something stops them: ARP requests with a trailer after the ARP
// packet, MLD reports with auxiliary data, neighbour discovery with
// options no one asked for; and any frame sent straight to a neighbour's
// MAC. The test counts what reaches the neighbour sandbox's interface and
// the bridge's other ports (integration/escape_around_test.go).

// framesPerKind is how many frames of each kind an attempt sends.
const framesPerKind = 20

// frameDataLen is the data each frame carries beyond address resolution.
const frameDataLen = 1000

// Ethernet addresses of the attempts' multicast destinations.
var (
	allRoutersMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 2}
	mldv2MAC      = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 0x16}
	mdns4MAC      = net.HardwareAddr{0x01, 0x00, 0x5e, 0, 0, 0xfb}
	allRouters    = netip.MustParseAddr("ff02::2")
	mldv2Routers  = netip.MustParseAddr("ff02::16")
	// mldGroup is the group the MLD reports name.
	mldGroup = netip.MustParseAddr("ff05::d00d")
	// routerAlert is the hop-by-hop header MLD travels behind (RFC 3810
	// 5): router alert, value 0, and padding.
	routerAlert = []byte{unix.IPPROTO_ICMPV6, 0, 5, 2, 0, 0, 1, 0}
)

// etherUnknown is an ethertype no one on the bridge speaks: the IEEE's
// local experimental one.
const etherUnknown = 0x88b5

// frameSender writes frames on the probe's link and tallies them.
type frameSender struct {
	l    *link
	fd   int
	t    *tally
	sent map[string]int
}

func newFrameSender(cfg *config, t *tally) (*frameSender, error) {
	l, err := probeLink(cfg)
	if err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	fd, err := l.packetSocket(unix.ETH_P_ALL)
	if err != nil {
		return nil, err
	}
	return &frameSender{l: l, fd: fd, t: t, sent: map[string]int{}}, nil
}

func (s *frameSender) close() { unix.Close(s.fd) }

// send writes framesPerKind copies of one frame, counted under what.
func (s *frameSender) send(what string, dst net.HardwareAddr, etherType uint16, body []byte) {
	for range framesPerKind {
		if err := s.l.send(s.fd, dst, etherType, body); err != nil {
			s.t.fail(what, err)
			return
		}
		s.t.wrote(14 + len(body))
		s.sent[what]++
	}
}

// note says how many frames of each kind went out.
func (s *frameSender) note(order ...string) {
	var parts []string
	for _, what := range order {
		if n := s.sent[what]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	s.t.note("from %s (%s) on %s: %s", s.l.addr4, s.l.ifc.HardwareAddr, s.l.ifc.Name, joinComma(parts))
}

func joinComma(parts []string) string {
	var b bytes.Buffer
	for i, p := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p)
	}
	return b.String()
}

// data is frameDataLen bytes of the attempt's payload.
func data(attempt string) []byte {
	p := payload(attempt)
	return append(p, bytes.Repeat([]byte{'.'}, max(0, frameDataLen-len(p)))...)
}

// ipv6Packet is an IPv6 packet from src to dst with hop limit hop, the
// hop-by-hop header hbh (if any) and the ICMPv6 message msg, whose
// checksum it fills in.
func ipv6Packet(src, dst netip.Addr, hop byte, hbh, msg []byte) []byte {
	msg = bytes.Clone(msg)
	s, d := src.As16(), dst.As16()
	pseudo := append(append(s[:], d[:]...), byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg)), 0, 0, 0, unix.IPPROTO_ICMPV6)
	binary.BigEndian.PutUint16(msg[2:], 0)
	binary.BigEndian.PutUint16(msg[2:], checksum(msg, sum16(pseudo)))
	b := make([]byte, 40, 40+len(hbh)+len(msg))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(hbh)+len(msg)))
	b[6], b[7] = unix.IPPROTO_ICMPV6, hop
	if len(hbh) > 0 {
		b[6] = unix.IPPROTO_HOPOPTS
	}
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
	return append(append(b, hbh...), msg...)
}

// ndMessage is an ICMPv6 message of type typ, code 0, with the four bytes
// head after the checksum, target (if valid), then options.
func ndMessage(typ byte, head []byte, target netip.Addr, options ...[]byte) []byte {
	m := append([]byte{typ, 0, 0, 0}, head...)
	if target.IsValid() {
		a := target.As16()
		m = append(m, a[:]...)
	}
	for _, o := range options {
		m = append(m, o...)
	}
	return m
}

// lladdrOption is a link-layer address option (RFC 4861 4.6.1).
func lladdrOption(typ byte, mac net.HardwareAddr) []byte { return append([]byte{typ, 1}, mac...) }

// unknownOption is an option of a type no one defines, holding d padded
// to whole units of 8 bytes.
func unknownOption(d []byte) []byte {
	n := (len(d) + 2 + 7) / 8
	o := make([]byte, n*8)
	o[0], o[1] = 253, byte(n)
	copy(o[2:], d)
	return o
}

// tryARPTrailer sends ARP requests for the gateway and gratuitous ARP
// replies for the probe's own address, each with frameDataLen bytes of
// data after the ARP packet: to the broadcast address, and to the
// neighbour's MAC.
func tryARPTrailer(cfg *config) row {
	var t tally
	s, err := newFrameSender(cfg, &t)
	if err != nil {
		t.fail("AF_PACKET", err)
		return t.row("arp-trailer")
	}
	defer s.close()
	l, trailer := s.l, data("arp-trailer")
	mac := l.ifc.HardwareAddr
	s.send("broadcast requests for the gateway", broadcastMAC, unix.ETH_P_ARP, append(arpPacket(1, mac, l.addr4, nil, l.gw4), trailer...))
	s.send("broadcast gratuitous replies", broadcastMAC, unix.ETH_P_ARP, append(arpPacket(2, mac, l.addr4, broadcastMAC, l.addr4), trailer...))
	if cfg.neighbourMAC != nil {
		tpa := cfg.neighbour4
		if !tpa.IsValid() {
			tpa = l.gw4
		}
		s.send("requests to the neighbour's MAC", cfg.neighbourMAC, unix.ETH_P_ARP, append(arpPacket(1, mac, l.addr4, nil, tpa), trailer...))
	}
	s.note("broadcast requests for the gateway", "broadcast gratuitous replies", "requests to the neighbour's MAC")
	t.note("each with %d bytes after the ARP packet", len(trailer))
	return t.row("arp-trailer")
}

// tryMLDAux sends MLDv2 reports whose record carries frameDataLen bytes
// of auxiliary data, and MLDv1 reports with the data after the message,
// from the probe's link-local address (behind the router alert, hop limit
// 1, as MLD goes): to the MLDv2 routers' address, and to the neighbour's
// MAC.
func tryMLDAux(cfg *config) row {
	var t tally
	s, err := newFrameSender(cfg, &t)
	if err != nil {
		t.fail("AF_PACKET", err)
		return t.row("mld-aux")
	}
	defer s.close()
	l, d := s.l, data("mld-aux")
	d = d[:len(d)/4*4]
	g := mldGroup.As16()
	v2 := []byte{143, 0, 0, 0, 0, 0, 0, 1, 4, byte(len(d) / 4), 0, 0}
	v2 = append(append(v2, g[:]...), d...)
	v1 := append(append([]byte{131, 0, 0, 0, 0, 0, 0, 0}, g[:]...), d...)
	s.send("mldv2 reports with auxiliary data", mldv2MAC, unix.ETH_P_IPV6, ipv6Packet(l.ll6, mldv2Routers, 1, routerAlert, v2))
	s.send("mld reports with data after them", allNodesMAC, unix.ETH_P_IPV6, ipv6Packet(l.ll6, allNodes, 1, routerAlert, v1))
	if cfg.neighbourMAC != nil {
		s.send("mldv2 reports to the neighbour's MAC", cfg.neighbourMAC, unix.ETH_P_IPV6, ipv6Packet(l.ll6, mldv2Routers, 1, routerAlert, v2))
	}
	s.note("mldv2 reports with auxiliary data", "mld reports with data after them", "mldv2 reports to the neighbour's MAC")
	t.note("each with %d bytes of data", len(d))
	return t.row("mld-aux")
}

// tryNDOptions sends neighbour solicitations and advertisements to all
// nodes and router solicitations to all routers, from the probe's
// link-local address, each with its link-layer address option and an
// option of an unknown type holding frameDataLen bytes; and the
// solicitation to the neighbour's MAC and link-local address.
func tryNDOptions(cfg *config) row {
	var t tally
	s, err := newFrameSender(cfg, &t)
	if err != nil {
		t.fail("AF_PACKET", err)
		return t.row("nd-options")
	}
	defer s.close()
	l, opt := s.l, unknownOption(data("nd-options"))
	mac := l.ifc.HardwareAddr
	ns := ndMessage(135, make([]byte, 4), l.ll6, lladdrOption(1, mac), opt)
	na := ndMessage(136, []byte{0x20, 0, 0, 0}, l.ll6, lladdrOption(2, mac), opt)
	rs := ndMessage(133, make([]byte, 4), netip.Addr{}, lladdrOption(1, mac), opt)
	s.send("neighbour solicitations to all nodes", allNodesMAC, unix.ETH_P_IPV6, ipv6Packet(l.ll6, allNodes, 255, nil, ns))
	s.send("neighbour advertisements to all nodes", allNodesMAC, unix.ETH_P_IPV6, ipv6Packet(l.ll6, allNodes, 255, nil, na))
	s.send("router solicitations to all routers", allRoutersMAC, unix.ETH_P_IPV6, ipv6Packet(l.ll6, allRouters, 255, nil, rs))
	if cfg.neighbourMAC != nil {
		s.send("neighbour solicitations to the neighbour", cfg.neighbourMAC, unix.ETH_P_IPV6,
			ipv6Packet(l.ll6, eui64LinkLocal(cfg.neighbourMAC), 255, nil, ns))
	}
	s.note("neighbour solicitations to all nodes", "neighbour advertisements to all nodes", "router solicitations to all routers",
		"neighbour solicitations to the neighbour")
	t.note("each with an option of type 253 holding %d bytes", len(opt)-2)
	return t.row("nd-options")
}

// tryL2Flood sends frames of an unknown ethertype holding frameDataLen
// bytes to the broadcast address, to IPv4 and IPv6 multicast addresses and
// to the neighbour's MAC; and well-formed neighbour solicitations, whose
// 16-byte target carries data, to all nodes and to the neighbour's MAC
// and link-local address: address resolution in its own shape, but not
// with the gateway.
func tryL2Flood(cfg *config) row {
	var t tally
	s, err := newFrameSender(cfg, &t)
	if err != nil {
		t.fail("AF_PACKET", err)
		return t.row("l2-flood")
	}
	defer s.close()
	l, d := s.l, data("l2-flood")
	mac := l.ifc.HardwareAddr
	s.send("unknown-type broadcasts", broadcastMAC, etherUnknown, d)
	s.send("unknown-type IPv4 multicasts", mdns4MAC, etherUnknown, d)
	s.send("unknown-type IPv6 multicasts", allNodesMAC, etherUnknown, d)
	var target [16]byte
	copy(target[:], payload("l2-flood"))
	ns := ndMessage(135, make([]byte, 4), netip.AddrFrom16(target), lladdrOption(1, mac))
	s.send("neighbour solicitations carrying data to all nodes", allNodesMAC, unix.ETH_P_IPV6, ipv6Packet(l.ll6, allNodes, 255, nil, ns))
	if cfg.neighbourMAC != nil {
		s.send("unknown-type frames to the neighbour's MAC", cfg.neighbourMAC, etherUnknown, d)
		s.send("neighbour solicitations carrying data to the neighbour", cfg.neighbourMAC, unix.ETH_P_IPV6,
			ipv6Packet(l.ll6, eui64LinkLocal(cfg.neighbourMAC), 255, nil, ns))
	}
	s.note("unknown-type broadcasts", "unknown-type IPv4 multicasts", "unknown-type IPv6 multicasts", "unknown-type frames to the neighbour's MAC",
		"neighbour solicitations carrying data to all nodes", "neighbour solicitations carrying data to the neighbour")
	t.note("unknown-type frames of %d bytes (ethertype %#04x); solicitations with 16 bytes of data as their target", len(d), etherUnknown)
	return t.row("l2-flood")
}
