package enforce

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

var (
	inet4, inet6         = netip.MustParseAddr(inetAddr4), netip.MustParseAddr(inetAddr6)
	resolverA, resolverB = netip.MustParseAddr(resolver4), netip.MustParseAddr(resolver6)
)

// lab is a topology with the stand-ins of everything the ruleset meets:
// proxy listeners in the sandbox, web, DNS and other UDP servers in inet.
type lab struct {
	*topology
	proxy4, proxy6 *net.TCPListener // stand-ins for the proxy, in the sandbox
	web4, web6     *net.TCPListener // inet :80
	dns4, dns6     *net.UDPConn     // resolvers :53
	dnsTCP4        *net.TCPListener // resolver4 :53 over TCP
	udpOther       []*net.UDPConn   // inet UDP servers that must never hear anything
}

func newLab(t *testing.T, withNested bool) *lab {
	t.Helper()
	l := &lab{topology: newTopology(t, withNested)}
	l.proxy4 = listenTCP(t, l.sandbox, "0.0.0.0:0")
	l.proxy6 = listenTCP(t, l.sandbox, "[::]:0")
	l.web4 = listenTCP(t, l.inet, inetAddr4+":80")
	l.web6 = listenTCP(t, l.inet, "["+inetAddr6+"]:80")
	l.dns4 = listenUDP(t, l.inet, resolver4+":53")
	l.dns6 = listenUDP(t, l.inet, "["+resolver6+"]:53")
	echoUDP(l.dns4)
	echoUDP(l.dns6)
	l.dnsTCP4 = listenTCP(t, l.inet, resolver4+":53")
	serveTCP(l.dnsTCP4, "resolver")
	for _, a := range []string{
		inetAddr4 + ":5353", "[" + inetAddr6 + "]:5353", // not a resolver, not DNS
		resolver4 + ":5353", "[" + resolver6 + "]:5353", // a resolver, not DNS
		inetAddr4 + ":53", "[" + inetAddr6 + "]:53", // DNS, not a resolver
	} {
		l.udpOther = append(l.udpOther, listenUDP(t, l.inet, a))
	}
	return l
}

func (l *lab) spec() Spec {
	return Spec{Port4: port(l.proxy4), Port6: port(l.proxy6), Resolvers: []netip.Addr{resolverA, resolverB}, AllowICMP: true}
}

func (l *lab) apply(t *testing.T, s Spec) {
	t.Helper()
	if err := Apply(l.sandbox.path, s); err != nil {
		t.Fatal(err)
	}
	if err := Check(l.sandbox.path, s); err != nil {
		t.Fatalf("Check right after Apply: %v", err)
	}
}

// expectRedirected dials dst from inside n and checks that the connection
// lands on proxy, with dst as its original destination, and not on web.
func expectRedirected(t *testing.T, n *testNS, dst string, proxy, web *net.TCPListener) {
	t.Helper()
	c, err := dialTCP(n, dst, mustWork)
	if err != nil {
		t.Errorf("connect to %s from %s: %v", dst, n.name, err)
		return
	}
	defer c.Close()
	got, err := acceptWithin(proxy, mustWork)
	if err != nil {
		t.Errorf("connect to %s from %s: proxy saw nothing: %v", dst, n.name, err)
		return
	}
	defer got.Close()
	if got.RemoteAddr().String() != c.LocalAddr().String() {
		t.Errorf("proxy accepted %s, want the probe's %s", got.RemoteAddr(), c.LocalAddr())
	}
	orig, err := originalDst(got)
	if err != nil {
		t.Errorf("original destination of %s: %v", dst, err)
	} else if orig != ap(dst) {
		t.Errorf("original destination = %s, want %s", orig, dst)
	}
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Errorf("write through redirect: %v", err)
	}
	expectNoConn(t, web, "inet web server "+dst)
}

