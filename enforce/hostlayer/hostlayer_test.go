package hostlayer

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce/nft"
)

// lab is a topology with servers everywhere: in inet what a sandbox might
// try to reach, in the sandboxes what inet or a neighbour might connect to.
type lab struct {
	*topology
	web4, web6           *server      // inet :80, reachable only through the proxy
	notDirect4           *server      // inet :7001, not allowDirect
	udpOther4, udpOther6 *net.UDPConn // inet :5353, not a resolver, not allowed
	rawTarget            *net.UDPConn // inet :9999, what hand-made frames aim at
	srvB4                *server      // sandbox B :8080
	uplinkSSH            *server      // the runtime itself, :22 on its uplink address
}

func newLab(t testing.TB) *lab {
	t.Helper()
	l := &lab{topology: newTopology(t)}
	in := l.inet
	l.web4 = serveTCP(t, in, hostPort(inet4, 80), "web")
	l.web6 = serveTCP(t, in, hostPort(inet6, 80), "web")
	serveTCP(t, in, hostPort(inet4, 7000), "direct")
	serveTCP(t, in, hostPort(inet6, 7000), "direct")
	l.notDirect4 = serveTCP(t, in, hostPort(inet4, 7001), "direct")
	echoUDP(listenUDP(t, in, hostPort(inet4, 7150)))
	l.udpOther4 = listenUDP(t, in, hostPort(inet4, 5353))
	l.udpOther6 = listenUDP(t, in, hostPort(inet6, 5353))
	l.rawTarget = listenUDP(t, in, hostPort(inet4, 9999))
	echoUDP(listenUDP(t, in, hostPort(resolver4, 53)))
	echoUDP(listenUDP(t, in, hostPort(resolver6, 53)))
	serveTCP(t, in, hostPort(resolver4, 53), "resolver")

	serveTCP(t, l.a, hostPort(sbxA4, 8080), "a")
	serveTCP(t, l.a, hostPort(sbxA6, 8080), "a")
	echoUDP(listenUDP(t, l.a, hostPort(sbxA4, 8081)))
	l.srvB4 = serveTCP(t, l.b, hostPort(sbxB4, 8080), "b")
	serveTCP(t, l.c, hostPort(sbxC4, 8080), "c")
	l.uplinkSSH = serveTCP(t, l.runtime, hostPort(uplink4, 22), "runtime")
	return l
}

