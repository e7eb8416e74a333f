package hostlayer

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// This file tests what a sandbox's frames may carry on the bridge, and
// that none reaches another sandbox: hand-made ARP, neighbour discovery
// and MLD frames, well-formed and carrying data, written to a packet
// socket in the sandbox, and packet sockets on the host's bridge device
// and in the neighbour sandbox counting what arrives.

// ipv6Frame is an IPv6 packet from srcMAC/src to dstMAC/dst with hop
// limit hop, the extension header ext (hop-by-hop, if any: its first byte
// is the next header) before the ICMPv6 message msg (type, code, two bytes
// of checksum, which it computes, and the rest), and trailer after the
// packet, outside its payload length.
func ipv6Frame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, hop byte, ext, msg, trailer []byte) rawFrame {
	msg = bytes.Clone(msg)
	s, d := src.As16(), dst.As16()
	pseudo := concat(s[:], d[:], binary.BigEndian.AppendUint32(nil, uint32(len(msg))), []byte{0, 0, 0, unix.IPPROTO_ICMPV6})
	binary.BigEndian.PutUint16(msg[2:], 0)
	binary.BigEndian.PutUint16(msg[2:], ipChecksumPadded(concat(pseudo, msg)))
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(ext)+len(msg)))
	ip[6], ip[7] = unix.IPPROTO_ICMPV6, hop
	if len(ext) > 0 {
		ip[6] = unix.IPPROTO_HOPOPTS
	}
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	return rawFrame{dstMAC: dstMAC, srcMAC: srcMAC, etherType: unix.ETH_P_IPV6, payload: concat(ip, ext, msg, trailer)}
}

// randomBytes returns n random bytes: the data a frame carries, and what
// finds it among everything a sniffer sees.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// Addresses of MLD and neighbour discovery.
var (
	allRouters    = netip.MustParseAddr("ff02::2")
	allRoutersMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 2}
	mldv2Routers  = netip.MustParseAddr("ff02::16")
	mldv2MAC      = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 0x16}
	routerAlert   = []byte{unix.IPPROTO_ICMPV6, 0, 5, 2, 0, 0, 1, 0}
)

// ndMessage is an ICMPv6 message of type typ: code 0, the four bytes
// head, target (if valid), then the options.
func ndMessage(typ byte, head []byte, target netip.Addr, options ...[]byte) []byte {
	m := concat([]byte{typ, 0, 0, 0}, head)
	if target.IsValid() {
		a := target.As16()
		m = append(m, a[:]...)
	}
	return concat(append([][]byte{m}, options...)...)
}

// lladdrOption is a link-layer address option of type typ for mac.
func lladdrOption(typ byte, mac net.HardwareAddr) []byte { return concat([]byte{typ, 1}, mac) }

// mldv2Report is an MLDv2 report of one record per group (type 4, change
// to exclude: a join), each with auxiliary data aux (a multiple of four
// bytes) and no sources.
func mldv2Report(aux []byte, groups ...netip.Addr) []byte {
	m := []byte{143, 0, 0, 0, 0, 0}
	m = binary.BigEndian.AppendUint16(m, uint16(len(groups)))
	for _, g := range groups {
		a := g.As16()
		m = append(m, 4, byte(len(aux)/4), 0, 0)
		m = append(m, a[:]...)
		m = append(m, aux...)
	}
	return m
}

// frameCase is one frame a sandbox sends, and whether the host must get it
// (well-formed address resolution) or nobody may.
type frameCase struct {
	name   string
	frame  rawFrame
	marker []byte // what identifies it in a sniffer's view
	host   bool
}