func TestEnforceAllowlist(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, true)
	l.apply(t, l.spec())

	t.Run("tcp is redirected to the proxy", func(t *testing.T) {
		expectRedirected(t, l.sandbox, inetAddr4+":80", l.proxy4, l.web4)
		expectRedirected(t, l.sandbox, "["+inetAddr6+"]:80", l.proxy6, l.web6)
	})
	t.Run("tcp of nested containers is redirected to the proxy", func(t *testing.T) {
		expectRedirected(t, l.nested, inetAddr4+":80", l.proxy4, l.web4)
		expectRedirected(t, l.nested, "["+inetAddr6+"]:80", l.proxy6, l.web6)
	})
	t.Run("udp is rejected but dns to the resolvers", func(t *testing.T) {
		for _, from := range []*testNS{l.sandbox, l.nested} {
			for _, other := range l.udpOther {
				dst := other.LocalAddr().String()
				expectRejected(t, "udp from "+from.name+" to "+dst, func() error {
					_, err := udpExchange(from, dst, []byte("leak"), mustFail)
					return err
				})
			}
			for _, dst := range []string{resolver4 + ":53", "[" + resolver6 + "]:53"} {
				reply, err := udpExchange(from, dst, []byte("query"), mustWork)
				if err != nil || string(reply) != "re:query" {
					t.Errorf("dns from %s to %s: reply %q, %v", from.name, dst, reply, err)
				}
			}
		}
		for _, other := range l.udpOther {
			expectNoDatagram(t, other, "inet udp server "+other.LocalAddr().String())
		}
	})
	t.Run("tcp dns to a resolver is not redirected", func(t *testing.T) {
		for _, from := range []*testNS{l.sandbox, l.nested} {
			c, err := dialTCP(from, resolver4+":53", mustWork)
			if err != nil {
				t.Errorf("tcp dns from %s: %v", from.name, err)
				continue
			}
			got, err := readGreeting(c)
			c.Close()
			if got != "hello from resolver" {
				t.Errorf("tcp dns from %s reached %q (%v), want the resolver", from.name, got, err)
			}
		}
		expectNoConn(t, l.proxy4, "proxy")
	})
	t.Run("icmp is rejected but for allowDirect", func(t *testing.T) {
		// AllowICMP admits echo requests to allowDirect prefixes
		// only, and the spec has none.
		for _, dst := range []netip.Addr{inet4, inet6} {
			expectRejected(t, "ping "+dst.String()+" from the sandbox", func() error { return ping(l.sandbox, dst, mustFail) })
			// Forwarded, the echo is answered by the sandbox's
			// admin-prohibited error.
			if err := ping(l.nested, dst, mustFail); err == nil || !strings.Contains(err.Error(), "destination unreachable") {
				t.Errorf("ping %s from the nested netns: %v, want destination unreachable", dst, err)
			}
		}
	})
	t.Run("proxy ports refuse direct connections", func(t *testing.T) {
		for _, dst := range []string{
			hostPort(netip.MustParseAddr(sandboxAddr4), port(l.proxy4)),
			hostPort(netip.MustParseAddr(sandboxAddr6), port(l.proxy6)),
		} {
			expectRejected(t, "direct connection from inet to "+dst, func() error {
				c, err := dialTCP(l.inet, dst, mustFail)
				if err == nil {
					c.Close()
				}
				return err
			})
		}
		for _, dst := range []string{
			hostPort(netip.MustParseAddr("127.0.0.1"), port(l.proxy4)),
			hostPort(netip.IPv6Loopback(), port(l.proxy6)),
		} {
			expectRejected(t, "direct connection inside the sandbox to "+dst, func() error {
				c, err := dialTCP(l.sandbox, dst, mustFail)
				if err == nil {
					c.Close()
				}
				return err
			})
		}
		expectNoConn(t, l.proxy4, "proxy (ipv4)")
		expectNoConn(t, l.proxy6, "proxy (ipv6)")
	})
	t.Run("inbound connections and their replies work", func(t *testing.T) {
		svc := listenTCP(t, l.sandbox, "0.0.0.0:0")
		serveTCP(svc, "sandbox service")
		c, err := dialTCP(l.inet, hostPort(netip.MustParseAddr(sandboxAddr4), port(svc)), mustWork)
		if err != nil {
			t.Fatalf("connect from inet to a sandbox service: %v", err)
		}
		defer c.Close()
		if got, err := readGreeting(c); got != "hello from sandbox service" {
			t.Errorf("sandbox service answered %q, %v", got, err)
		}
	})
	t.Run("loopback works", func(t *testing.T) {
		for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
			svc := listenTCP(t, l.sandbox, addr)
			serveTCP(svc, "loopback")
			c, err := dialTCP(l.sandbox, svc.Addr().String(), mustWork)
			if err != nil {
				t.Errorf("loopback connect to %s: %v", svc.Addr(), err)
				continue
			}
			if got, err := readGreeting(c); got != "hello from loopback" {
				t.Errorf("loopback %s answered %q, %v", svc.Addr(), got, err)
			}
			c.Close()
		}
	})
}