func mustEntries(t testing.TB, ss ...string) []conf.Entry {
	t.Helper()
	var out []conf.Entry
	for _, s := range ss {
		e, err := conf.ParseEntry(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// spec is the layer of one sandbox of the lab; the sandbox itself has no
// rules at all, as if its workload had flushed them.
func (l *lab) spec(t testing.TB, key string, sbx *testNS, iface string, allowICMP bool) Spec {
	return Spec{
		Key:          key,
		SandboxNetNS: sbx.path,
		HostIfaces:   []string{iface},
		Resolvers:    []netip.Addr{netip.MustParseAddr(resolver4), netip.MustParseAddr(resolver6), netip.MustParseAddr("127.0.0.11")},
		AllowICMP:    allowICMP,
		AllowDirect: mustEntries(t, hostPort(inet4, 7000), hostPort(inet6, 7000),
			"203.0.113.0/28:7100-7199"),
	}
}

func (l *lab) apply(t testing.TB, s Spec) {
	t.Helper()
	if _, err := Apply(l.runtime.path, s); err != nil {
		t.Fatal(err)
	}
	if err := Check(l.runtime.path, s); err != nil {
		t.Fatalf("Check right after Apply: %v", err)
	}
}

// dropCount is the packets sandbox key's drop rule of the given comment
// in the table whose name begins with table has dropped.
func (l *lab) dropCount(t testing.TB, key, table, rule string) uint64 {
	t.Helper()
	drops, err := ReadDrops(l.runtime.path, key)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	found := false
	for _, d := range drops {
		if strings.HasPrefix(d.Table, table) && d.Rule == rule {
			n += d.Packets
			found = true
		}
	}
	if !found {
		t.Fatalf("ReadDrops(%s) has no rule %q in %s: %+v", key, rule, table, drops)
	}
	return n
}

// mac returns the hardware address of dev in n.
func mac(t *testing.T, n *testNS, dev string) net.HardwareAddr { return n.link(t, dev).HardwareAddr }

func TestLayerOnBridgePort(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a, b := l.a, l.b
	spec := l.spec(t, "ctr-a", l.a, "veth-a", false)
	l.apply(t, spec)

	t.Run("tcp out is dropped", func(t *testing.T) {
		expectTCPBlocked(t, a, "", l.web4)
		expectTCPBlocked(t, a, "", l.web6)
		expectTCPBlocked(t, a, "", l.notDirect4)
	})
	t.Run("a changed address gets nothing out either", func(t *testing.T) {
		spoofed := l.dropCount(t, "ctr-a", "table bridge", "ipv4 not from the sandbox's addresses is dropped")
		a.ip(t, "addr add 198.51.100.11/25 dev eth0")
		expectTCPBlocked(t, a, "198.51.100.11", l.web4)
		if n := l.dropCount(t, "ctr-a", "table bridge", "ipv4 not from the sandbox's addresses is dropped"); n <= spoofed {
			t.Errorf("spoofed source: the drop counter stayed at %d", n)
		}
	})
	t.Run("udp is dropped but dns to the resolvers", func(t *testing.T) {
		udp := l.dropCount(t, "ctr-a", "table inet", "udp not to a resolver is dropped")
		expectUDPBlocked(t, a, l.udpOther4)
		expectUDPBlocked(t, a, l.udpOther6)
		if n := l.dropCount(t, "ctr-a", "table inet", "udp not to a resolver is dropped"); n < udp+2 {
			t.Errorf("udp not to a resolver: the drop counter went from %d to %d, want at least 2 more", udp, n)
		}
		expectUDPWorks(t, a, hostPort(resolver4, 53))
		expectUDPWorks(t, a, hostPort(resolver6, 53))
		expectTCPWorks(t, a, hostPort(resolver4, 53), "resolver")
	})
	t.Run("allowDirect passes", func(t *testing.T) {
		expectTCPWorks(t, a, hostPort(inet4, 7000), "direct")
		expectTCPWorks(t, a, hostPort(inet6, 7000), "direct")
		expectUDPWorks(t, a, hostPort(inet4, 7150))
	})
	t.Run("icmp is dropped", func(t *testing.T) {
		for _, dst := range []string{inet4, inet6} {
			if err := ping(a, dst, mustFail); err == nil {
				t.Errorf("ping %s from a: answered, want it dropped", dst)
			}
		}
	})
	t.Run("hand-made frames get nothing out", func(t *testing.T) {
		gwMAC := mac(t, l.runtime, "br0")
		f := frame{dstMAC: gwMAC, srcMAC: mac(t, a, "eth0"), src: netip.MustParseAddr(sbxA4),
			dst: netip.MustParseAddr(inet4), dport: 9999, payload: []byte("raw-from-a")}
		sendFrame(t, a, "eth0", f)
		expectNoDatagram(t, l.rawTarget, "udp server behind the frame from a")
		// The same frame from b, which has no layer, arrives: the frame
		// itself is sound.
		f.srcMAC, f.src, f.payload = mac(t, b, "eth0"), netip.MustParseAddr(sbxB4), []byte("raw-from-b")
		sendFrame(t, b, "eth0", f)
		expectDatagram(t, l.rawTarget, []byte("raw-from-b"), "frame from b")
	})
	t.Run("vlan-tagged frames do not reach the neighbour", func(t *testing.T) {
		atB, atA := sniffFrames(t, b, "eth0"), sniffFrames(t, a, "eth0")
		f := frame{dstMAC: mac(t, b, "eth0"), srcMAC: mac(t, a, "eth0"), vlan: 5, src: netip.MustParseAddr(sbxA4),
			dst: netip.MustParseAddr(sbxB4), dport: 9999, payload: []byte("tagged-from-a")}
		sendFrame(t, a, "eth0", f)
		if atB.saw([]byte("tagged-from-a"), quiet*3) {
			t.Errorf("b received the vlan-tagged frame from a")
		}
		f = frame{dstMAC: mac(t, a, "eth0"), srcMAC: mac(t, b, "eth0"), vlan: 5, src: netip.MustParseAddr(sbxB4),
			dst: netip.MustParseAddr(sbxA4), dport: 9999, payload: []byte("tagged-from-b")}
		sendFrame(t, b, "eth0", f)
		if !atA.saw([]byte("tagged-from-b"), mustWork) {
			t.Errorf("a did not receive the vlan-tagged frame from b (no layer): the test frame is broken")
		}
	})
	t.Run("a frame forged with the neighbour's mac gets nothing out", func(t *testing.T) {
		f := frame{dstMAC: mac(t, l.runtime, "br0"), srcMAC: mac(t, b, "eth0"), src: netip.MustParseAddr(sbxB4),
			dst: netip.MustParseAddr(inet4), dport: 9999, payload: []byte("forged-from-a")}
		sendFrame(t, a, "eth0", f)
		expectNoDatagram(t, l.rawTarget, "udp server behind the forged frame from a")
	})
	t.Run("neighbour discovery does not leave the link", func(t *testing.T) {
		// The first of these messages to a new destination can get lost
		// on the way even without the layer: send a few.
		at := sniffICMPv6(t, l.inet)
		for range 3 {
			sendND(t, a, inet6, "nd-from-a")
			if at.saw("nd-from-a", quiet) {
				t.Fatalf("inet received a's neighbour solicitation, routed off the link")
			}
		}
		for range 3 {
			sendND(t, b, inet6, "nd-from-b")
			if at.saw("nd-from-b", quiet) {
				return
			}
		}
		t.Errorf("inet did not receive b's neighbour solicitations (no layer): the test message is broken")
	})
	t.Run("tcp to a neighbour on the bridge is dropped", func(t *testing.T) {
		expectTCPBlocked(t, a, "", l.srvB4)
	})
	t.Run("the neighbour is not affected", func(t *testing.T) {
		expectTCPWorks(t, b, hostPort(inet4, 80), "web")
		expectTCPWorks(t, b, hostPort(inet6, 80), "web")
	})
	t.Run("connections to the sandbox get their replies", func(t *testing.T) {
		expectTCPWorks(t, l.inet, hostPort(sbxA4, 8080), "a")
		expectTCPWorks(t, l.inet, hostPort(sbxA6, 8080), "a")
		expectTCPWorks(t, b, hostPort(sbxA4, 8080), "a")
		expectTCPWorks(t, b, hostPort(sbxA6, 8080), "a")
		expectUDPWorks(t, l.inet, hostPort(sbxA4, 8081))
	})
	t.Run("echo to allowDirect passes when the policy allows it", func(t *testing.T) {
		spec.AllowICMP = true
		l.apply(t, spec)
		for _, dst := range []string{inet4, inet6} {
			if err := ping(a, dst, mustWork); err != nil {
				t.Errorf("ping %s (allowDirect) from a: %v", dst, err)
			}
		}
		for _, dst := range []string{resolver4, resolver6} {
			if err := ping(a, dst, mustFail); err == nil {
				t.Errorf("ping %s (not allowDirect) from a: answered, want it dropped", dst)
			}
		}
		expectTCPBlocked(t, a, "", l.web4)
	})
	t.Run("a changed mac loses the sandbox its connectivity", func(t *testing.T) {
		allowed := listenUDP(t, l.inet, hostPort(inet4, 7160)) // allowDirect by CIDR and range
		sendUDP(t, a, allowed.LocalAddr().String(), "before")
		expectDatagram(t, allowed, []byte("before"), "allowed udp from a")
		a.ip(t, "link set eth0 address 02:00:00:00:00:99")
		sendUDP(t, a, allowed.LocalAddr().String(), "after")
		expectNoDatagram(t, allowed, "allowed udp from a with another mac")
		if err := Check(l.runtime.path, spec); err == nil || !strings.Contains(err.Error(), "mac") {
			t.Errorf("Check after the sandbox changed its mac: %v, want an error about the pinned mac", err)
		}
	})
}

func TestLayerOnBridgePortWithoutBrNetfilter(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	a, b := l.a, l.b
	l.runtime.sysctl(t, "net.bridge.bridge-nf-call-iptables", "0")
	l.runtime.sysctl(t, "net.bridge.bridge-nf-call-ip6tables", "0")
	spec := l.spec(t, "ctr-a", a, "veth-a", false)
	l.apply(t, spec)

	// Routed traffic reaches the inet table without br_netfilter too.
	expectTCPBlocked(t, a, "", l.web4)
	expectTCPBlocked(t, a, "", l.web6)
	expectUDPBlocked(t, a, l.udpOther4)
	expectUDPWorks(t, a, hostPort(resolver4, 53))
	expectUDPWorks(t, a, hostPort(resolver6, 53))
	expectTCPWorks(t, a, hostPort(inet4, 7000), "direct")
	expectTCPWorks(t, l.inet, hostPort(sbxA4, 8080), "a")
	sendFrame(t, a, "eth0", frame{dstMAC: mac(t, l.runtime, "br0"), srcMAC: mac(t, a, "eth0"), src: netip.MustParseAddr(sbxA4),
		dst: netip.MustParseAddr(inet4), dport: 9999, payload: []byte("raw-from-a")})
	expectNoDatagram(t, l.rawTarget, "udp server behind the frame from a")
	// Bridged traffic never reaches the inet hooks: it is all dropped,
	// replies to the neighbour's connections included; what a's port
	// sent is counted and logged as a's, by the port it came in on.
	log := l.openLog(t, "ctr-a")
	const unfiltered = "bridged ipv4 that br_netfilter does not pass to the inet hooks is dropped"
	expectTCPBlocked(t, a, "", l.srvB4)
	if n := l.dropCount(t, "ctr-a", "table bridge", unfiltered); n == 0 {
		t.Errorf("a's bridged tcp to b: the count of %q is 0", unfiltered)
	}
	if got := log.read(t, l, 300*time.Millisecond); !find(got, unfiltered, sbxA4, hostPort(sbxB4, 8080)) {
		t.Errorf("a's bridged tcp to b: a's group got %+v", got)
	}
	if c, err := dialTCP(b, "", hostPort(sbxA4, 8080), mustFail); err == nil {
		c.Close()
		t.Errorf("tcp from b to a over the bridge without br_netfilter: connected, want the replies dropped")
	}
	expectTCPWorks(t, b, hostPort(inet4, 80), "web")

	// Switching br_netfilter on changes what the layer must be: Check
	// notices, Apply adapts, and the neighbour's connections work.
	l.runtime.sysctl(t, "net.bridge.bridge-nf-call-iptables", "1")
	l.runtime.sysctl(t, "net.bridge.bridge-nf-call-ip6tables", "1")
	if err := Check(l.runtime.path, spec); err == nil {
		t.Errorf("Check after br_netfilter was switched on: nil, want an error")
	}
	l.apply(t, spec)
	expectTCPWorks(t, b, hostPort(sbxA4, 8080), "a")
	expectTCPBlocked(t, a, "", l.srvB4)
}

// sendUDP sends one datagram from n to addr.
func sendUDP(t *testing.T, n *testNS, addr, payload string) {
	t.Helper()
	in(t, n, func() error {
		c, err := net.Dial(network("udp", ap(addr)), addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(payload))
		return err
	})
}

func TestLayerOnRoutedInterface(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	c := l.c
	spec := l.spec(t, "ctr-c", l.c, "veth-c", false)
	l.apply(t, spec)
	f := frame{dstMAC: mac(t, l.runtime, "veth-c"), srcMAC: mac(t, c, "eth0"), src: netip.MustParseAddr(sbxC4),
		dst: netip.MustParseAddr(inet4), dport: 9999, payload: []byte("raw-from-c")}

	expectTCPBlocked(t, c, "", l.web4)
	expectTCPBlocked(t, c, "", l.web6)
	expectUDPBlocked(t, c, l.udpOther4)
	expectUDPWorks(t, c, hostPort(resolver4, 53))
	expectUDPWorks(t, c, hostPort(resolver6, 53))
	expectTCPWorks(t, c, hostPort(inet4, 7000), "direct")
	expectTCPWorks(t, l.inet, hostPort(sbxC4, 8080), "c")
	expectTCPBlocked(t, c, "", l.uplinkSSH) // the host itself
	sendFrame(t, c, "eth0", f)
	expectNoDatagram(t, l.rawTarget, "udp server behind the frame from c")

	if err := Remove(l.runtime.path, spec.Key); err != nil {
		t.Fatal(err)
	}
	expectTCPWorks(t, c, hostPort(inet4, 80), "web")
	sendFrame(t, c, "eth0", f)
	expectDatagram(t, l.rawTarget, []byte("raw-from-c"), "frame from c without the layer")
}

func TestRemoveLeavesOthersAlone(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	rt := l.runtime
	other := addOtherTable(t, rt.path)
	specA := l.spec(t, "ctr-a", l.a, "veth-a", false)
	specB := l.spec(t, "ctr-b", l.b, "veth-b", false)
	l.apply(t, specA)
	l.apply(t, specB)
	if err := Check(rt.path, specA); err != nil {
		t.Fatalf("a after applying b: %v", err)
	}
	if tables := tableNames(t, rt.path); tables["inet doorman"] {
		t.Errorf("the runtime's namespace has table inet doorman, which marks a sandbox: %v", tables)
	}
	expectTCPBlocked(t, l.a, "", l.web4)
	expectTCPBlocked(t, l.b, "", l.web4)

	if err := Remove(rt.path, specA.Key); err != nil {
		t.Fatal(err)
	}
	expectTCPWorks(t, l.a, hostPort(inet4, 80), "web")
	expectTCPBlocked(t, l.b, "", l.web4)
	if err := Check(rt.path, specB); err != nil {
		t.Errorf("b after removing a: %v", err)
	}
	if err := Check(rt.path, specA); err == nil {
		t.Errorf("Check of a after Remove: nil, want an error")
	}
	if err := Remove(rt.path, specA.Key); err != nil {
		t.Errorf("Remove again: %v", err)
	}
	other.check(t)

	if err := Remove(rt.path, specB.Key); err != nil {
		t.Fatal(err)
	}
	expectTCPWorks(t, l.b, hostPort(inet4, 80), "web")
	tables := tableNames(t, rt.path)
	if tables["inet "+TableName] || tables["bridge "+TableName] {
		t.Errorf("tables left after the last Remove: %v", tables)
	}
	other.check(t)
}

// otherTable is another tool's table in the runtime's namespace, which the
// layer must never touch.
type otherTable struct {
	nsPath string
	table  *nftables.Table
	rules  int
}

func addOtherTable(t *testing.T, nsPath string) *otherTable {
	t.Helper()
	n, err := openRuntimeNS(nsPath, true)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tb := n.Conn.AddTable(&nftables.Table{Name: "dm-other", Family: nftables.TableFamilyINet})
	ch := n.Conn.AddChain(&nftables.Chain{Name: "forward", Table: tb, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	for _, r := range []nft.RuleSpec{nft.Rule("x", nft.CtReply(), nft.Accept()), nft.Rule("y", nft.Accept())} {
		nft.AddRule(n.Conn, ch, r)
	}
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return &otherTable{nsPath: nsPath, table: tb, rules: 2}
}

func (o *otherTable) check(t *testing.T) {
	t.Helper()
	n, err := openRuntimeNS(o.nsPath, false)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	rules, err := n.Conn.GetRules(o.table, &nftables.Chain{Name: "forward", Table: o.table})
	if err != nil || len(rules) != o.rules {
		t.Errorf("other table: %d rules (%v), want %d", len(rules), err, o.rules)
	}
}

// tableNames lists the tables of the namespace as "family name".
func tableNames(t *testing.T, nsPath string) map[string]bool {
	t.Helper()
	n, err := openRuntimeNS(nsPath, false)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tables, err := n.Conn.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, tb := range tables {
		fam := map[nftables.TableFamily]string{nftables.TableFamilyINet: "inet", nftables.TableFamilyBridge: "bridge",
			nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6"}[tb.Family]
		out[strings.TrimSpace(fam+" "+tb.Name)] = true
	}
	return out
}