// frameCases are the frames sandbox a sends: each well-formed kind of
// address resolution, which reaches the host, and each kind carrying
// data beyond it, which reaches nobody.
func frameCases(t *testing.T, l *lab) []frameCase {
	macA, macB := mac(t, l.a, "eth0"), mac(t, l.b, "eth0")
	a4, gw := netip.MustParseAddr(sbxA4), netip.MustParseAddr(gw4)
	llA, a6 := linkLocal(macA), netip.MustParseAddr(sbxA6)
	var cases []frameCase
	add := func(name string, host bool, f rawFrame, marker []byte) {
		cases = append(cases, frameCase{name: name, frame: f, marker: marker, host: host})
	}
	arp := func(tha net.HardwareAddr, trailer []byte) rawFrame {
		f := arpFrame(broadcastMAC, macA, arpRequest, macA, a4, tha, gw)
		f.payload = concat(f.payload, trailer)
		return f
	}
	// ARP: the target hardware address of a request is free: it tells
	// the well-formed frames apart.
	tha := net.HardwareAddr(randomBytes(6))
	add("arp request", true, arp(tha, nil), concat(tha, gw.AsSlice()))
	tha = net.HardwareAddr(randomBytes(6))
	add("arp request padded with zeros", true, arp(tha, make([]byte, 18)), concat(tha, gw.AsSlice()))
	data := randomBytes(16)
	add("arp request with a trailer", false, arp(zeroMAC, concat(data, make([]byte, 1000))), data)
	data = randomBytes(12)
	add("arp request padded with data", false, arp(zeroMAC, concat(data, make([]byte, 6))), data)
	data = randomBytes(6)
	rarp := arpFrame(broadcastMAC, macA, 3, macA, a4, net.HardwareAddr(data), gw)
	add("rarp request", false, rarp, data)

	// Neighbour solicitations: the target is free.
	target := netip.AddrFrom16([16]byte(randomBytes(16)))
	ns := func(opts ...[]byte) []byte { return ndMessage(135, make([]byte, 4), target, opts...) }
	add("neighbour solicitation to all nodes", true,
		ipv6Frame(allNodesMAC, macA, llA, allNodes, 255, nil, ns(lladdrOption(1, macA)), nil), target.AsSlice())
	target = netip.AddrFrom16([16]byte(randomBytes(16)))
	add("neighbour solicitation unicast to the neighbour", false,
		ipv6Frame(macB, macA, llA, linkLocal(macB), 255, nil, ns(lladdrOption(1, macA)), nil), target.AsSlice())
	data = randomBytes(16)
	add("neighbour solicitation with an unknown option", false,
		ipv6Frame(allNodesMAC, macA, llA, allNodes, 255, nil, ns(lladdrOption(1, macA), concat([]byte{253, 125}, data, make([]byte, 998-len(data)))), nil), data)
	data = randomBytes(6)
	add("neighbour solicitation with another mac in its option", false,
		ipv6Frame(allNodesMAC, macA, llA, allNodes, 255, nil, ns(lladdrOption(1, data)), nil), data)
	data = randomBytes(16)
	add("neighbour solicitation with bytes after the packet", false,
		ipv6Frame(allNodesMAC, macA, llA, allNodes, 255, nil, ns(lladdrOption(1, macA)), concat(data, make([]byte, 500))), data)
	data = randomBytes(4)
	add("neighbour solicitation with data in its reserved field", false,
		ipv6Frame(allNodesMAC, macA, llA, allNodes, 255, nil, ndMessage(135, data, target, lladdrOption(1, macA)), nil), data)
	data = randomBytes(6)
	add("neighbour solicitation behind a hop-by-hop header", false,
		ipv6Frame(allNodesMAC, macA, llA, allNodes, 255, concat([]byte{unix.IPPROTO_ICMPV6, 0, 1, 4}, data[:4]),
			ns(lladdrOption(1, macA)), nil), data[:4])

	// Neighbour advertisements name the sandbox's own address; routers
	// solicitations nothing: the whole message is the marker.
	na := ndMessage(136, []byte{0x20, 0, 0, 0}, a6, lladdrOption(2, macA))
	add("neighbour advertisement", true, ipv6Frame(allNodesMAC, macA, llA, allNodes, 255, nil, na, nil), na[4:])
	data = randomBytes(16)
	add("neighbour advertisement with an unknown option", false,
		ipv6Frame(allNodesMAC, macA, llA, allNodes, 255, nil, concat(na, []byte{200, 3}, data, make([]byte, 6)), nil), data)
	rs := ndMessage(133, make([]byte, 4), netip.Addr{}, lladdrOption(1, macA))
	add("router solicitation", true, ipv6Frame(allRoutersMAC, macA, llA, allRouters, 255, nil, rs, nil), concat(llA.AsSlice(), allRouters.AsSlice()))
	data = randomBytes(16)
	add("router solicitation with a payload", false,
		ipv6Frame(allRoutersMAC, macA, llA, allRouters, 255, nil, concat(rs, data), nil), data)

	// MLD: the group is free.
	group := netip.AddrFrom16([16]byte(concat([]byte{0xff, 0x05}, randomBytes(14))))
	add("mldv2 report", true,
		ipv6Frame(mldv2MAC, macA, llA, mldv2Routers, 1, routerAlert, mldv2Report(nil, group), nil), group.AsSlice())
	data = randomBytes(16)
	add("mldv2 report with auxiliary data", false,
		ipv6Frame(mldv2MAC, macA, llA, mldv2Routers, 1, routerAlert, mldv2Report(concat(data, make([]byte, 1000)), group), nil), data)
	data = randomBytes(16)
	add("mldv2 report with a source", false,
		ipv6Frame(mldv2MAC, macA, llA, mldv2Routers, 1, routerAlert,
			func() []byte { m := mldv2Report(nil, group); m[8+3] = 1; return concat(m, data) }(), nil), data)
	data = randomBytes(16)
	add("mld report with bytes after it", false,
		ipv6Frame(allNodesMAC, macA, llA, allNodes, 1, routerAlert, concat([]byte{131, 0, 0, 0, 0, 0, 0, 0}, allNodes.AsSlice(), data), nil), data)

	// Other types, broadcast and to the neighbour.
	data = randomBytes(16)
	add("unknown ethertype, broadcast", false, rawFrame{dstMAC: broadcastMAC, srcMAC: macA, etherType: 0x88b5, payload: concat(data, make([]byte, 500))}, data)
	data = randomBytes(16)
	add("unknown ethertype, to the neighbour", false, rawFrame{dstMAC: macB, srcMAC: macA, etherType: 0x88b5, payload: concat(data, make([]byte, 500))}, data)
	return cases
}