func TestEnforceNoICMP(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, false)
	s := l.spec()
	s.AllowICMP = false
	l.apply(t, s)

	s.Direct = []Direct{{Prefix: netip.PrefixFrom(inet4, 32)}, {Prefix: netip.PrefixFrom(inet6, 128)}}
	l.apply(t, s)
	for _, dst := range []netip.Addr{inet4, inet6} {
		expectRejected(t, "ping allowDirect "+dst.String(), func() error { return ping(l.sandbox, dst, mustFail) })
	}
	// The neighbour cache is empty: reaching the IPv6 resolver needs
	// neighbour discovery, which stays allowed.
	reply, err := udpExchange(l.sandbox, "["+resolver6+"]:53", []byte("query"), mustWork)
	if err != nil || string(reply) != "re:query" {
		t.Errorf("dns over IPv6 with ICMP disallowed: reply %q, %v", reply, err)
	}
}

func TestEnforceFamilyWithoutListener(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, false)
	s := l.spec()
	s.Port6 = 0
	l.apply(t, s)

	expectRedirected(t, l.sandbox, inetAddr4+":80", l.proxy4, l.web4)
	expectRejected(t, "ipv6 tcp without a listener", func() error {
		c, err := dialTCP(l.sandbox, "["+inetAddr6+"]:80", mustFail)
		if err == nil {
			c.Close()
		}
		return err
	})
	expectNoConn(t, l.proxy6, "ipv6 proxy")
	expectNoConn(t, l.web6, "inet ipv6 web server")
}

func TestEnforceDenyAll(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, false)
	s := l.spec()
	s.DenyAll = true
	l.apply(t, s)

	for _, dst := range []string{inetAddr4 + ":80", "[" + inetAddr6 + "]:80"} {
		expectRejected(t, "tcp to "+dst, func() error {
			c, err := dialTCP(l.sandbox, dst, mustFail)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	for _, dst := range []string{resolver4 + ":53", "[" + resolver6 + "]:53", inetAddr4 + ":5353"} {
		expectRejected(t, "udp to "+dst, func() error {
			_, err := udpExchange(l.sandbox, dst, []byte("leak"), mustFail)
			return err
		})
	}
	expectRejected(t, "ping", func() error { return ping(l.sandbox, inet4, mustFail) })
	expectNoConn(t, l.proxy4, "proxy")
	expectNoConn(t, l.web4, "inet web server")
	expectNoDatagram(t, l.dns4, "resolver")

	svc := listenTCP(t, l.sandbox, "127.0.0.1:0")
	serveTCP(svc, "loopback")
	c, err := dialTCP(l.sandbox, svc.Addr().String(), mustWork)
	if err != nil {
		t.Fatalf("loopback in mode none: %v", err)
	}
	defer c.Close()
	if got, err := readGreeting(c); got != "hello from loopback" {
		t.Errorf("loopback in mode none answered %q, %v", got, err)
	}
}

// addDockerDNSTable imitates what Docker installs in a container netns for
// its embedded DNS server: table ip nat with an output chain that sends
// 127.0.0.11:53 to the server's real UDP and TCP ports. It also adds an
// empty table inet other.
func addDockerDNSTable(t *testing.T, n *testNS, udpPort, tcpPort uint16) {
	t.Helper()
	withConn(t, n, func(c *nftables.Conn) {
		tbl := c.AddTable(&nftables.Table{Name: "nat", Family: nftables.TableFamilyIPv4})
		ch := c.AddChain(&nftables.Chain{Name: "DOCKER_OUTPUT", Table: tbl, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
		for proto, realPort := range map[byte]uint16{unix.IPPROTO_UDP: udpPort, unix.IPPROTO_TCP: tcpPort} {
			c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: append(append(append(
				nft.Daddr(netip.MustParseAddr("127.0.0.11")), nft.L4Proto(proto)...), nft.Dport(53)...),
				&expr.Immediate{Register: 1, Data: netip.MustParseAddr("127.0.0.11").AsSlice()},
				&expr.Immediate{Register: 2, Data: []byte{byte(realPort >> 8), byte(realPort)}},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2},
			)})
		}
		c.AddTable(&nftables.Table{Name: "other", Family: nftables.TableFamilyINet})
	})
}

func withConn(t *testing.T, n *testNS, f func(*nftables.Conn)) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	f(c)
	if err := c.Flush(); err != nil {
		t.Fatalf("nftables in %s: %v", n.name, err)
	}
}

