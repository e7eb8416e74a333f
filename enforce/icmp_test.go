package enforce

import (
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// expectProbesArrive sends every tunnel probe from n to inet and fails the
// test at once unless each arrives: without rules in the way they must,
// or the probes prove nothing.
func expectProbesArrive(t *testing.T, from *testNS, at4, at6 *icmpSniffer) {
	t.Helper()
	marker := newMarker("control")
	v4, v6 := tunnelProbes(marker)
	for _, p := range v4 {
		if err := sendICMP(t, from, inet4, p.typ, p.body); err != nil || !at4.saw(marker, mustWork) {
			t.Fatalf("%s from %s without rules: not received (%v): the probe is broken", p.name, from.name, err)
		}
	}
	for _, p := range v6 {
		if err := sendICMP(t, from, inet6, p.typ, p.body); err != nil || !at6.saw(marker, mustWork) {
			t.Fatalf("%s from %s without rules: not received (%v): the probe is broken", p.name, from.name, err)
		}
	}
}

// expectProbesStopped sends every tunnel probe from n to inet and fails
// if one arrives.
func expectProbesStopped(t *testing.T, from *testNS, at4, at6 *icmpSniffer) {
	t.Helper()
	marker := newMarker("tunnel")
	v4, v6 := tunnelProbes(marker)
	for _, p := range v4 {
		_ = sendICMP(t, from, inet4, p.typ, p.body)
		if at4.saw(marker, quiet) {
			t.Errorf("%s from %s reached inet", p.name, from.name)
		}
	}
	for _, p := range v6 {
		_ = sendICMP(t, from, inet6, p.typ, p.body)
		if at6.saw(marker, quiet) {
			t.Errorf("%s from %s reached inet", p.name, from.name)
		}
	}
}

// TestICMPIsNoTunnel: no ICMP query that can carry data leaves the
// sandbox, from a raw socket or from a ping socket that needs no
// capability; with AllowICMP, only small echo requests to allowDirect
// prefixes do, also when they reuse the identifier of an answered one.
func TestICMPIsNoTunnel(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, true)
	openPingGroups(t, l.sandbox)
	at4, at6 := sniffICMP(t, l.inet, false), sniffICMP(t, l.inet, true)
	expectProbesArrive(t, l.sandbox, at4, at6)
	expectProbesArrive(t, l.nested, at4, at6)
	for _, dst := range []netip.Addr{inet4, inet6} {
		if err := pingUnprivileged(l.sandbox, dst, newMarker("ping"), mustWork); err != nil {
			t.Fatalf("ping socket to %s without rules: %v: the probe is broken", dst, err)
		}
	}

	s := l.spec()
	s.AllowICMP = false
	l.apply(t, s)
	t.Run("without allowICMP", func(t *testing.T) {
		expectProbesStopped(t, l.sandbox, at4, at6)
		expectProbesStopped(t, l.nested, at4, at6)
		for _, dst := range []netip.Addr{inet4, inet6} {
			// A rejected IPv4 echo fails the send (EPERM); the IPv6
			// ping socket does not report it, and just gets no reply.
			marker := newMarker("ping")
			if err := pingUnprivileged(l.sandbox, dst, marker, mustFail); err == nil || errors.Is(err, errNoCaps) {
				t.Errorf("ping socket to %s: %v, want no reply", dst, err)
			}
			if at4.saw(marker, quiet) || at6.saw(marker, quiet) {
				t.Errorf("the ping socket's echo request reached %s", dst)
			}
			expectRejected(t, "small echo to "+dst.String(), func() error {
				return pingSized(l.sandbox, dst, 7, 56, newMarker("small"), mustFail)
			})
		}
	})

	s.AllowICMP = true
	s.Direct = []Direct{{Prefix: netip.PrefixFrom(inet4, 32), PortLo: 5432, PortHi: 5432}, {Prefix: netip.MustParsePrefix("2001:db8:1::/64")}}
	l.apply(t, s)
	t.Run("with allowICMP", func(t *testing.T) {
		expectProbesStopped(t, l.sandbox, at4, at6)
		expectProbesStopped(t, l.nested, at4, at6)
		for _, from := range []*testNS{l.sandbox, l.nested} {
			for _, dst := range []netip.Addr{inet4, inet6} {
				if err := pingSized(from, dst, 9, 56, newMarker("small"), mustWork); err != nil {
					t.Errorf("56-byte echo from %s to allowDirect %s: %v", from.name, dst, err)
				}
				if err := pingSized(from, dst, 9, 64, newMarker("limit"), mustWork); err != nil {
					t.Errorf("64-byte echo from %s to allowDirect %s: %v", from.name, dst, err)
				}
				// The same identifier again: conntrack calls it
				// established now, and it must still be small.
				marker := newMarker("big")
				if err := pingSized(from, dst, 9, 65, marker, mustFail); err == nil {
					t.Errorf("65-byte echo from %s to %s answered", from.name, dst)
				}
				if err := pingSized(from, dst, 9, 1000, marker, mustFail); err == nil {
					t.Errorf("1000-byte echo from %s to %s answered", from.name, dst)
				}
				if at4.saw(marker, quiet) || at6.saw(marker, quiet) {
					t.Errorf("a large echo from %s reached %s", from.name, dst)
				}
			}
		}
		for _, dst := range []netip.Addr{resolverA, resolverB} { // in inet, but not allowDirect
			expectRejected(t, "small echo to "+dst.String(), func() error {
				return pingSized(l.sandbox, dst, 11, 56, newMarker("other"), mustFail)
			})
		}
		for _, dst := range []netip.Addr{inet4, inet6} {
			if err := pingUnprivileged(l.sandbox, dst, newMarker("ping"), mustWork); err != nil {
				t.Errorf("ping socket to allowDirect %s: %v", dst, err)
			}
		}
	})
	t.Run("pings of the sandbox are answered", func(t *testing.T) {
		for _, dst := range []string{sandboxAddr4, sandboxAddr6} {
			if err := pingSized(l.inet, netip.MustParseAddr(dst), 13, 56, newMarker("in"), mustWork); err != nil {
				t.Errorf("ping from inet to the sandbox's %s: %v", dst, err)
			}
		}
	})
}

