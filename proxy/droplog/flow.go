package droplog

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
)

// Flow is what a dropped packet's headers say: its protocol, addresses,
// ports and ICMP type. Fields a packet does not have are zero (ICMP
// fields: -1).
type Flow struct {
	// Proto is "tcp", "udp", "icmp", "icmpv6", "arp", another IP
	// protocol by number ("ip-proto-47"), or for anything that is not
	// IP nor ARP "ethertype-0x88cc".
	Proto    string
	Src, Dst netip.Addr
	SrcPort  uint16
	DstPort  uint16
	ICMPType int // -1 if not ICMP
	ICMPCode int // -1 if not ICMP
	// ports says SrcPort and DstPort were read (a TCP or UDP header
	// that was there).
	ports bool
}

// Ethertypes the parser knows.
const (
	etherIPv4 = 0x0800
	etherARP  = 0x0806
	etherIPv6 = 0x86dd
)

// IP protocol numbers the parser names.
const (
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
)

// ParseFlow reads the headers of a packet of ethertype hwProto whose
// bytes b start at its network header (as NFLOG copies it), up to the
// transport ports or ICMP type. A packet cut short (the snaplen, or a
// truncated packet) yields what it has; an error says the network header
// itself is malformed.
func ParseFlow(hwProto uint16, b []byte) (Flow, error) {
	f := Flow{ICMPType: -1, ICMPCode: -1}
	switch hwProto {
	case etherIPv4:
		if len(b) < 20 || b[0]>>4 != 4 {
			return f, fmt.Errorf("ipv4 header of %d bytes or version %d", len(b), versionOf(b))
		}
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 {
			return f, fmt.Errorf("ipv4 header length %d", ihl)
		}
		f.Src, _ = netip.AddrFromSlice(b[12:16])
		f.Dst, _ = netip.AddrFromSlice(b[16:20])
		fragOff := binary.BigEndian.Uint16(b[6:8]) & 0x1fff
		if fragOff != 0 || len(b) < ihl {
			f.Proto = protoName(b[9], false)
			return f, nil // a later fragment has no transport header
		}
		f.transport(b[9], b[ihl:], false)
	case etherIPv6:
		if len(b) < 40 || b[0]>>4 != 6 {
			return f, fmt.Errorf("ipv6 header of %d bytes or version %d", len(b), versionOf(b))
		}
		f.Src, _ = netip.AddrFromSlice(b[8:24])
		f.Dst, _ = netip.AddrFromSlice(b[24:40])
		next, rest := b[6], b[40:]
		// Extension headers: hop-by-hop, routing, destination options
		// (8-byte units after the first 8), fragment (8 bytes).
		for i := 0; i < 8; i++ {
			switch next {
			case 0, 43, 60:
				if len(rest) < 8 {
					f.Proto = protoName(next, true)
					return f, nil
				}
				n := 8 + int(rest[1])*8
				if len(rest) < n {
					f.Proto = protoName(rest[0], true)
					return f, nil
				}
				next, rest = rest[0], rest[n:]
				continue
			case 44:
				if len(rest) < 8 {
					f.Proto = protoName(next, true)
					return f, nil
				}
				off := binary.BigEndian.Uint16(rest[2:4]) >> 3
				next, rest = rest[0], rest[8:]
				if off != 0 {
					f.Proto = protoName(next, true)
					return f, nil
				}
				continue
			}
			break
		}
		f.transport(next, rest, true)
	case etherARP:
		f.Proto = "arp"
		// Ethernet/IPv4 ARP: sender hardware and protocol address, then
		// the target's.
		if len(b) >= 28 && b[4] == 6 && b[5] == 4 {
			f.Src, _ = netip.AddrFromSlice(b[14:18])
			f.Dst, _ = netip.AddrFromSlice(b[24:28])
		}
	default:
		f.Proto = fmt.Sprintf("ethertype-0x%04x", hwProto)
	}
	return f, nil
}

// transport reads the ports or the ICMP type and code of protocol proto
// from b, the transport header (as much of it as was copied).
func (f *Flow) transport(proto uint8, b []byte, v6 bool) {
	f.Proto = protoName(proto, v6)
	switch proto {
	case protoTCP, protoUDP:
		if len(b) >= 4 {
			f.SrcPort, f.DstPort = binary.BigEndian.Uint16(b[0:2]), binary.BigEndian.Uint16(b[2:4])
			f.ports = true
		}
	case protoICMP, protoICMPv6:
		if (proto == protoICMP) != v6 && len(b) >= 2 {
			f.ICMPType, f.ICMPCode = int(b[0]), int(b[1])
		}
	}
}

func protoName(p uint8, v6 bool) string {
	switch {
	case p == protoTCP:
		return "tcp"
	case p == protoUDP:
		return "udp"
	case p == protoICMP && !v6:
		return "icmp"
	case p == protoICMPv6 && v6:
		return "icmpv6"
	}
	return "ip-proto-" + strconv.Itoa(int(p))
}

func versionOf(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(b[0] >> 4)
}

// HasPorts reports whether f's ports were read: a TCP or UDP header
// that was there (not in a later fragment, not cut off).
func (f Flow) HasPorts() bool { return f.ports }

// endpoint writes an address, with its port if f has ports: "" for no
// address.
func (f Flow) endpoint(a netip.Addr, port uint16) string {
	switch {
	case !a.IsValid():
		return ""
	case f.HasPorts():
		return netip.AddrPortFrom(a, port).String()
	}
	return a.String()
}