var zeroMAC = make(net.HardwareAddr, 6)

// sendCases sends every case from a and reports the names of those whose
// marker reached the host and the neighbour.
func sendCases(t *testing.T, l *lab, cases []frameCase) (atHost, atNeighbour map[string]bool) {
	t.Helper()
	atHost, atNeighbour = map[string]bool{}, map[string]bool{}
	host, nbr := sniffFrames(t, l.runtime, "br0"), sniffFrames(t, l.b, "eth0")
	for _, c := range cases {
		sendRawFrame(t, l.a, "eth0", c.frame)
		wait := quiet
		if c.host {
			wait = mustWork
		}
		atHost[c.name] = host.saw(c.marker, wait)
		atNeighbour[c.name] = nbr.saw(c.marker, quiet)
	}
	return atHost, atNeighbour
}

// TestFramesBetweenSandboxes: a sandbox's well-formed address resolution
// reaches the host and nothing else; frames carrying anything more (ARP
// trailers and odd operations, neighbour discovery with unknown options,
// other MACs, data after the packet or in reserved fields, MLD with
// auxiliary data or sources, unknown ethertypes) reach neither the host
// nor the neighbour; nothing at all reaches the neighbour. Each of the
// port isolation and the bridge table's forward rule holds alone, and
// without the layer the same frames reach the neighbour.
func TestFramesBetweenSandboxes(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a, b, rt := l.a, l.b, l.runtime
	// b's port was isolated by another tool before its layer: that stays.
	run(t, "bridge", "-n", rt.name, "link", "set", "dev", "veth-b", "isolated", "on")
	specA, specB := l.spec(t, "ctr-a", a, "veth-a", false), l.spec(t, "ctr-b", b, "veth-b", false)
	l.apply(t, specA)
	l.apply(t, specB)
	for _, port := range []string{"veth-a", "veth-b"} {
		if !isolated(t, rt, port) {
			t.Errorf("%s: port isolation is off after Apply", port)
		}
	}

	cases := frameCases(t, l)
	atHost, atNbr := sendCases(t, l, cases)
	for _, c := range cases {
		if atHost[c.name] != c.host {
			t.Errorf("%s: reached the host %v, want %v", c.name, atHost[c.name], c.host)
		}
		if atNbr[c.name] {
			t.Errorf("%s: reached the neighbour", c.name)
		}
	}

	t.Run("the forward rule holds without isolation", func(t *testing.T) {
		run(t, "bridge", "-n", rt.name, "link", "set", "dev", "veth-a", "isolated", "off")
		if err := Check(rt.path, specA); err == nil || !strings.Contains(err.Error(), "port isolation") {
			t.Errorf("Check with the port's isolation off: %v, want an error about it", err)
		}
		_, atNbr := sendCases(t, l, cases)
		for _, c := range cases {
			if atNbr[c.name] {
				t.Errorf("%s: reached the neighbour without port isolation", c.name)
			}
		}
		l.apply(t, specA) // turns it on again
		if !isolated(t, rt, "veth-a") {
			t.Errorf("port isolation is off after Apply again")
		}
	})
	t.Run("isolation holds without the forward rule", func(t *testing.T) {
		n, err := openRuntimeNS(rt.path, true)
		if err != nil {
			t.Fatal(err)
		}
		deleteRule(t, n, bridgeLayout(), "forward", 0)
		err = n.Conn.Flush()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(rt.path, specA); err == nil || !strings.Contains(err.Error(), "forward") {
			t.Errorf("Check without the forward rule: %v, want an error about chain forward", err)
		}
		_, atNbr := sendCases(t, l, cases)
		for _, c := range cases {
			if atNbr[c.name] {
				t.Errorf("%s: reached the neighbour without the forward rule", c.name)
			}
		}
		l.apply(t, specA)
	})
	t.Run("remove gives back what it took", func(t *testing.T) {
		if err := Remove(rt.path, "ctr-b"); err != nil {
			t.Fatal(err)
		}
		if !isolated(t, rt, "veth-b") {
			t.Errorf("Remove turned off the isolation another tool had set on veth-b")
		}
		run(t, "bridge", "-n", rt.name, "link", "set", "dev", "veth-b", "isolated", "off")
		if err := Remove(rt.path, "ctr-a"); err != nil {
			t.Fatal(err)
		}
		if isolated(t, rt, "veth-a") {
			t.Errorf("Remove left veth-a isolated")
		}
	})
	t.Run("without the layer the frames reach the neighbour", func(t *testing.T) {
		_, atNbr := sendCases(t, l, cases)
		for _, c := range cases {
			// br_netfilter trims what follows an IPv6 packet before it
			// bridges it: that trailer reaches a neighbour only where
			// br_netfilter is off.
			if !atNbr[c.name] && c.name != "neighbour solicitation with bytes after the packet" {
				t.Errorf("%s: did not reach the neighbour without the layer: the probe is broken", c.name)
			}
		}
	})
}

