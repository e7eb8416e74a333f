package testnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Default timeouts for the helpers below when ctx carries no deadline: short,
// because a connection doorman drops should fail a test quickly.
const (
	dialTimeout = 5 * time.Second
	dnsTimeout  = 2 * time.Second
)

// Dial connects to address ("host:port") on network ("tcp", "tcp4", "tcp6",
// "udp", "udp4", "udp6") from inside the namespace. A name is resolved with
// LookupHost (through Net.DNS, from inside the namespace) and its addresses
// are tried in turn, IPv4 first.
//
// The socket is created on a thread inside the namespace, so it belongs to
// the namespace for its whole life, whichever goroutine uses it later.
func (x *Netns) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", address, x.name, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: port %q is not a number from 0 to 65535", address, x.name, portStr)
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else if addrs, err = x.LookupHost(ctx, host); err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", address, x.name, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dialTimeout)
		defer cancel()
	}
	var errs []error
	for _, ip := range addrs {
		if (strings.HasSuffix(network, "4") && !ip.Is4()) || (strings.HasSuffix(network, "6") && !ip.Is6()) {
			errs = append(errs, fmt.Errorf("%s is not an address for network %s", ip, network))
			continue
		}
		// A literal address makes net.Dialer create the socket on the
		// calling goroutine (no resolver, no Happy Eyeballs goroutines), so
		// it is created inside the namespace.
		target := netip.AddrPortFrom(ip, uint16(port)).String()
		var c net.Conn
		err := x.Do(func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, target)
			return err
		})
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("dial %s from %s: %w", address, x.name, errors.Join(errs...))
}

// DialTCP connects to address over TCP from inside the namespace, within
// five seconds. See Dial.
func (x *Netns) DialTCP(address string) (*net.TCPConn, error) {
	c, err := x.Dial(context.Background(), "tcp", address)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// DialUDP returns a UDP socket inside the namespace connected to address.
// See Dial.
func (x *Netns) DialUDP(address string) (*net.UDPConn, error) {
	c, err := x.Dial(context.Background(), "udp", address)
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}

// HTTPClient returns a client whose connections start inside the namespace,
// resolve names through Net.DNS and trust only the Net's test CA. It uses no
// proxy from the environment and speaks HTTP/1.1 (set the Transport's
// ForceAttemptHTTP2 for h2). Its idle connections are closed when the
// namespace is deleted.
func (x *Netns) HTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         x.Dial,
		TLSClientConfig:     &tls.Config{RootCAs: x.net.CertPool()},
		TLSHandshakeTimeout: dialTimeout,
	}
	x.mu.Lock()
	x.transports = append(x.transports, tr)
	x.mu.Unlock()
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// LookupHost resolves name through Net.DNS, from inside the namespace, and
// returns its IPv4 then its IPv6 addresses. A name with neither is an error.
func (x *Netns) LookupHost(ctx context.Context, name string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		r, err := x.QueryDNS(ctx, x.net.DNS, name, qtype)
		if err != nil {
			return nil, err
		}
		if r.Rcode != dns.RcodeSuccess {
			return nil, fmt.Errorf("resolve %s: %s from %s", name, dns.RcodeToString[r.Rcode], x.net.DNS)
		}
		for _, rr := range r.Answer {
			switch rr := rr.(type) {
			case *dns.A:
				if ip, ok := netip.AddrFromSlice(rr.A); ok {
					addrs = append(addrs, ip.Unmap())
				}
			case *dns.AAAA:
				if ip, ok := netip.AddrFromSlice(rr.AAAA); ok {
					addrs = append(addrs, ip)
				}
			}
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: %s has no A or AAAA records for it", name, x.net.DNS)
	}
	return addrs, nil
}

// QueryDNS asks server (port 53, UDP) for name's records of type qtype (for
// example dns.TypeA), from inside the namespace. A query that gets no
// answer, because something dropped it, fails after two seconds unless ctx
// ends sooner.
func (x *Netns) QueryDNS(ctx context.Context, server netip.Addr, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	return x.ExchangeDNS(ctx, "udp", netip.AddrPortFrom(server, 53), m)
}

// ExchangeDNS sends the query m to server over network ("udp" or "tcp") from
// inside the namespace and returns the reply.
func (x *Netns) ExchangeDNS(ctx context.Context, network string, server netip.AddrPort, m *dns.Msg) (*dns.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dnsTimeout)
		defer cancel()
	}
	c, err := x.Dial(ctx, network, server.String())
	if err != nil {
		return nil, fmt.Errorf("DNS query for %s: %w", questionName(m), err)
	}
	defer c.Close()
	r, _, err := new(dns.Client).ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: c})
	if err != nil {
		return nil, fmt.Errorf("DNS query for %s to %s over %s from %s: %w", questionName(m), server, network, x.name, err)
	}
	return r, nil
}

func questionName(m *dns.Msg) string {
	if len(m.Question) == 0 {
		return "(no question)"
	}
	return m.Question[0].Name
}