func tables(t *testing.T, n *testNS) []string {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTables()
	if err != nil {
		t.Fatalf("list tables in %s: %v", n.name, err)
	}
	var names []string
	for _, tb := range ts {
		fam := map[nftables.TableFamily]string{nftables.TableFamilyIPv4: "ip", nftables.TableFamilyINet: "inet"}[tb.Family]
		names = append(names, fam+" "+tb.Name)
	}
	return names
}

func TestOtherToolsTablesAndDockerDNS(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t, false)
	embedded := listenUDP(t, l.sandbox, "127.0.0.11:0")
	echoUDP(embedded)
	embeddedTCP := listenTCP(t, l.sandbox, "127.0.0.11:0")
	serveTCP(embeddedTCP, "embedded dns")
	addDockerDNSTable(t, l.sandbox, uint16(embedded.LocalAddr().(*net.UDPAddr).Port), port(embeddedTCP))
	l.apply(t, l.spec())

	reply, err := udpExchange(l.sandbox, "127.0.0.11:53", []byte("query"), mustWork)
	if err != nil || string(reply) != "re:query" {
		t.Errorf("docker embedded dns at 127.0.0.11:53: reply %q, %v", reply, err)
	}
	c, err := dialTCP(l.sandbox, "127.0.0.11:53", mustWork)
	if err != nil {
		t.Fatalf("docker embedded dns over tcp: %v", err)
	}
	if got, err := readGreeting(c); got != "hello from embedded dns" {
		t.Errorf("docker embedded dns over tcp reached %q (%v)", got, err)
	}
	c.Close()
	expectNoConn(t, l.proxy4, "proxy")

	if err := Remove(l.sandbox.path); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(tables(t, l.sandbox), ", "), "ip nat, inet other"; got != want {
		t.Errorf("tables after Remove: %s, want %s", got, want)
	}
	reply, err = udpExchange(l.sandbox, "127.0.0.11:53", []byte("again"), mustWork)
	if err != nil || string(reply) != "re:again" {
		t.Errorf("docker embedded dns after Remove: reply %q, %v", reply, err)
	}
}

