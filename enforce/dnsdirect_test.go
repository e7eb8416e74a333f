package enforce

import (
	"net"
	"net/netip"
	"testing"
)

// TestDNSToFilterAndDirect covers the DNS filter redirect and allowDirect:
// DNS to a resolver lands on the filter's sockets in the sandbox (UDP and
// TCP), never on the resolver; an allowDirect destination is reached
// directly, not through the proxy; the filter ports refuse direct use.
func TestDNSToFilterAndDirect(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, false)
	// Bound to 127.0.0.1, where nat-output's redirect sends local
	// traffic, so that the echo's source address matches the reply
	// conntrack expects (the real filter answers from the address each
	// query came to, with IP_PKTINFO).
	filterUDP4 := listenUDP(t, l.sandbox, "127.0.0.1:0")
	echoUDP(filterUDP4)
	dnsPort := uint16(filterUDP4.LocalAddr().(*net.UDPAddr).Port)
	filterTCP4 := listenTCP(t, l.sandbox, netip.AddrPortFrom(netip.IPv4Unspecified(), dnsPort).String())
	serveTCP(filterTCP4, "filter")
	direct := listenTCP(t, l.inet, inetAddr4+":5432")
	serveTCP(direct, "database")

	s := l.spec()
	s.DNSPort4 = dnsPort
	s.Direct = []Direct{{Prefix: netip.PrefixFrom(inet4, 32), PortLo: 5432, PortHi: 5432}}
	l.apply(t, s)

	// UDP DNS to the v4 resolver: answered by the filter (it echoes too,
	// so check the resolver heard nothing).
	if reply, err := udpExchange(l.sandbox, resolver4+":53", []byte("query"), mustWork); err != nil || string(reply) != "re:query" {
		t.Fatalf("udp dns via the filter: %q %v", reply, err)
	}
	expectNoDatagram(t, l.dns4, "the real resolver (udp)")
	// TCP DNS to the v4 resolver: the filter answers.
	c, err := dialTCP(l.sandbox, resolver4+":53", mustWork)
	if err != nil {
		t.Fatalf("tcp dns via the filter: %v", err)
	}
	if got, err := readGreeting(c); err != nil || got != "hello from filter" {
		t.Fatalf("tcp dns answered by %q (%v), want the filter", got, err)
	}
	c.Close()
	// The v6 resolver has no filter port: it is still reached directly.
	if reply, err := udpExchange(l.sandbox, "["+resolver6+"]:53", []byte("q6"), mustWork); err != nil || string(reply) != "re:q6" {
		t.Fatalf("udp dns to the v6 resolver: %q %v", reply, err)
	}
	// allowDirect: reached directly, not redirected to the proxy.
	d, err := dialTCP(l.sandbox, inet4.String()+":5432", mustWork)
	if err != nil {
		t.Fatalf("allowDirect: %v", err)
	}
	if got, err := readGreeting(d); err != nil || got != "hello from database" {
		t.Fatalf("allowDirect answered by %q (%v), want the database", got, err)
	}
	d.Close()
	// Direct use of the filter ports from outside is refused.
	expectRejected(t, "tcp from inet to the filter port", func() error {
		c, err := dialTCP(l.inet, netip.AddrPortFrom(netip.MustParseAddr(sandboxAddr4), dnsPort).String(), mustFail)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err := Check(l.sandbox.path, s); err != nil {
		t.Fatalf("Check: %v", err)
	}
}
