package integration

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// neighbourName is the name the neighbour's servers answer with.
const neighbourName = "neighbour.cni.internal"

// TestNeighboursByAddressEntry: two sandboxes on one bridge, each with
// doorman's defaults (the host-side layer: their ports isolated, nothing
// bridged between them). The one whose policy names the other's address
// (an IP entry) reaches it all the same, through its proxy, which dials
// from the host: HTTP and HTTPS by address, each a decision in its log.
// One whose policy does not name it is refused, and its direct
// connections and frames get nowhere.
func TestNeighboursByAddressEntry(t *testing.T) {
	e := newCNIEnv(t)
	nbr := e.newContainer()
	e.mustAdd(nbr, e.conflist(nil))
	addr4, addr6 := eth0Addrs(t, nbr.ns)
	srv := e.net.ServeHost(t, nbr.ns, neighbourName, addr4, addr6)

	allowed := e.newContainer()
	e.mustAdd(allowed, e.conflist(map[string]any{"allowedHosts": []string{apiName, addr4.String(), addr6.String()}}))
	other := e.newContainer()
	e.mustAdd(other, e.conflist(nil))
	for _, c := range []*container{nbr, allowed, other} {
		if !portIsolated(t, e.net.HostNS(), c) {
			t.Errorf("the bridge port of %s is not isolated", c.key)
		}
	}

	for _, a := range []netip.Addr{addr4, addr6} {
		host := a.String()
		if a.Is6() {
			host = "[" + host + "]"
		}
		if !e.reaches(allowed, "http://"+host+"/by-address", neighbourName) {
			t.Errorf("HTTP to the neighbour at %s, an address the policy names: %v", a, curl(t, allowed.ns, e.caFile, "http://"+host+"/by-address"))
		}
		if !e.reaches(allowed, "https://"+host+"/by-address", neighbourName, "--insecure") {
			t.Errorf("HTTPS to the neighbour at %s, an address the policy names: %v", a, curl(t, allowed.ns, e.caFile, "--insecure", "https://"+host+"/by-address"))
		}
		if r := curl(t, other.ns, e.caFile, "-o", "/dev/null", "-w", "%{http_code}", "http://"+host+"/not-allowed"); r.exit != 0 || r.stdout != "403" {
			t.Errorf("HTTP to the neighbour at %s from a sandbox whose policy does not name it: %v, want a 403", a, r)
		}
	}
	if n := srv.RequestsFor(addr4.String()) + srv.RequestsFor("["+addr6.String()+"]"); n != 2 {
		t.Errorf("the neighbour served %d plaintext HTTP requests by address, want 2 (one a family, from the allowed sandbox only)", n)
	}
	for _, a := range []netip.Addr{addr4, addr6} {
		e.waitDecision(allowed, func(m map[string]any) bool {
			return m["rule"] == a.String() && m["verdict"] == "allow" && m["reason"] == "address allowed"
		})
	}

	// Straight to the neighbour, past the proxy, as a workload that
	// flushed its ruleset would: nothing arrives, the ports are isolated.
	if err := nftIn(other.ns.Path(), func(c *nftables.Conn) error {
		c.FlushRuleset()
		return c.Flush()
	}); err != nil {
		t.Fatalf("flush the ruleset of %s: %v", other.key, err)
	}
	before := srv.Connections(testnet.PortRecorder)
	if r := curl(t, other.ns, e.caFile, "--max-time", "3", "http://"+addr4.String()+":"+itoa(testnet.PortRecorder)+"/"); r.exit == 0 {
		t.Errorf("a direct connection to the neighbour, rules flushed: %v", r)
	}
	if n := srv.Connections(testnet.PortRecorder) - before; n != 0 {
		t.Errorf("the neighbour accepted %d direct connections from a sandbox whose rules were flushed", n)
	}
	// The allowed sandbox still reaches it through its proxy.
	if !e.reaches(allowed, "http://"+addr4.String()+"/again", neighbourName) {
		t.Errorf("HTTP to the neighbour by address after the other sandbox's attempt failed")
	}

	for _, c := range []*container{allowed, other, nbr} {
		if err := e.del(c); err != nil {
			t.Errorf("DEL of %s: %v", c.key, err)
		}
	}
}

// eth0Addrs are the global IPv4 and IPv6 addresses of eth0 in x.
func eth0Addrs(t *testing.T, x *testnet.Netns) (addr4, addr6 netip.Addr) {
	t.Helper()
	err := x.Links(func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			switch ip = ip.Unmap(); {
			case !ok || !ip.IsGlobalUnicast():
			case ip.Is4() && !addr4.IsValid():
				addr4 = ip
			case ip.Is6() && !addr6.IsValid():
				addr6 = ip
			}
		}
		return nil
	})
	if err != nil || !addr4.IsValid() || !addr6.IsValid() {
		t.Fatalf("eth0 in %s: %v (IPv4 %v, IPv6 %v)", x.Name(), err, addr4, addr6)
	}
	return addr4, addr6
}

// portIsolated reports whether the bridge port of c (the host end of its
// eth0) has port isolation on, in the runtime's namespace host.
func portIsolated(t *testing.T, host *testnet.Netns, c *container) bool {
	t.Helper()
	var index int
	if err := c.ns.Links(func(h *netlink.Handle) error {
		l, err := h.LinkByName("eth0")
		if err == nil {
			index = l.Attrs().ParentIndex
		}
		return err
	}); err != nil {
		t.Fatalf("eth0 of %s: %v", c.key, err)
	}
	var isolated bool
	if err := host.Links(func(h *netlink.Handle) error {
		l, err := h.LinkByIndex(index)
		if err != nil {
			return err
		}
		pi, err := h.LinkGetProtinfo(l)
		isolated = pi.Isolated
		return err
	}); err != nil {
		t.Fatalf("the bridge port of %s (index %d): %v", c.key, index, err)
	}
	return isolated
}

// hostPortIsolated reports whether every host interface of sandbox s (in
// the test's own namespace, where dockerd wires its containers) is a
// bridge port with isolation on.
func hostPortIsolated(t *testing.T, s *sandbox.State) bool {
	t.Helper()
	if len(s.HostIfaces) == 0 {
		return false
	}
	for _, name := range s.HostIfaces {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatalf("host interface %s of %s: %v", name, s.Key, err)
		}
		pi, err := netlink.LinkGetProtinfo(l)
		if err != nil || !pi.Isolated {
			return false
		}
	}
	return true
}
