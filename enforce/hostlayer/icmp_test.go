package hostlayer

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// TestICMPOnTheHostSide: with the sandbox's own rules gone (the lab's
// sandboxes have none), no ICMP query that can carry data leaves a bridged
// or a routed sandbox, from a raw socket or from a ping socket that needs
// no capability, to the internet, the host or a neighbour; with
// AllowICMP, only small echo requests to allowDirect prefixes do.
func TestICMPOnTheHostSide(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	for _, n := range []*testNS{l.a, l.b, l.c} {
		n.sysctl(t, "net.ipv4.ping_group_range", "0 2147483647")
	}
	l.warmUp(t)
	at4, at6 := sniffICMP(t, l.inet, false), sniffICMP(t, l.inet, true)
	inet4a, inet6a := netip.MustParseAddr(inet4), netip.MustParseAddr(inet6)

	// b has no layer: what it sends arrives, so the probes can fail.
	marker := newMarker("control")
	v4, v6 := tunnelProbes(marker)
	for _, p := range v4 {
		sendICMP(t, l.b, inet4a, p.typ, p.body)
		if !at4.saw(marker, mustWork) {
			t.Fatalf("%s from b (no layer) did not arrive: the probe is broken", p.name)
		}
	}
	for _, p := range v6 {
		sendICMP(t, l.b, inet6a, p.typ, p.body)
		if !at6.saw(marker, mustWork) {
			t.Fatalf("%s from b (no layer) did not arrive: the probe is broken", p.name)
		}
	}
	for _, dst := range []netip.Addr{inet4a, inet6a} {
		if err := pingUnprivileged(l.b, dst, newMarker("ping"), mustWork); err != nil {
			t.Fatalf("ping socket from b (no layer) to %s: %v: the probe is broken", dst, err)
		}
	}

	specA := l.spec(t, "ctr-a", l.a, "veth-a", false)
	specC := l.spec(t, "ctr-c", l.c, "veth-c", false)
	l.apply(t, specA)
	l.apply(t, specC)
	stopped := func(t *testing.T) {
		for _, from := range []*testNS{l.a, l.c} {
			marker := newMarker("tunnel")
			v4, v6 := tunnelProbes(marker)
			for _, p := range v4 {
				sendICMP(t, from, inet4a, p.typ, p.body)
				if at4.saw(marker, quiet) {
					t.Errorf("%s from %s reached inet", p.name, from.name)
				}
			}
			for _, p := range v6 {
				sendICMP(t, from, inet6a, p.typ, p.body)
				if at6.saw(marker, quiet) {
					t.Errorf("%s from %s reached inet", p.name, from.name)
				}
			}
			// Neither the host itself nor a neighbour is a way either.
			// (uplink4 is in allowDirect 203.0.113.0/28.)
			for _, dst := range []string{gw4, gwC4, sbxB4, sbxA4} {
				if dst == sbxA4 && from == l.a {
					continue
				}
				if err := pingSized(from, netip.MustParseAddr(dst), 21, 56, newMarker("near"), mustFail); err == nil {
					t.Errorf("echo from %s to %s (not allowDirect) answered", from.name, dst)
				}
			}
		}
	}

	t.Run("without allowICMP", func(t *testing.T) {
		stopped(t)
		for _, from := range []*testNS{l.a, l.c} {
			for _, dst := range []netip.Addr{inet4a, inet6a} {
				marker := newMarker("ping")
				if err := pingUnprivileged(from, dst, marker, mustFail); err == nil {
					t.Errorf("ping socket from %s to %s answered", from.name, dst)
				}
				if at4.saw(marker, quiet) || at6.saw(marker, quiet) {
					t.Errorf("the ping socket's echo from %s reached %s", from.name, dst)
				}
				if err := pingSized(from, dst, 22, 56, newMarker("small"), mustFail); err == nil {
					t.Errorf("small echo from %s to allowDirect %s answered without allowICMP", from.name, dst)
				}
			}
		}
	})

	specA.AllowICMP, specC.AllowICMP = true, true
	l.apply(t, specA)
	l.apply(t, specC)
	t.Run("with allowICMP", func(t *testing.T) {
		stopped(t)
		for _, from := range []*testNS{l.a, l.c} {
			for _, dst := range []netip.Addr{inet4a, inet6a} { // allowDirect, with a port
				if err := pingSized(from, dst, 23, 56, newMarker("small"), mustWork); err != nil {
					t.Errorf("56-byte echo from %s to allowDirect %s: %v", from.name, dst, err)
				}
				if err := pingSized(from, dst, 23, 64, newMarker("limit"), mustWork); err != nil {
					t.Errorf("64-byte echo from %s to allowDirect %s: %v", from.name, dst, err)
				}
				for _, size := range []int{65, 1000} {
					marker := newMarker("big")
					if err := pingSized(from, dst, 23, size, marker, mustFail); err == nil {
						t.Errorf("%d-byte echo from %s to %s answered", size, from.name, dst)
					}
					if at4.saw(marker, quiet) || at6.saw(marker, quiet) {
						t.Errorf("a %d-byte echo from %s reached %s", size, from.name, dst)
					}
				}
				if err := pingUnprivileged(from, dst, newMarker("ping"), mustWork); err != nil {
					t.Errorf("ping socket from %s to allowDirect %s: %v", from.name, dst, err)
				}
			}
			for _, dst := range []string{resolver4, resolver6} { // in inet, but not allowDirect
				if err := pingSized(from, netip.MustParseAddr(dst), 24, 56, newMarker("other"), mustFail); err == nil {
					t.Errorf("echo from %s to %s (not allowDirect) answered", from.name, dst)
				}
			}
		}
	})
	t.Run("pings of the sandbox are answered", func(t *testing.T) {
		for _, dst := range []string{sbxA4, sbxA6, sbxC4, sbxC6} {
			if err := pingSized(l.inet, netip.MustParseAddr(dst), 25, 56, newMarker("in"), mustWork); err != nil {
				t.Errorf("ping from inet to %s: %v", dst, err)
			}
		}
	})
}

// TestICMPErrorsOnTheHostSide: the ICMP errors of a flow the layer
// admitted reach the flow's peer; other ICMP that conntrack relates to it,
// and errors about flows it never saw, do not.
func TestICMPErrorsOnTheHostSide(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	l.apply(t, l.spec(t, "ctr-a", l.a, "veth-a", false))
	at := sniffICMP(t, l.inet, false)

	var c *net.UDPConn
	in(t, l.a, func() (err error) {
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(sbxA4)}, net.UDPAddrFromAddrPort(ap(hostPort(resolver4, 53))))
		return err
	})
	defer c.Close()
	if _, err := c.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	_ = c.SetReadDeadline(time.Now().Add(mustWork))
	if _, err := c.Read(buf); err != nil {
		t.Fatalf("dns reply: %v", err)
	}
	flow := c.LocalAddr().(*net.UDPAddr).AddrPort()
	resolver := ap(hostPort(resolver4, 53))

	marker := newMarker("unreach")
	sendICMP(t, l.a, resolver.Addr(), ipv4.ICMPTypeDestinationUnreachable, icmpErrorAbout(resolver, flow, marker))
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
		{"port unreachable about no flow", ipv4.ICMPTypeDestinationUnreachable, ap(hostPort(resolver4, 54))},
	} {
		marker := newMarker("related")
		sendICMP(t, l.a, resolver.Addr(), tc.typ, icmpErrorAbout(tc.src, flow, marker))
		if at.saw(marker, quiet) {
			t.Errorf("%s reached the resolver", tc.name)
		}
	}
}