// isolated reports whether bridge port dev of n has isolation on, as
// `bridge link` shows it.
func isolated(t *testing.T, n *testNS, dev string) bool {
	t.Helper()
	out, err := exec.Command("bridge", "-n", n.name, "-d", "link", "show", "dev", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("bridge link show %s: %v: %s", dev, err, out)
	}
	return strings.Contains(string(out), "isolated on")
}

// TestAddressResolutionStillWorks: what the kernel itself sends for
// address resolution passes the shapes: its MLD reports when the sandbox
// joins a group, duplicate address detection (with its nonce) of a pinned
// address, neighbour discovery with the gateway afterwards; and the
// host's router advertisements still reach the sandboxes, whose ports
// are isolated.
func TestAddressResolutionStillWorks(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a, b, rt := l.a, l.b, l.runtime
	l.apply(t, l.spec(t, "ctr-a", a, "veth-a", false))
	l.apply(t, l.spec(t, "ctr-b", b, "veth-b", false))
	host := sniffFrames(t, rt, "br0")

	t.Run("mld reports of a joined group", func(t *testing.T) {
		group := netip.AddrFrom16([16]byte(concat([]byte{0xff, 0x05}, randomBytes(14))))
		in(t, a, func() error {
			ifc, err := net.InterfaceByName("eth0")
			if err != nil {
				return err
			}
			c, err := net.ListenMulticastUDP("udp6", ifc, &net.UDPAddr{IP: group.AsSlice(), Port: 5999})
			if err != nil {
				return err
			}
			t.Cleanup(func() { c.Close() })
			return nil
		})
		if !host.saw(group.AsSlice(), 3*mustWork) {
			t.Errorf("the kernel's mld report for %s did not reach the host", group)
		}
	})
	t.Run("duplicate address detection, then neighbour discovery", func(t *testing.T) {
		a.ip(t, "addr del "+sbxA6+"/64 dev eth0")
		a.ip(t, "addr add "+sbxA6+"/64 dev eth0")
		target := netip.MustParseAddr(sbxA6).AsSlice()
		if !host.saw(target, 3*mustWork) {
			t.Errorf("the kernel's duplicate address detection of %s did not reach the host", sbxA6)
		}
		if !eventually(func() bool {
			out, _ := exec.Command("ip", "-n", a.name, "-6", "addr", "show", "dev", "eth0").CombinedOutput()
			return strings.Contains(string(out), sbxA6) && !strings.Contains(string(out), "tentative")
		}) {
			out, _ := exec.Command("ip", "-n", a.name, "-6", "addr", "show", "dev", "eth0").CombinedOutput()
			t.Fatalf("%s did not leave duplicate address detection: %s", sbxA6, out)
		}
		a.ip(t, "-6 neigh flush dev eth0")
		rt.ip(t, "-6 neigh flush dev br0")
		expectTCPWorks(t, a, hostPort(inet6, 7000), "direct")
		expectTCPWorks(t, l.inet, hostPort(sbxA6, 8080), "a")
	})
	t.Run("the host's router advertisements reach every sandbox", func(t *testing.T) {
		for _, n := range []*testNS{a, b} {
			n.sysctl(t, "net.ipv6.conf.eth0.accept_ra", "1")
			n.sysctl(t, "net.ipv6.conf.eth0.autoconf", "1")
		}
		brMAC := mac(t, rt, "br0")
		prefix := netip.MustParsePrefix("2001:db8:77::/64")
		for range 2 {
			sendRawFrame(t, rt, "br0", icmpv6Frame(allNodesMAC, brMAC, linkLocal(brMAC), allNodes, 134, routerAdvert(prefix)))
		}
		for _, n := range []*testNS{a, b} {
			if !eventually(func() bool { return n.hasAddrIn(t, "eth0", prefix) }) {
				t.Errorf("%s took no address in %v from the host's advertisement", n.name, prefix)
			}
		}
	})
}
