package testnet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Interface names of the uplink between host and inet.
const (
	HostUplink = "eth0"    // host's end, its only way out
	InetUplink = "to-host" // inet's end
)

// maxSandboxes is how many sandboxes fit in 198.51.100.4/30 … 198.51.100.124/30.
const maxSandboxes = 31

// Fixed addresses of the topology; see the package comment.
var (
	inetUplink4 = netip.MustParsePrefix("198.51.100.1/30")
	hostUplink4 = netip.MustParsePrefix("198.51.100.2/30")
	inetUplink6 = netip.MustParsePrefix("2001:db8:1::1/64")
	hostUplink6 = netip.MustParsePrefix("2001:db8:1::2/64")
	hostSide4   = netip.MustParsePrefix("198.51.100.0/24")
	hostSide6   = netip.MustParsePrefix("2001:db8::/40")
)

func defaultDNSAddrs() []netip.Addr {
	return []netip.Addr{
		netip.MustParseAddr("203.0.113.53"), netip.MustParseAddr("2001:db8:100::53"),
		netip.MustParseAddr("203.0.113.54"), netip.MustParseAddr("2001:db8:100::54"),
	}
}

// Net is one test's private internet: the inet and host namespaces, the
// servers in inet, the test CA, and the sandboxes made with NewSandbox.
// Its exported fields are set by New and must not be changed.
type Net struct {
	// DNS and DNS6 are the resolver's addresses (UDP and TCP port 53).
	DNS, DNS6 netip.Addr
	// RogueDNS and RogueDNS6 are a second DNS server with the same answers,
	// standing in for a resolver a sandbox must not reach.
	RogueDNS, RogueDNS6 netip.Addr
	// HostAddr4 and HostAddr6 are host's addresses on its uplink: the source
	// of every connection dialled from host.
	HostAddr4, HostAddr6 netip.Addr
	// InetAddr4 and InetAddr6 are inet's end of the uplink, host's gateways.
	InetAddr4, InetAddr6 netip.Addr
	// CAPEM is the test CA's certificate, PEM-encoded.
	CAPEM []byte

	t    testing.TB
	id   string
	ca   *testCA
	inet *Netns
	host *Netns
	zone *dnsZone

	mu        sync.Mutex
	lan       *Netns                      // made by the first AddLANHost
	lanAddrs  []netip.Addr                // every address AddLANHost took
	certs     map[string]*tls.Certificate // host name → its certificate
	owners    map[netip.Addr]string       // inet address → host name
	sandboxes [maxSandboxes + 1]bool      // sandbox index → in use
}

// New builds the inet and host namespaces, wires them together and starts
// the DNS servers. Everything is torn down by t.Cleanup. It skips the test
// when not run as root. Methods of Net that can fail the test (AddHost,
// AddRecord, WriteCA, QueriesSeen, Host counters) use t, so call them from
// t's goroutine.
func New(t testing.TB) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("testnet: needs root to create network namespaces")
	}
	dnsAddrs := defaultDNSAddrs()
	n := &Net{
		DNS: dnsAddrs[0], DNS6: dnsAddrs[1], RogueDNS: dnsAddrs[2], RogueDNS6: dnsAddrs[3],
		HostAddr4: hostUplink4.Addr(), HostAddr6: hostUplink6.Addr(),
		InetAddr4: inetUplink4.Addr(), InetAddr6: inetUplink6.Addr(),
		t:      t,
		id:     randomID(4),
		zone:   newDNSZone(),
		certs:  map[string]*tls.Certificate{},
		owners: map[netip.Addr]string{},
	}
	ca, err := newTestCA(n.id)
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	n.ca, n.CAPEM = ca, ca.pem

	n.inet = newNetns(t, n, "inet")
	n.host = newNetns(t, n, "host")
	if err := n.wire(); err != nil {
		t.Fatalf("testnet: %v", err)
	}
	for _, a := range n.dnsServers() {
		startDNSServer(t, n.inet, a, n.zone)
	}
	return n
}

