package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/integration/testnet"
)

// The host's "LAN" in TestCNIPrivateUpstreams: a namespace behind a veth
// of the host namespace, on private addresses. The host reaches it (a
// connected subnet); the fake internet does not.
var (
	lanHost4 = netip.MustParsePrefix("10.9.0.1/24")
	lanHost6 = netip.MustParsePrefix("fd00:9::1/64")
	lanAddr4 = netip.MustParseAddr("10.9.0.2")
	lanAddr6 = netip.MustParseAddr("fd00:9::2")
	// peerAddr is another "sandbox" on the CNI bridge dmbr0
	// (198.51.100.128/26), above what host-local hands out here.
	peerAddr4 = netip.MustParseAddr("198.51.100.190")
)

const (
	wildZone   = "wild.example.test" // the policy allows *.wild.example.test
	rebindName = "rebind." + wildZone
	peerName   = "peer." + wildZone
	mixedName  = "mixed." + wildZone
	mixedAddr  = "203.0.113.40"
)

// countingServer counts what reaches one port of a namespace's address;
// an HTTP one answers every request with "lan\n".
type countingServer struct {
	conns, bytes atomic.Int64
}

// lanServers listens on ports of addrs inside ns (port 80 speaking HTTP)
// until the test ends, and returns the counters by port.
func lanServers(t *testing.T, ns *testnet.Netns, addrs []netip.Addr, ports ...uint16) map[uint16]*countingServer {
	t.Helper()
	servers := map[uint16]*countingServer{}
	var lns []net.Listener
	err := ns.Do(func() error {
		for _, port := range ports {
			for _, a := range addrs {
				ln, err := net.Listen("tcp", netip.AddrPortFrom(a, port).String())
				if err != nil {
					return err
				}
				lns = append(lns, ln)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", ns.Name(), err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for _, ln := range lns {
		t.Cleanup(func() { ln.Close() })
		port := netip.MustParseAddrPort(ln.Addr().String()).Port()
		srv := servers[port]
		if srv == nil {
			srv = &countingServer{}
			servers[port] = srv
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				srv.conns.Add(1)
				go serveCounting(c, srv, port == 80)
			}
		}()
	}
	return servers
}

// serveCounting counts c's bytes until EOF; for HTTP it answers the first
// request head.
func serveCounting(c net.Conn, srv *countingServer, http bool) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		srv.bytes.Add(int64(len(line)))
		if err != nil {
			return
		}
		if http && line == "\r\n" {
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nlan\n"))
			return
		}
	}
}

// ipIn runs `ip -n ns args...`.
func ipIn(t *testing.T, ns string, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
}

// helloThenRaw sends, from ns, a ClientHello for name and then raw bytes
// to dst, and returns what came back until the connection closed (or a
// few seconds passed) and the number of bytes sent.
func helloThenRaw(t *testing.T, ns *testnet.Netns, dst netip.AddrPort, name string) ([]byte, int) {
	t.Helper()
	hello, err := benchClientHello(name)
	if err != nil {
		t.Fatal(err)
	}
	payload := append(hello, "*1\r\n$4\r\nPING\r\n"...)
	c, err := ns.DialTCP(dst.String())
	if err != nil {
		t.Fatalf("connect to %v: %v", dst, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(payload)
	c.CloseWrite()
	var got []byte
	buf := make([]byte, 512)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, len(payload)
		}
	}
}

// dnsAnswer asks the sandbox's resolver for name from inside ns.
func dnsAnswer(t *testing.T, e *cniEnv, ns *testnet.Netns, name string, qtype uint16) *dns.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false)
	r, err := ns.ExchangeDNS(ctx, "udp", netip.AddrPortFrom(e.net.DNS, 53), m)
	if err != nil {
		t.Fatalf("query %s %s: %v", name, dns.Type(qtype), err)
	}
	return r
}

