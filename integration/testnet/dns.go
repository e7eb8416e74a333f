package testnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TunnelZone is the zone under which every query is counted by
// TunnelQueries and answered NXDOMAIN, standing in for an attacker's
// authoritative server in DNS-tunnelling tests.
const TunnelZone = "tunnel.test"

// recordTTL is short so that tests which change records are not fooled by
// caches.
const recordTTL = 5

// dnsZone is what every DNS server of a Net answers from, and what it saw.
type dnsZone struct {
	mu           sync.Mutex
	records      map[string][]netip.Addr // canonical name → addresses
	only         map[string][]netip.Addr // canonical name → the only servers that answer it (AnswerOnlyAt)
	byServer     map[netip.Addr]int      // server address → queries
	byName       map[string]int          // canonical name → queries, all servers
	byServerName map[serverName]int      // queries for one name at one server
	tunnel       []string                // names queried under TunnelZone
}

// serverName is one name at one server, for per-server counts.
type serverName struct {
	server netip.Addr
	name   string
}

func newDNSZone() *dnsZone {
	return &dnsZone{
		records:      map[string][]netip.Addr{},
		only:         map[string][]netip.Addr{},
		byServer:     map[netip.Addr]int{},
		byName:       map[string]int{},
		byServerName: map[serverName]int{},
	}
}

// canonicalName lowercases name and drops its trailing dot.
func canonicalName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

func inTunnelZone(name string) bool {
	return name == TunnelZone || strings.HasSuffix(name, "."+TunnelZone)
}

// add appends addrs to name's records.
func (z *dnsZone) add(name string, addrs ...netip.Addr) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.records[name] = append(z.records[name], addrs...)
}

// handler answers queries arriving at the server on addr.
func (z *dnsZone) handler(addr netip.Addr) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		if len(req.Question) != 1 {
			m.SetRcode(req, dns.RcodeFormatError)
			_ = w.WriteMsg(m)
			return
		}
		m.SetReply(req)
		m.Authoritative = true
		q := req.Question[0]
		name := canonicalName(q.Name)

		z.mu.Lock()
		z.byServer[addr]++
		z.byName[name]++
		z.byServerName[serverName{addr, name}]++
		if inTunnelZone(name) {
			z.tunnel = append(z.tunnel, name)
		}
		addrs, known := z.records[name]
		if only, restricted := z.only[name]; restricted && !slices.Contains(only, addr) {
			known = false
		}
		addrs = slices.Clone(addrs)
		z.mu.Unlock()

		if !known || inTunnelZone(name) {
			m.Rcode = dns.RcodeNameError
			_ = w.WriteMsg(m)
			return
		}
		hdr := func(rrtype uint16) dns.RR_Header {
			return dns.RR_Header{Name: q.Name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: recordTTL}
		}
		for _, a := range addrs {
			switch {
			case q.Qtype == dns.TypeA && a.Is4():
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: a.AsSlice()})
			case q.Qtype == dns.TypeAAAA && a.Is6():
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: a.AsSlice()})
			}
		}
		_ = w.WriteMsg(m)
	})
}

// startDNSServer serves zone on UDP and TCP port 53 of addr, with sockets
// created inside inet, until t's cleanup.
func startDNSServer(t testing.TB, inet *Netns, addr netip.Addr, zone *dnsZone) {
	t.Helper()
	ap := netip.AddrPortFrom(addr, 53).String()
	var pc net.PacketConn
	var l net.Listener
	err := inet.Do(func() error {
		var err error
		if pc, err = net.ListenPacket("udp", ap); err != nil {
			return err
		}
		if l, err = net.Listen("tcp", ap); err != nil {
			pc.Close()
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testnet: DNS server on %s in %s: %v", ap, inet.Name(), err)
	}
	handler := zone.handler(addr)
	for _, srv := range []*dns.Server{
		{PacketConn: pc, Handler: handler},
		{Listener: l, Handler: handler},
	} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan error, 1)
		go func() { done <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("testnet: DNS server on %s: %v", ap, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.ShutdownContext(ctx); err != nil {
				t.Errorf("testnet: shut down DNS server on %s: %v", ap, err)
			}
			<-done
		})
	}
}

// QueriesSeen is the number of DNS queries (UDP and TCP, any name) that
// reached the server on addr: one of DNS, DNS6, RogueDNS and RogueDNS6. Any
// other address fails the test, so that a typo cannot pass for "no query
// arrived".
func (n *Net) QueriesSeen(server netip.Addr) int {
	if !slices.Contains(n.dnsServers(), server) {
		n.t.Fatalf("testnet: QueriesSeen(%s): not a DNS server of this Net (those are %v)", server, n.dnsServers())
	}
	n.zone.mu.Lock()
	defer n.zone.mu.Unlock()
	return n.zone.byServer[server]
}