// wire sets up forwarding in host, the host↔inet veth, addresses and routes.
func (n *Net) wire() error {
	// Forwarding in host makes it a router for its sandboxes; in inet it
	// makes inet answer a packet for an address nobody holds with an ICMP
	// error (without it the packet vanishes and a test waits for a timeout).
	for _, x := range []*Netns{n.host, n.inet} {
		if err := x.setSysctls(map[string]string{
			"net/ipv4/ip_forward":          "1",
			"net/ipv6/conf/all/forwarding": "1",
		}); err != nil {
			return err
		}
	}

	err := n.inet.withLinks(func(h *netlink.Handle) error {
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: InetUplink},
			PeerName:      HostUplink,
			PeerNamespace: netlink.NsFd(int(n.host.ns.Fd())),
		}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s/%s: %w", InetUplink, HostUplink, err)
		}
		if err := configureLink(h, InetUplink, inetUplink4, inetUplink6); err != nil {
			return err
		}
		if err := addLoopbackAddrs(h, n.dnsServers()); err != nil {
			return err
		}
		return addRoutes(h,
			&netlink.Route{Dst: prefixNet(hostSide4), Gw: hostUplink4.Addr().AsSlice()},
			&netlink.Route{Dst: prefixNet(hostSide6), Gw: hostUplink6.Addr().AsSlice()},
			&netlink.Route{Dst: prefixNet(inetPrefix4), Type: unix.RTN_UNREACHABLE},
			&netlink.Route{Dst: prefixNet(inetPrefix6), Type: unix.RTN_UNREACHABLE},
		)
	})
	if err != nil {
		return fmt.Errorf("wire %s: %w", n.inet.Name(), err)
	}

	err = n.host.withLinks(func(h *netlink.Handle) error {
		if err := configureLink(h, HostUplink, hostUplink4, hostUplink6); err != nil {
			return err
		}
		return addRoutes(h,
			&netlink.Route{Gw: inetUplink4.Addr().AsSlice()},
			&netlink.Route{Gw: inetUplink6.Addr().AsSlice()},
			&netlink.Route{Dst: prefixNet(hostSide4), Type: unix.RTN_UNREACHABLE},
			&netlink.Route{Dst: prefixNet(hostSide6), Type: unix.RTN_UNREACHABLE},
		)
	})
	if err != nil {
		return fmt.Errorf("wire %s: %w", n.host.Name(), err)
	}
	if err := n.inet.waitLinkReady(InetUplink, inetUplink6.Addr()); err != nil {
		return err
	}
	return n.host.waitLinkReady(HostUplink, hostUplink6.Addr())
}

// configureLink sets the link up and gives it the addresses.
func configureLink(h *netlink.Handle, name string, addrs ...netip.Prefix) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	for _, p := range addrs {
		if err := h.AddrAdd(link, netlinkAddr(p)); err != nil {
			return fmt.Errorf("add %s to %s: %w", p, name, err)
		}
	}
	return nil
}

// addLoopbackAddrs puts server addresses on lo, as host routes.
func addLoopbackAddrs(h *netlink.Handle, addrs []netip.Addr) error {
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	for _, a := range addrs {
		if err := h.AddrAdd(lo, netlinkAddr(netip.PrefixFrom(a, a.BitLen()))); err != nil {
			return fmt.Errorf("add %s to lo: %w", a, err)
		}
	}
	return nil
}

func addRoutes(h *netlink.Handle, routes ...*netlink.Route) error {
	for _, r := range routes {
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("add route %s: %w", r, err)
		}
	}
	return nil
}

// netlinkAddr turns p into an address without duplicate address detection,
// so IPv6 addresses are usable at once instead of "tentative" for a second.
func netlinkAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: prefixNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// prefixNet converts p (keeping the address bits, as an interface address
// needs) to a *net.IPNet.
func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// CertPool returns a new pool holding only the test CA.
func (n *Net) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(n.ca.cert)
	return pool
}

// WriteCA writes the test CA's certificate to dir/testnet-ca.pem (for
// curl --cacert, SSL_CERT_FILE and the like) and returns the file's path.
func (n *Net) WriteCA(dir string) string {
	n.t.Helper()
	path := filepath.Join(dir, "testnet-ca.pem")
	if err := os.WriteFile(path, n.CAPEM, 0o644); err != nil {
		n.t.Fatalf("testnet: write the test CA: %v", err)
	}
	return path
}

// HostNS is the namespace playing the runtime's: doorman's proxy runs and
// dials from here, and CNI plugins run here.
func (n *Net) HostNS() *Netns { return n.host }

// InetNS is the namespace holding the fake internet's servers.
func (n *Net) InetNS() *Netns { return n.inet }

// HostPath is the host namespace's path, e.g. /var/run/netns/dm-host-1a2b3c4d.
func (n *Net) HostPath() string { return n.host.Path() }

// InHost runs fn on a thread inside the host namespace. See Netns.Do.
func (n *Net) InHost(fn func() error) error { return n.host.Do(fn) }

// HostCommand returns a command running the program name inside the host
// namespace. See Netns.Command.
func (n *Net) HostCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	return n.host.Command(ctx, name, args...)
}