// TestICMPErrorsOfAdmittedFlows: the ICMP errors that keep admitted flows
// working leave the sandbox, to the flow's peer; other ICMP that conntrack
// relates to a flow (redirect, source quench) does not, nor an error about
// a flow conntrack never saw.
func TestICMPErrorsOfAdmittedFlows(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, false)
	s := l.spec()
	s.AllowICMP = false
	l.apply(t, s)
	at := sniffICMP(t, l.inet, false)

	// An admitted flow: DNS to the resolver from a known port.
	var c *net.UDPConn
	in(t, l.sandbox, func() (err error) {
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(sandboxAddr4)}, net.UDPAddrFromAddrPort(ap(resolver4+":53")))
		return err
	})
	defer c.Close()
	if _, err := c.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := c.Read(buf); err != nil {
		t.Fatalf("dns reply: %v", err)
	}
	flow := c.LocalAddr().(*net.UDPAddr).AddrPort()
	resolver := ap(resolver4 + ":53")

	marker := newMarker("unreach")
	if err := sendICMP(t, l.sandbox, resolverA, ipv4.ICMPTypeDestinationUnreachable, icmpErrorAbout(resolver, flow, marker)); err != nil {
		t.Errorf("port unreachable about the dns flow: %v", err)
	}
	if !at.saw(marker, mustWork) {
		t.Errorf("port unreachable about the dns flow did not reach the resolver")
	}
	for _, tc := range []struct {
		name string
		typ  icmp.Type
		src  netip.AddrPort
	}{
		{"redirect about the dns flow", ipv4.ICMPTypeRedirect, resolver},
		{"source quench about the dns flow", ipv4.ICMPType(4), resolver},
		{"port unreachable about no flow", ipv4.ICMPTypeDestinationUnreachable, ap(resolver4 + ":54")},
	} {
		marker := newMarker("related")
		err := sendICMP(t, l.sandbox, resolverA, tc.typ, icmpErrorAbout(tc.src, flow, marker))
		if !isRejection(err) {
			t.Errorf("%s: sent with %v, want it rejected", tc.name, err)
		}
		if at.saw(marker, quiet) {
			t.Errorf("%s reached the resolver", tc.name)
		}
	}

	// The kernel's own error about a datagram to a closed port of the
	// sandbox reaches the sender.
	var in4 *net.UDPConn
	in(t, l.inet, func() (err error) {
		in4, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(ap(sandboxAddr4+":9")))
		return err
	})
	defer in4.Close()
	_, _ = in4.Write([]byte("to a closed port"))
	_ = in4.SetReadDeadline(time.Now().Add(mustWork))
	if _, err := in4.Read(buf); !isRejection(err) {
		t.Errorf("udp from inet to a closed port of the sandbox: %v, want the sandbox's port unreachable (connection refused)", err)
	}
}

