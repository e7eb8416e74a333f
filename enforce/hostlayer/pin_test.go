package hostlayer

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestARPSpoofOnTheBridge: a sandbox holding CAP_NET_RAW answers ARP for
// its neighbour's address with packet-socket frames; the host's neighbour
// table never takes its MAC for the neighbour, and what the host sends to
// the neighbour does not reach it. Without the layer, the same frames do
// both.
func TestARPSpoofOnTheBridge(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a, rt := l.a, l.runtime
	l.apply(t, l.spec(t, "ctr-a", a, "veth-a", false))
	macA, macB, gwMAC := mac(t, a, "eth0"), mac(t, l.b, "eth0"), mac(t, rt, "br0")
	b4, gw := netip.MustParseAddr(sbxB4), netip.MustParseAddr(gw4)
	zero := make(net.HardwareAddr, 6)
	spoof := func() {
		for range 3 {
			sendRawFrame(t, a, "eth0", arpFrame(broadcastMAC, macA, arpRequest, macA, b4, zero, gw))
			sendRawFrame(t, a, "eth0", arpFrame(gwMAC, macA, arpReply, macA, b4, gwMAC, gw))
		}
	}
	toB := listenUDP(t, l.b, hostPort(sbxB4, 9999))

	expectTCPWorks(t, rt, hostPort(sbxB4, 8080), "b") // the host knows b
	spoof()
	time.Sleep(quiet)
	if got := neighMAC(t, rt, "br0", b4); got != macB.String() {
		t.Errorf("the host's neighbour entry for %s: %q, want b's %s", b4, got, macB)
	}
	atA := sniffFrames(t, a, "eth0")
	marker := newMarker("for-b")
	sendUDP(t, rt, hostPort(sbxB4, 9999), string(marker))
	expectDatagram(t, toB, marker, "b, the datagram the host sent it")
	if atA.saw(marker, quiet) {
		t.Errorf("a received the datagram the host sent to b")
	}

	// The same frames without the layer take b's traffic: they can fail.
	if err := Remove(rt.path, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	spoof()
	if !eventually(func() bool { return neighMAC(t, rt, "br0", b4) == macA.String() }) {
		t.Fatalf("without the layer, a's frames did not poison the host's entry for %s (%q): the probe is broken", b4, neighMAC(t, rt, "br0", b4))
	}
	marker = newMarker("for-b")
	sendUDP(t, rt, hostPort(sbxB4, 9999), string(marker))
	if !atA.saw(marker, mustWork) {
		t.Fatalf("without the layer, the host's datagram for b did not reach a: the probe is broken")
	}
}

// TestImpersonatingANeighbour: a sandbox holding CAP_NET_ADMIN takes its
// neighbour's address and answers as it. Its ARP answers are dropped, so
// the host reaches the neighbour; and where the host sends to it all the
// same (a neighbour entry poisoned before the layer was there), its
// answers, carrying the neighbour's address, are dropped rather than
// taken for the replies of the host's connection.
func TestImpersonatingANeighbour(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a, rt := l.a, l.runtime
	l.apply(t, l.spec(t, "ctr-a", a, "veth-a", false))
	a.ip(t, "addr add "+sbxB4+"/25 dev eth0")
	serveTCP(t, a, hostPort(sbxB4, 8080), "a")
	macA := mac(t, a, "eth0")

	// Both answer the host's ARP for b's address; only b's answer counts.
	for range 3 {
		rt.ip(t, "neigh flush dev br0")
		expectTCPWorks(t, rt, hostPort(sbxB4, 8080), "b")
	}
	rt.ip(t, "neigh replace "+sbxB4+" lladdr "+macA.String()+" dev br0 nud permanent")
	if c, err := dialTCP(rt, "", hostPort(sbxB4, 8080), mustFail); err == nil {
		got, _ := readGreeting(c)
		c.Close()
		t.Errorf("the host's connection to b's address, sent to a, was answered: %q", got)
	}

	// Without the layer, a answers for b.
	if err := Remove(rt.path, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	expectTCPWorks(t, rt, hostPort(sbxB4, 8080), "a")
}

// sendUDPFrom sends one datagram from inside n, from address src, to dst.
func sendUDPFrom(t *testing.T, n *testNS, src, dst string, payload []byte) {
	t.Helper()
	in(t, n, func() error {
		d := ap(dst)
		c, err := net.DialUDP(network("udp", d), &net.UDPAddr{IP: net.ParseIP(src)}, net.UDPAddrFromAddrPort(d))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(payload)
		return err
	})
}

// TestSourcePins: on a bridge port and on a routed interface, packets with
// a source that is not the sandbox's are dropped, even to a destination
// the policy admits, and even if the sandbox took the address; its own
// sources pass.
func TestSourcePins(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	l.warmUp(t)
	allowed4 := listenUDP(t, l.inet, hostPort(inet4, 7160)) // allowDirect 203.0.113.0/28:7100-7199
	allowed6 := listenUDP(t, l.inet, hostPort(inet6, 7000)) // allowDirect [2001:db8:1::2]:7000
	for _, tc := range []struct {
		sbx            *testNS
		key, iface     string
		own4, own6     string
		other4, other6 []string
	}{
		{l.a, "ctr-a", "veth-a", sbxA4, sbxA6, []string{sbxB4, "198.51.100.11"}, []string{sbxB6, "2001:db8:2::99"}},
		{l.c, "ctr-c", "veth-c", sbxC4, sbxC6, []string{"198.51.100.131", sbxA4}, []string{"2001:db8:3::99", sbxA6}},
	} {
		// The addresses the sandbox takes (CAP_NET_ADMIN) before the
		// layer is applied are not pinned either: only IPAM's.
		s := l.spec(t, tc.key, tc.sbx, tc.iface, false)
		s.IPAM = map[string][]netip.Addr{"eth0": {netip.MustParseAddr(tc.own4), netip.MustParseAddr(tc.own6)}}
		tc.sbx.ip(t, "addr add "+tc.other4[0]+"/32 dev eth0")
		l.apply(t, s)
		for _, a := range tc.other4[1:] {
			tc.sbx.ip(t, "addr add "+a+"/32 dev eth0")
		}
		for _, a := range tc.other6 {
			tc.sbx.ip(t, "addr add "+a+"/128 dev eth0 nodad")
		}
		for _, own := range []struct {
			src string
			to  *net.UDPConn
		}{{tc.own4, allowed4}, {tc.own6, allowed6}} {
			marker := newMarker("own")
			sendUDPFrom(t, tc.sbx, own.src, own.to.LocalAddr().String(), marker)
			expectDatagram(t, own.to, marker, "udp from "+tc.key+"'s own "+own.src)
		}
		for _, other := range slices.Concat(tc.other4, tc.other6) {
			to := allowed4
			if strings.Contains(other, ":") {
				to = allowed6
			}
			sendUDPFrom(t, tc.sbx, other, to.LocalAddr().String(), newMarker("spoofed"))
			expectNoDatagram(t, to, "udp from "+tc.key+" with source "+other)
		}
		// And from a packet socket.
		gwMAC := mac(t, l.runtime, tc.iface)
		if tc.sbx == l.a {
			gwMAC = mac(t, l.runtime, "br0")
		}
		for _, src := range []string{tc.own4, tc.other4[0]} {
			marker := newMarker("frame")
			sendFrame(t, tc.sbx, "eth0", frame{dstMAC: gwMAC, srcMAC: mac(t, tc.sbx, "eth0"), src: netip.MustParseAddr(src),
				dst: netip.MustParseAddr(inet4), dport: 7160, payload: marker})
			if src == tc.own4 {
				expectDatagram(t, allowed4, marker, "frame from "+tc.key+"'s own "+src)
			} else {
				expectNoDatagram(t, allowed4, "frame from "+tc.key+" with source "+src)
			}
		}
	}
}

// TestNeighbourAdvertisementPins: a sandbox cannot advertise an address
// that is not its own, on a bridge (a neighbour's) or on a routed
// interface (another of its link's); without the layer, the host takes
// both advertisements.
func TestNeighbourAdvertisementPins(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	l.warmUp(t)
	rt := l.runtime
	b6, other6 := netip.MustParseAddr(sbxB6), netip.MustParseAddr("2001:db8:3::99")
	macA, macC := mac(t, l.a, "eth0"), mac(t, l.c, "eth0")
	l.apply(t, l.spec(t, "ctr-a", l.a, "veth-a", false))
	l.apply(t, l.spec(t, "ctr-c", l.c, "veth-c", false))

	if err := pingSized(rt, b6, 31, 8, newMarker("know-b"), mustWork); err != nil {
		t.Fatalf("the host cannot reach b: %v", err)
	}
	advertise := func() {
		// The host asks for other6 on c's link; nobody has it.
		_ = pingSized(rt, other6, 32, 8, newMarker("ask"), 10*time.Millisecond)
		for range 3 {
			sendRawFrame(t, l.a, "eth0", icmpv6Frame(allNodesMAC, macA, linkLocal(macA), allNodes, 136, neighbourAdvert(b6, macA)))
			sendRawFrame(t, l.c, "eth0", icmpv6Frame(allNodesMAC, macC, linkLocal(macC), allNodes, 136, neighbourAdvert(other6, macC)))
		}
	}
	advertise()
	time.Sleep(quiet)
	if got := neighMAC(t, rt, "br0", b6); got == macA.String() {
		t.Errorf("the host's neighbour entry for b's %s has a's mac", b6)
	}
	if got := neighMAC(t, rt, "veth-c", other6); got == macC.String() {
		t.Errorf("the host's neighbour entry for %s has c's mac", other6)
	}
	// Its own addresses it still advertises.
	if err := pingSized(rt, netip.MustParseAddr(sbxA6), 33, 8, newMarker("a"), mustWork); err != nil {
		t.Errorf("the host cannot reach a over IPv6: %v", err)
	}

	for _, key := range []string{"ctr-a", "ctr-c"} {
		if err := Remove(rt.path, key); err != nil {
			t.Fatal(err)
		}
	}
	advertise()
	if !eventually(func() bool { return neighMAC(t, rt, "br0", b6) == macA.String() }) {
		t.Errorf("without the layer, the host did not take a's advertisement for %s: the probe is broken", b6)
	}
	if !eventually(func() bool { return neighMAC(t, rt, "veth-c", other6) == macC.String() }) {
		t.Errorf("without the layer, the host did not take c's advertisement for %s: the probe is broken", other6)
	}
}

// TestRouterAdvertisementsOnTheBridge: a sandbox's router advertisements,
// written to a packet socket, give neither its neighbour nor the host a
// route or an address; without the layer they give both.
func TestRouterAdvertisementsOnTheBridge(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a, b, rt := l.a, l.b, l.runtime
	b.sysctl(t, "net.ipv6.conf.eth0.forwarding", "0")
	b.sysctl(t, "net.ipv6.conf.eth0.accept_ra", "1")
	b.sysctl(t, "net.ipv6.conf.eth0.autoconf", "1")
	rt.sysctl(t, "net.ipv6.conf.br0.accept_ra", "2") // it forwards: take advertisements all the same
	rt.sysctl(t, "net.ipv6.conf.br0.autoconf", "1")
	macA := mac(t, a, "eth0")
	router := linkLocal(macA)
	advertise := func(prefix netip.Prefix) {
		for range 2 {
			sendRawFrame(t, a, "eth0", icmpv6Frame(allNodesMAC, macA, router, allNodes, 134, routerAdvert(prefix)))
		}
	}

	control := netip.MustParsePrefix("2001:db8:aa::/64")
	advertise(control)
	if !eventually(func() bool { return b.hasAddrIn(t, "eth0", control) && routesVia(t, b, router) != "" }) {
		t.Fatalf("without the layer, b took no address or route from a's advertisement: the probe is broken")
	}
	if !eventually(func() bool { return rt.hasAddrIn(t, "br0", control) }) {
		t.Fatalf("without the layer, the host took no address from a's advertisement: the probe is broken")
	}
	b.ip(t, "-6 route flush proto ra")
	rt.ip(t, "-6 route flush proto ra")

	l.apply(t, l.spec(t, "ctr-a", a, "veth-a", false))
	rogue := netip.MustParsePrefix("2001:db8:bb::/64")
	advertise(rogue)
	time.Sleep(quiet)
	if b.hasAddrIn(t, "eth0", rogue) {
		t.Errorf("b took an address in %v from a's advertisement", rogue)
	}
	if r := routesVia(t, b, router); r != "" {
		t.Errorf("b took a route from a's advertisement: %s", r)
	}
	if rt.hasAddrIn(t, "br0", rogue) {
		t.Errorf("the host took an address in %v from a's advertisement", rogue)
	}
	if r := routesVia(t, rt, router); r != "" {
		t.Errorf("the host took a route from a's advertisement: %s", r)
	}
}

// TestPinsOutliveTheSandboxsChanges: Apply returns the pins it read; given
// them back, it holds them whatever the sandbox changed since, and Check
// reports the changed MAC. Read again, they would take the changes in.
func TestPinsOutliveTheSandboxsChanges(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a := l.a
	macA := mac(t, a, "eth0")
	s := l.spec(t, "ctr-a", a, "veth-a", false)
	pins, err := Apply(l.runtime.path, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(pins) != 1 {
		t.Fatalf("pins = %v, want one", pins)
	}
	p := pins[0]
	want := []netip.Addr{netip.MustParseAddr(sbxA4), netip.MustParseAddr(sbxA6), linkLocal(macA)}
	if p.HostIface != "veth-a" || p.SandboxIface != "eth0" || p.MAC.String() != macA.String() || p.HostIndex != l.runtime.link(t, "veth-a").Index {
		t.Errorf("pin = %+v, want veth-a / eth0 with a's mac %s", p, macA)
	}
	for _, w := range want {
		if !slices.Contains(p.Addrs, w) {
			t.Errorf("pin addresses %v lack %s", p.Addrs, w)
		}
	}

	a.ip(t, "link set eth0 address 02:00:00:00:00:77")
	a.ip(t, "addr add 198.51.100.12/25 dev eth0")
	s.Pins = pins
	again, err := Apply(l.runtime.path, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].MAC.String() != macA.String() || !slices.Equal(again[0].Addrs, p.Addrs) {
		t.Errorf("Apply with the pins returned %v, want %v", again, pins)
	}
	dump := ruleset(t, l.runtime.path)
	if !strings.Contains(dump, fmt.Sprint([]byte(macA))) || strings.Contains(dump, fmt.Sprint([]byte{2, 0, 0, 0, 0, 0x77})) {
		t.Errorf("the layer does not pin a's first mac:\n%s", dump)
	}
	if err := Check(l.runtime.path, s); err == nil || !strings.Contains(err.Error(), "has mac 02:00:00:00:00:77 now, the layer pins "+macA.String()) {
		t.Errorf("Check after a changed its mac: %v, want an error about the pinned mac", err)
	}
	a.ip(t, "link set eth0 address "+macA.String())
	if err := Check(l.runtime.path, s); err != nil {
		t.Errorf("Check with a's mac back: %v", err)
	}
	allowed := listenUDP(t, l.inet, hostPort(inet4, 7160))
	sendUDPFrom(t, a, "198.51.100.12", allowed.LocalAddr().String(), []byte("new address"))
	expectNoDatagram(t, allowed, "udp from the address a added")

	s.Pins = nil
	read, err := Apply(l.runtime.path, s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(read[0].Addrs, netip.MustParseAddr("198.51.100.12")) {
		t.Errorf("pins read again = %v, want them to hold the address a added (the recorded pins are what keeps it out)", read)
	}
}

// TestFloodedFramesStayWithTheirOwner: a bridge floods a frame for a MAC
// it has not learnt to every port; the sandbox's port lets through only
// those for its own MAC, so it does not read what the host sends its
// neighbour. Without the layer, it does.
func TestFloodedFramesStayWithTheirOwner(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a, b, rt := l.a, l.b, l.runtime
	l.apply(t, l.spec(t, "ctr-a", a, "veth-a", false))
	toB := listenUDP(t, b, hostPort(sbxB4, 9999))
	expectTCPWorks(t, rt, hostPort(sbxB4, 8080), "b") // the host knows b's MAC
	macB := mac(t, b, "eth0")
	atA := sniffFrames(t, a, "eth0")
	flood := func() []byte {
		// The bridge forgets where b is; b, which only receives, does
		// not teach it again.
		_ = exec.Command("bridge", "-n", rt.name, "fdb", "del", macB.String(), "dev", "veth-b", "master").Run()
		marker := newMarker("flooded")
		sendUDP(t, rt, hostPort(sbxB4, 9999), string(marker))
		expectDatagram(t, toB, marker, "b, the datagram the host sent it")
		return marker
	}
	if atA.saw(flood(), quiet) {
		t.Errorf("a received a frame the bridge flooded towards b")
	}
	// The host's own frames to a still reach it.
	expectTCPWorks(t, rt, hostPort(sbxA4, 8080), "a")

	if err := Remove(rt.path, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	if !atA.saw(flood(), mustWork) {
		t.Fatalf("without the layer, a did not receive the flooded frame: the probe is broken")
	}
}