// TestCNIPrivateUpstreams: an allowed wildcard name whose DNS points at
// the host's LAN (a private address on a link of the host namespace,
// where the proxy lives) or at another sandbox on the bridge gets nothing
// there: HTTP gets a 403, TLS the access_denied alert, a ClientHello
// followed by raw bytes to the LAN's database port the alert too, and 0
// bytes arrive; the sandbox's own DNS answer for the name is REFUSED. The
// positive control: with address entries for those ranges, the same bytes
// do arrive, so the test can fail.
func TestCNIPrivateUpstreams(t *testing.T) {
	e := newCNIEnv(t)
	host := e.net.HostNS().Name()

	// The LAN: a namespace behind a veth of the host namespace.
	lan := e.net.NewNetns(t, "lan")
	ipIn(t, host, "link", "add", "dmlan0", "type", "veth", "peer", "name", "eth0", "netns", lan.Name())
	ipIn(t, host, "addr", "add", lanHost4.String(), "dev", "dmlan0")
	ipIn(t, host, "addr", "add", lanHost6.String(), "dev", "dmlan0", "nodad")
	ipIn(t, host, "link", "set", "dmlan0", "up")
	ipIn(t, lan.Name(), "addr", "add", netip.PrefixFrom(lanAddr4, 24).String(), "dev", "eth0")
	ipIn(t, lan.Name(), "addr", "add", netip.PrefixFrom(lanAddr6, 64).String(), "dev", "eth0", "nodad")
	ipIn(t, lan.Name(), "link", "set", "eth0", "up")
	lanSrv := lanServers(t, lan, []netip.Addr{lanAddr4, lanAddr6}, 80, 443, 6379)

	e.net.AddRecord(rebindName, lanAddr4, lanAddr6)
	e.net.AddRecord(peerName, peerAddr4)
	e.net.AddHost(mixedName, netip.MustParseAddr(mixedAddr))
	e.net.AddRecord(mixedName, lanAddr4)

	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"allowedHosts": []string{apiName, "*." + wildZone}}))

	// Another "sandbox" on the bridge the CNI plugin made: a namespace
	// whose veth is a port of dmbr0.
	peer := e.net.NewNetns(t, "peer")
	ipIn(t, host, "link", "add", "dmpeer0", "type", "veth", "peer", "name", "eth0", "netns", peer.Name())
	ipIn(t, host, "link", "set", "dmpeer0", "master", "dmbr0")
	ipIn(t, host, "link", "set", "dmpeer0", "up")
	ipIn(t, peer.Name(), "addr", "add", netip.PrefixFrom(peerAddr4, 26).String(), "dev", "eth0")
	ipIn(t, peer.Name(), "link", "set", "eth0", "up")
	peerSrv := lanServers(t, peer, []netip.Addr{peerAddr4}, 443)

	// HTTP and TLS, with the name sent to an address of the client's
	// choice (the proxy dials the name's addresses).
	r := curl(t, c.ns, e.caFile, "-w", "%{http_code}", "--resolve", rebindName+":80:"+evilAddr4.String(), "http://"+rebindName+"/")
	if !strings.HasSuffix(r.stdout, "403") || strings.Contains(r.stdout, lanAddr4.String()) {
		t.Errorf("HTTP to %s: want a 403 that does not name the LAN address, got %v", rebindName, r)
	}
	r = curl(t, c.ns, e.caFile, "--resolve", rebindName+":443:"+evilAddr4.String(), "https://"+rebindName+"/")
	if r.exit == 0 || !strings.Contains(strings.ToLower(r.stderr), "access denied") {
		t.Errorf("HTTPS to %s: want a TLS access_denied alert, got %v", rebindName, r)
	}
	d := e.waitDecision(c, func(m map[string]any) bool { return m["name"] == rebindName && m["proto"] == "tls" })
	reason := fmt.Sprint(d["reason"])
	if d["verdict"] != "deny" || !strings.HasPrefix(reason, "private upstream ") ||
		!strings.Contains(reason, "private upstream 10.9.0.2: connected subnet 10.9.0.0/24 of the proxy's host") ||
		!strings.Contains(reason, "private upstream fd00:9::2: connected subnet fd00:9::/64 of the proxy's host") ||
		(d["upstream"] != "10.9.0.2:443" && d["upstream"] != "[fd00:9::2]:443") {
		t.Errorf("decision %v, want deny, both LAN addresses as private upstreams, and one as upstream", d)
	}
	// A ClientHello, then raw bytes, to the LAN database's port.
	got, _ := helloThenRaw(t, c.ns, netip.AddrPortFrom(evilAddr4, 6379), rebindName)
	if string(got) != "\x15\x03\x03\x00\x02\x02\x31" {
		t.Errorf("ClientHello for %s to port 6379: got %x, want the access_denied alert", rebindName, got)
	}
	// By address, to the LAN and to the neighbour: no entry admits them.
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(lanAddr4, 6379), netip.AddrPortFrom(lanAddr6, 6379), netip.AddrPortFrom(peerAddr4, 443),
	} {
		if err := tcpSendRecv(c.ns, dst, "*1\r\n$4\r\nPING\r\n"); err == nil {
			t.Errorf("raw TCP to %v got a reply", dst)
		}
	}
	// Another sandbox on the bridge, by name.
	r = curl(t, c.ns, e.caFile, "--resolve", peerName+":443:"+evilAddr4.String(), "https://"+peerName+"/")
	if r.exit == 0 || !strings.Contains(strings.ToLower(r.stderr), "access denied") {
		t.Errorf("HTTPS to %s: want a TLS access_denied alert, got %v", peerName, r)
	}
	d = e.waitDecision(c, decided(peerName, "deny"))
	if want := "private upstream 198.51.100.190: connected subnet 198.51.100.128/26 of the proxy's host"; d["reason"] != want || d["upstream"] != "198.51.100.190:443" {
		t.Errorf("decision %v, want reason %q", d, want)
	}
	// A name with a public and a private address reaches the public one.
	r = curl(t, c.ns, e.caFile, "--resolve", mixedName+":443:"+evilAddr4.String(), "https://"+mixedName+"/")
	if r.exit != 0 || !strings.HasPrefix(r.stdout, mixedName+" "+mixedAddr+":443 ") {
		t.Errorf("HTTPS to %s: want its public address to answer, got %v", mixedName, r)
	}

	// The sandbox does not even learn the private addresses.
	for _, tc := range []struct {
		name  string
		qtype uint16
	}{{rebindName, dns.TypeA}, {rebindName, dns.TypeAAAA}, {peerName, dns.TypeA}} {
		r := dnsAnswer(t, e, c.ns, tc.name, tc.qtype)
		if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Errorf("DNS %s %s from the sandbox: %s %v, want REFUSED and no answer", tc.name, dns.Type(tc.qtype), dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	e.waitDNSDecision(c, rebindName, "deny")
	if r := dnsAnswer(t, e, c.ns, mixedName, dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 ||
		r.Answer[0].(*dns.A).A.String() != mixedAddr {
		t.Errorf("DNS %s A from the sandbox: %v, want only %s", mixedName, r, mixedAddr)
	}

	for port, srv := range lanSrv {
		if n, b := srv.conns.Load(), srv.bytes.Load(); n != 0 || b != 0 {
			t.Errorf("LAN port %d: %d connections, %d bytes arrived", port, n, b)
		}
	}
	if n := peerSrv[443].conns.Load(); n != 0 {
		t.Errorf("the neighbour on the bridge got %d connections", n)
	}
	if t.Failed() {
		return
	}

	// The positive control: address entries for the LAN and the bridge.
	c2 := e.newContainer()
	e.mustAdd(c2, e.conflist(map[string]any{"allowedHosts": []string{
		apiName, "*." + wildZone, "10.9.0.0/24", "fd00:9::/64", "198.51.100.128/26",
	}}))
	if r := dnsAnswer(t, e, c2.ns, rebindName, dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != lanAddr4.String() {
		t.Errorf("DNS %s A, LAN admitted: %v, want %s", rebindName, r, lanAddr4)
	}
	r = curl(t, c2.ns, e.caFile, "--resolve", rebindName+":80:"+evilAddr4.String(), "http://"+rebindName+"/")
	if r.exit != 0 || r.stdout != "lan\n" {
		t.Errorf("HTTP to %s, LAN admitted: %v", rebindName, r)
	}
	if n := lanSrv[80].bytes.Load(); n == 0 {
		t.Errorf("LAN admitted: no HTTP bytes arrived")
	}
	_, sent := helloThenRaw(t, c2.ns, netip.AddrPortFrom(evilAddr4, 6379), rebindName)
	waitCount(t, &lanSrv[6379].bytes, int64(sent), "LAN port 6379, ClientHello and raw bytes")
	_, sent = helloThenRaw(t, c2.ns, netip.AddrPortFrom(evilAddr4, 443), peerName)
	waitCount(t, &peerSrv[443].bytes, int64(sent), "the neighbour's port 443")
	d = e.waitDecision(c2, func(m map[string]any) bool {
		return m["name"] == rebindName && m["upstream"] != nil && m["verdict"] == "allow"
	})
	if up := fmt.Sprint(d["upstream"]); up != "10.9.0.2:80" && up != "10.9.0.2:6379" && up != "[fd00:9::2]:80" && up != "[fd00:9::2]:6379" {
		t.Errorf("decision %v: want the LAN as upstream", d)
	}
}

// waitCount waits until n reaches want, for a few seconds, and fails if
// it does not.
func waitCount(t *testing.T, n *atomic.Int64, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := n.Load(); got != want {
		t.Errorf("%s: %d bytes arrived, want %d", what, got, want)
	}
}