func TestApplyCheckRemove(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	sb := newTestNS(t, "chk")
	s := Spec{Port4: 15001, Port6: 15002, Resolvers: []netip.Addr{resolverA, resolverB}, AllowICMP: true,
		Direct: []Direct{{Prefix: netip.MustParsePrefix("198.51.100.0/24")}}}

	if ok, err := Present(sb.path); err != nil || ok {
		t.Fatalf("Present before Apply = %v, %v; want false", ok, err)
	}
	if err := Check(sb.path, s); err == nil || !strings.Contains(err.Error(), "table is missing") {
		t.Errorf("Check before Apply = %v, want table is missing", err)
	}
	for i := range 2 {
		if err := Apply(sb.path, s); err != nil {
			t.Fatalf("Apply #%d: %v", i+1, err)
		}
	}
	if err := Check(sb.path, s); err != nil {
		t.Fatalf("Check after Apply twice: %v", err)
	}
	if ok, err := Present(sb.path); err != nil || !ok {
		t.Fatalf("Present after Apply = %v, %v; want true", ok, err)
	}
	if got := tables(t, sb); len(got) != 1 {
		t.Errorf("tables after Apply twice: %v, want only inet doorman", got)
	}

	other := s
	other.Port4++
	if err := Check(sb.path, other); err == nil {
		t.Errorf("Check with another port passed")
	}
	other = s
	other.AllowICMP = false
	if err := Check(sb.path, other); err == nil {
		t.Errorf("Check without ICMP passed against a ruleset with ICMP")
	}
	other = s
	other.DenyAll = true
	if err := Check(sb.path, other); err == nil || !strings.Contains(err.Error(), "not part of the ruleset") {
		t.Errorf("Check of mode none against the allowlist ruleset = %v, want an extra chain", err)
	}

	t.Run("deleted rule", func(t *testing.T) {
		if err := Apply(sb.path, s); err != nil {
			t.Fatal(err)
		}
		deleteRule(t, sb, chainOutput, 3)
		err := Check(sb.path, s)
		if err == nil || !strings.Contains(err.Error(), chainOutput) {
			t.Errorf("Check after deleting a rule of %s = %v", chainOutput, err)
		}
	})
	t.Run("inserted rule", func(t *testing.T) {
		if err := Apply(sb.path, s); err != nil {
			t.Fatal(err)
		}
		withConn(t, sb, func(c *nftables.Conn) {
			c.InsertRule(&nftables.Rule{Table: table(), Chain: &nftables.Chain{Name: chainForward, Table: table()},
				Exprs: nft.Accept()})
		})
		err := Check(sb.path, s)
		if err == nil || !strings.Contains(err.Error(), "without comment") {
			t.Errorf("Check after inserting accept into %s = %v", chainForward, err)
		}
	})
	t.Run("changed policy", func(t *testing.T) {
		if err := Apply(sb.path, s); err != nil {
			t.Fatal(err)
		}
		accept := nftables.ChainPolicyAccept
		withConn(t, sb, func(c *nftables.Conn) {
			c.AddChain(&nftables.Chain{Name: chainOutput, Table: table(), Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
		})
		err := Check(sb.path, s)
		if err == nil || !strings.Contains(err.Error(), "policy accept") {
			t.Errorf("Check after setting policy accept = %v", err)
		}
	})
	t.Run("deleted chain", func(t *testing.T) {
		if err := Apply(sb.path, s); err != nil {
			t.Fatal(err)
		}
		withConn(t, sb, func(c *nftables.Conn) {
			c.FlushChain(&nftables.Chain{Name: chainNATOutput, Table: table()})
			c.DelChain(&nftables.Chain{Name: chainNATOutput, Table: table()})
		})
		err := Check(sb.path, s)
		if err == nil || !strings.Contains(err.Error(), "missing") {
			t.Errorf("Check after deleting %s = %v", chainNATOutput, err)
		}
	})

	if err := Apply(sb.path, s); err != nil {
		t.Fatal(err)
	}
	if err := Check(sb.path, s); err != nil {
		t.Fatalf("Check after re-Apply repaired the table: %v", err)
	}
	for i := range 2 {
		if err := Remove(sb.path); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if ok, err := Present(sb.path); err != nil || ok {
		t.Errorf("Present after Remove = %v, %v", ok, err)
	}
	if err := Check(sb.path, s); err == nil {
		t.Errorf("Check after Remove passed")
	}
}

func deleteRule(t *testing.T, n *testNS, chain string, index int) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.GetRules(table(), &nftables.Chain{Name: chain, Table: table()})
	if err != nil || len(rules) <= index {
		t.Fatalf("rules of %s: %d, %v", chain, len(rules), err)
	}
	if err := c.DelRule(rules[index]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete rule %d of %s: %v", index, chain, err)
	}
}

func TestGoneNamespace(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	sb := newTestNS(t, "gone")
	if err := Apply(sb.path, Spec{DenyAll: true}); err != nil {
		t.Fatal(err)
	}
	run(t, "ip", "netns", "del", sb.name)
	if err := Remove(sb.path); err != nil {
		t.Errorf("Remove on a deleted netns: %v", err)
	}
	if err := Remove("/proc/self/ns/does-not-exist"); err != nil {
		t.Errorf("Remove on a missing path: %v", err)
	}
	err := Apply(sb.path, Spec{DenyAll: true})
	if err == nil || !strings.Contains(err.Error(), sb.path) || !errors.Is(err, unix.ENOENT) {
		t.Errorf("Apply on a deleted netns = %v, want ENOENT naming the path", err)
	}
	// A file that is no namespace is an error for Apply and Present.
	if _, err := Present("/proc/self/status"); err == nil || !errors.Is(err, nft.ErrNotNetNS) {
		t.Errorf("Present on /proc/self/status = %v, want not a network namespace", err)
	}
	if err := Apply("/proc/self/ns/uts", Spec{DenyAll: true}); err == nil || !errors.Is(err, nft.ErrNotNetNS) {
		t.Errorf("Apply on a uts namespace = %v, want not a network namespace", err)
	}
}

func TestProbeFib(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	sb := newTestNS(t, "fib")
	if err := ProbeFib(sb.path); err != nil {
		t.Fatal(err)
	}
	if got := tables(t, sb); len(got) != 0 {
		t.Errorf("ProbeFib left tables behind: %v", got)
	}
}

func TestApplyRejectsBadSpec(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	sb := newTestNS(t, "bad")
	err := Apply(sb.path, Spec{Port4: 1, Resolvers: []netip.Addr{resolverA, {}}})
	if err == nil || !strings.Contains(err.Error(), "resolver #2") {
		t.Errorf("Apply with an invalid resolver = %v", err)
	}
	if got := tables(t, sb); len(got) != 0 {
		t.Errorf("a failed Apply left tables behind: %v", got)
	}
}

// TestApplyTableAppearsMeanwhile covers the race Apply's look-up leaves: a
// table that appears after the look-up found none. The exclusive creation
// is then rejected whole, leaving the other table as it was, and Apply
// replaces that table instead.
func TestApplyTableAppearsMeanwhile(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	sb := newTestNS(t, "race")
	first := Spec{Port4: 15001, Port6: 15002, Resolvers: []netip.Addr{resolverA}, AllowICMP: true}
	second := Spec{Port4: 16001, Port6: 16002, Resolvers: []netip.Addr{resolverB}}
	if err := Apply(sb.path, first); err != nil {
		t.Fatal(err)
	}
	ns, err := nft.OpenNetNS(sb.path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	s, err := second.normalized()
	if err != nil {
		t.Fatal(err)
	}
	stageTable(ns.Conn, s, false)
	if err := ns.Conn.Flush(); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("creating the table over an existing one: err = %v, want EEXIST", err)
	}
	if err := Check(sb.path, first); err != nil {
		t.Fatalf("the rejected creation changed the table: %v", err)
	}
	if err := Create(sb.path, second); !errors.Is(err, ErrTableExists) {
		t.Fatalf("Create over an existing table: err = %v, want ErrTableExists", err)
	}
	if err := Check(sb.path, first); err != nil {
		t.Fatalf("Create over an existing table changed it: %v", err)
	}
	if err := install(ns, s, false, true); err != nil {
		t.Fatalf("install after a stale look-up: %v", err)
	}
	if err := Check(sb.path, second); err != nil {
		t.Fatalf("after install over a table that appeared: %v", err)
	}
	if got := tables(t, sb); len(got) != 1 {
		t.Errorf("tables: %v, want only inet doorman", got)
	}
}