// QueriesAt is the number of DNS queries for name (any type) that reached
// server, one of DNS, DNS6, RogueDNS and RogueDNS6 (any other fails the
// test, as in QueriesSeen).
func (n *Net) QueriesAt(server netip.Addr, name string) int {
	n.t.Helper()
	if !slices.Contains(n.dnsServers(), server) {
		n.t.Fatalf("testnet: QueriesAt(%s): not a DNS server of this Net (those are %v)", server, n.dnsServers())
	}
	n.zone.mu.Lock()
	defer n.zone.mu.Unlock()
	return n.zone.byServerName[serverName{server, canonicalName(name)}]
}

// QueriesFor is the number of DNS queries for name (any type, any server).
func (n *Net) QueriesFor(name string) int {
	n.zone.mu.Lock()
	defer n.zone.mu.Unlock()
	return n.zone.byName[canonicalName(name)]
}

// TunnelQueries is the number of queries, to any server, for names in
// TunnelZone.
func (n *Net) TunnelQueries() int {
	n.zone.mu.Lock()
	defer n.zone.mu.Unlock()
	return len(n.zone.tunnel)
}

// TunnelNames are the names under TunnelZone that reached a server, in the
// order they arrived, lowercased and without the trailing dot.
func (n *Net) TunnelNames() []string {
	n.zone.mu.Lock()
	defer n.zone.mu.Unlock()
	return slices.Clone(n.zone.tunnel)
}

// AddRecord makes both DNS servers answer name with addrs (in addition to
// any addresses it has already), without starting any server. It lets a
// test point a name at an address it should never be able to reach, such as
// 127.0.0.1 or the host's own Net.HostAddr4.
func (n *Net) AddRecord(name string, addrs ...netip.Addr) {
	n.t.Helper()
	cname, err := checkHostName(name)
	if err != nil {
		n.t.Fatalf("testnet: AddRecord: %v", err)
	}
	if inTunnelZone(cname) {
		n.t.Fatalf("testnet: AddRecord(%q): names under %s always answer NXDOMAIN", name, TunnelZone)
	}
	for _, a := range addrs {
		if !a.IsValid() || a.Zone() != "" {
			n.t.Fatalf("testnet: AddRecord(%q): address %q is not a plain IPv4 or IPv6 address", name, a)
		}
	}
	n.zone.add(cname, addrs...)
}

// AnswerOnlyAt makes only the given DNS servers (among DNS, DNS6, RogueDNS
// and RogueDNS6) answer name, which AddHost or AddRecord made; the others
// answer NXDOMAIN for it. It stands for a name only some resolvers know: a
// container's own (Docker's --dns, Podman's container-name DNS, cluster
// DNS, a split horizon), which a resolver elsewhere does not.
func (n *Net) AnswerOnlyAt(name string, servers ...netip.Addr) {
	n.t.Helper()
	cname, err := checkHostName(name)
	if err != nil {
		n.t.Fatalf("testnet: AnswerOnlyAt: %v", err)
	}
	if len(servers) == 0 {
		n.t.Fatalf("testnet: AnswerOnlyAt(%q): name at least one server", name)
	}
	for _, s := range servers {
		if !slices.Contains(n.dnsServers(), s) {
			n.t.Fatalf("testnet: AnswerOnlyAt(%q): %s is not a DNS server of this Net (those are %v)", name, s, n.dnsServers())
		}
	}
	n.zone.mu.Lock()
	defer n.zone.mu.Unlock()
	if _, ok := n.zone.records[cname]; !ok {
		n.t.Fatalf("testnet: AnswerOnlyAt(%q): no such name; add it with AddHost or AddRecord first", name)
	}
	n.zone.only[cname] = slices.Clone(servers)
}

// checkHostName validates a DNS name and returns it canonical.
func checkHostName(name string) (string, error) {
	cname := canonicalName(name)
	if cname == "" {
		return "", fmt.Errorf("empty host name")
	}
	if strings.Contains(cname, "*") {
		return "", fmt.Errorf("host name %q: wildcards are not supported, add each name", name)
	}
	if _, ok := dns.IsDomainName(cname); !ok || strings.ContainsAny(cname, " \\") {
		return "", fmt.Errorf("host name %q is not a valid DNS name", name)
	}
	return cname, nil
}

func (n *Net) dnsServers() []netip.Addr {
	return []netip.Addr{n.DNS, n.DNS6, n.RogueDNS, n.RogueDNS6}
}