// TestRouterAdvertisementsRejected: the sandbox cannot make itself its
// neighbours' router.
func TestRouterAdvertisementsRejected(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, false)
	// A link-local address usable at once, to send from.
	l.sandbox.ip(t, "addr add fe80::2/64 dev eth0 nodad")
	src := netip.MustParseAddr("fe80::2")
	l.inet.sysctl(t, "net.ipv6.conf.eth0.forwarding", "0")
	l.inet.sysctl(t, "net.ipv6.conf.eth0.accept_ra", "1")
	l.inet.sysctl(t, "net.ipv6.conf.eth0.autoconf", "1")

	control := netip.MustParsePrefix("2001:db8:aa::/64")
	if err := sendRouterAdvert(t, l.sandbox, "eth0", src, routerAdvert(control)); err != nil {
		t.Fatalf("router advertisement without rules: %v", err)
	}
	if !eventually(func() bool { return l.inet.hasAddrIn(t, "eth0", control) && defaultRoute6(t, l.inet) != "" }) {
		t.Fatalf("inet took no address or route from the advertisement without rules: the probe is broken")
	}
	l.inet.ip(t, "-6 route flush default")
	at := sniffICMP(t, l.inet, true)
	marker := newMarker("redirect")
	if err := sendRedirect6(t, l.sandbox, marker); err != nil || !at.saw(marker, mustWork) {
		t.Fatalf("icmpv6 redirect without rules: not received (%v): the probe is broken", err)
	}

	l.apply(t, l.spec())
	rogue := netip.MustParsePrefix("2001:db8:bb::/64")
	err := sendRouterAdvert(t, l.sandbox, "eth0", src, routerAdvert(rogue))
	if !isRejection(err) {
		t.Errorf("router advertisement: sent with %v, want it rejected", err)
	}
	time.Sleep(quiet)
	if l.inet.hasAddrIn(t, "eth0", rogue) {
		t.Errorf("inet took an address in %v from the sandbox's advertisement", rogue)
	}
	if r := defaultRoute6(t, l.inet); r != "" {
		t.Errorf("inet took a default route from the sandbox's advertisement: %s", r)
	}

	// Nor can it redirect them.
	marker = newMarker("redirect")
	if err := sendRedirect6(t, l.sandbox, marker); !isRejection(err) {
		t.Errorf("icmpv6 redirect: sent with %v, want it rejected", err)
	}
	if at.saw(marker, quiet) {
		t.Errorf("inet received the sandbox's icmpv6 redirect")
	}
}

// sendRedirect6 sends from n to inet an ICMPv6 redirect (target,
// destination, then marker) with hop limit 255 over a raw socket, and
// returns the error of the send.
func sendRedirect6(t *testing.T, n *testNS, marker []byte) error {
	t.Helper()
	target, dst := netip.MustParseAddr("fe80::2").As16(), inet6.As16()
	msg, err := (&icmp.Message{Type: ipv6.ICMPTypeRedirect,
		Body: &icmp.RawBody{Data: concat(make([]byte, 4), target[:], dst[:], marker)}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	var c net.PacketConn
	in(t, n, func() (err error) { c, err = net.ListenPacket("ip6:ipv6-icmp", "::"); return err })
	defer c.Close()
	if err := ipv6.NewPacketConn(c).SetHopLimit(255); err != nil {
		t.Fatal(err)
	}
	_, err = c.WriteTo(msg, &net.IPAddr{IP: inet6.AsSlice()})
	return err
}

// defaultRoute6 returns n's IPv6 default routes as ip prints them.
func defaultRoute6(t *testing.T, n *testNS) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", n.name, "-6", "route", "show", "default").CombinedOutput()
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
