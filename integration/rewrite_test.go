package integration

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// rewriteName is an allowed name whose public address (rewriteAddr) the
// host's own nat OUTPUT rule sends to its LAN, as kube-proxy does for a
// service's external or load-balancer address.
const rewriteName = "rewrite." + wildZone

var rewriteAddr = netip.MustParseAddr("203.0.113.41")

// addOutputDNAT adds to the namespace at nsPath `table ip dm-rewrite-test
// { chain out { type nat hook output priority -100; ip daddr from dnat to
// to } }` (every port kept), removed at cleanup.
func addOutputDNAT(t *testing.T, nsPath string, from, to netip.Addr) {
	t.Helper()
	n, err := nft.OpenNetNS(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tbl := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "dm-rewrite-test"}
	n.Conn.AddTable(tbl)
	ch := n.Conn.AddChain(&nftables.Chain{Name: "out", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	exprs := append(nft.Daddr(from), nft.TCP()...)
	exprs = append(exprs, &expr.Immediate{Register: 1, Data: to.AsSlice()},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1})
	n.Conn.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: exprs})
	if err := n.Conn.Flush(); err != nil {
		t.Fatalf("nat OUTPUT rule in %s: %v", nsPath, err)
	}
	t.Cleanup(func() {
		n, err := nft.OpenNetNS(nsPath)
		if err != nil {
			return
		}
		defer n.Close()
		n.Conn.DelTable(tbl)
		n.Conn.Flush()
	})
}

// TestCNIRewrittenUpstream: an allowed name whose address is public, but
// which a nat OUTPUT rule of the host (where the proxy dials from)
// rewrites to its LAN, is refused after the connect: HTTP gets a 403,
// TLS the access_denied alert, 0 bytes reach the LAN, and the line says
// deny, naming the rewrite. With an address entry for the LAN the same
// bytes arrive (the positive control).
func TestCNIRewrittenUpstream(t *testing.T) {
	e := newCNIEnv(t)
	host := e.net.HostNS().Name()
	lan := e.net.NewNetns(t, "lan")
	ipIn(t, host, "link", "add", "dmlan0", "type", "veth", "peer", "name", "eth0", "netns", lan.Name())
	ipIn(t, host, "addr", "add", lanHost4.String(), "dev", "dmlan0")
	ipIn(t, host, "link", "set", "dmlan0", "up")
	ipIn(t, lan.Name(), "addr", "add", netip.PrefixFrom(lanAddr4, 24).String(), "dev", "eth0")
	ipIn(t, lan.Name(), "link", "set", "eth0", "up")
	// The proxy's source address is the one of its route to the public
	// address: the LAN answers it through the host.
	ipIn(t, lan.Name(), "route", "add", "default", "via", lanHost4.Addr().String())
	lanSrv := lanServers(t, lan, []netip.Addr{lanAddr4}, 80, 6379)
	e.net.AddRecord(rewriteName, rewriteAddr)
	addOutputDNAT(t, e.net.HostPath(), rewriteAddr, lanAddr4)

	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"allowedHosts": []string{"*." + wildZone}}))
	r := curl(t, c.ns, e.caFile, "-w", "%{http_code}", "--resolve", rewriteName+":80:"+evilAddr4.String(), "http://"+rewriteName+"/")
	if !strings.HasSuffix(r.stdout, "403") {
		t.Errorf("HTTP to %s: want a 403, got %v", rewriteName, r)
	}
	got, _ := helloThenRaw(t, c.ns, netip.AddrPortFrom(evilAddr4, 6379), rewriteName)
	if string(got) != "\x15\x03\x03\x00\x02\x02\x31" {
		t.Errorf("ClientHello for %s to port 6379: got %x, want the access_denied alert", rewriteName, got)
	}
	// Twice: the second is dialed on the relay loop (the name is cached).
	got, _ = helloThenRaw(t, c.ns, netip.AddrPortFrom(evilAddr4, 6379), rewriteName)
	if string(got) != "\x15\x03\x03\x00\x02\x02\x31" {
		t.Errorf("second ClientHello for %s to port 6379: got %x, want the access_denied alert", rewriteName, got)
	}
	want := fmt.Sprintf("private upstream %v: connected subnet 10.9.0.0/24 of the proxy's host, where the host rewrites %v to %v (a nat OUTPUT rule)",
		lanAddr4, netip.AddrPortFrom(rewriteAddr, 6379), netip.AddrPortFrom(lanAddr4, 6379))
	d := e.waitDecision(c, func(m map[string]any) bool { return m["name"] == rewriteName && m["proto"] == "tls" })
	if d["verdict"] != "deny" || d["reason"] != want || d["upstream"] != netip.AddrPortFrom(lanAddr4, 6379).String() {
		t.Errorf("decision %v, want deny with reason %q", d, want)
	}
	for port, srv := range lanSrv {
		if n, b := srv.conns.Load(), srv.bytes.Load(); b != 0 {
			t.Errorf("LAN port %d: %d connections, %d bytes arrived", port, n, b)
		}
	}
	if t.Failed() {
		return
	}
	// The positive control.
	c2 := e.newContainer()
	e.mustAdd(c2, e.conflist(map[string]any{"allowedHosts": []string{"*." + wildZone, "10.9.0.0/24"}}))
	_, sent := helloThenRaw(t, c2.ns, netip.AddrPortFrom(evilAddr4, 6379), rewriteName)
	waitCount(t, &lanSrv[6379].bytes, int64(sent), "LAN admitted, port 6379")
}
