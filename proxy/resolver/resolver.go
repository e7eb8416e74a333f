// Package resolver is the stub resolver with which a sandbox's proxy looks
// up the names its policy admits, the one DNS exchange with a server
// (Exchange, which the DNS filter forwards with too), and the one parser
// of the DNS server addresses doorman is configured with (ParseServer).
//
// The proxy must see the names the container sees: a name that only the
// container's resolvers know (Docker's --dns, Podman's container-name DNS,
// Kubernetes cluster DNS, any split horizon) is one the proxy cannot dial
// if it asks the host's resolver instead. So the proxy asks the sandbox's
// own resolvers, the servers its DNS filter forwards to, and it asks them
// itself. The Go resolver, even with its Dial pointed elsewhere, still
// takes its servers, attempts, timeout and search list from the host's
// /etc/resolv.conf: Dial is called once per host server and attempt, so
// rotating the sandbox's servers inside it would try as many of them as
// the host's file allows (two, with one nameserver line), each for the
// host's timeout, and the host's search list would add queries of its own.
//
// Stub asks its servers in the order given, each for at most its Timeout,
// as a libc stub resolver does: a server that does not answer, cannot be
// reached, or answers SERVFAIL, REFUSED or NOTIMP is skipped for the next;
// NOERROR and NXDOMAIN are answers, and end the search (a name one server
// denies is not looked for at the next, which would make a split horizon
// depend on which server is up). Names are asked as given, fully
// qualified: the proxy's names come from SNI and Host, never from a
// search list. A and AAAA are asked at the same time; an answer counts
// only for the name asked and the CNAME chain the answer itself gives, and
// only when its ID and question are the query's. The addresses come back
// in RFC 6724's order, as the Go resolver orders them, so that the proxy
// dials them in the order it did before it had a resolver of its own.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DefaultTimeout bounds one attempt at one server unless Config says
// otherwise (the DNS filter's timeout, too).
const DefaultTimeout = 2 * time.Second

// maxCNAMEs bounds the CNAME chain followed within one answer.
const maxCNAMEs = 8

// udpSize is the EDNS0 buffer size the queries advertise: the size the
// DNS flag day 2020 recommends, which needs no fragmentation.
const udpSize = 1232

// Config says which servers a Stub asks.
type Config struct {
	// Servers are asked in this order (required).
	Servers []netip.AddrPort
	// Timeout bounds each attempt at one server (default DefaultTimeout).
	Timeout time.Duration
}

// Stub resolves names through the servers of its Config. Its methods are
// safe for concurrent use.
type Stub struct {
	servers []netip.AddrPort
	timeout time.Duration
}

// New returns a stub resolver asking cfg.Servers. It fails without
// servers.
func New(cfg Config) (*Stub, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("resolver: no DNS servers")
	}
	for _, s := range cfg.Servers {
		if !s.IsValid() || s.Port() == 0 {
			return nil, fmt.Errorf("resolver: invalid server address %q", s)
		}
	}
	t := cfg.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return &Stub{servers: slices.Clone(cfg.Servers), timeout: t}, nil
}

// Servers returns the servers r asks, in order.
func (r *Stub) Servers() []netip.AddrPort { return slices.Clone(r.servers) }

// errNotFound stands for an answer saying the name has no such address.
var errNotFound = errors.New("no such host")

// LookupNetIP returns the addresses of host: network "ip" both families,
// "ip4" or "ip6" one, in the order to dial them (RFC 6724's, as the Go
// resolver gives them; see sortForDialing). An IP address is returned as
// it is. A
// name without addresses is a *net.DNSError with IsNotFound; one no server
// answered for is a *net.DNSError with IsTemporary that says what each
// server did.
func (r *Stub) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	var qtypes []uint16
	switch network {
	case "ip":
		qtypes = []uint16{dns.TypeA, dns.TypeAAAA}
	case "ip4":
		qtypes = []uint16{dns.TypeA}
	case "ip6":
		qtypes = []uint16{dns.TypeAAAA}
	default:
		return nil, &net.DNSError{Err: "unknown network " + network, Name: host}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if network == "ip" || (network == "ip4") == a.Unmap().Is4() {
			return []netip.Addr{a}, nil
		}
		return nil, &net.DNSError{Err: errNotFound.Error(), Name: host, IsNotFound: true}
	}
	name := dns.Fqdn(host)
	if _, ok := dns.IsDomainName(name); !ok || host == "" {
		return nil, &net.DNSError{Err: "not a domain name", Name: host, IsNotFound: true}
	}
	type result struct {
		addrs []netip.Addr
		err   error
	}
	results := make([]result, len(qtypes))
	var wg sync.WaitGroup
	for i, qt := range qtypes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].addrs, results[i].err = r.lookup(ctx, name, qt)
		}()
	}
	wg.Wait()
	var addrs []netip.Addr
	var failures []string
	notFound := false
	for i, res := range results {
		addrs = append(addrs, res.addrs...)
		switch {
		case errors.Is(res.err, errNotFound):
			notFound = true
		case res.err != nil:
			failures = append(failures, dns.TypeToString[qtypes[i]]+": "+res.err.Error())
		}
	}
	switch {
	case len(addrs) > 0:
		sortForDialing(addrs)
		return addrs, nil
	case notFound || len(failures) == 0:
		return nil, &net.DNSError{Err: errNotFound.Error(), Name: host, IsNotFound: true}
	}
	return nil, &net.DNSError{Err: strings.Join(failures, "; "), Name: host, IsTemporary: true}
}

// lookup asks the servers in turn for the qtype records of name, until
// one answers. No records (NODATA) is nil, nil; NXDOMAIN is errNotFound.
func (r *Stub) lookup(ctx context.Context, name string, qtype uint16) ([]netip.Addr, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.SetEdns0(udpSize, false)
	var failures []string
	for _, srv := range r.servers {
		reply, err := r.exchange(ctx, q, srv)
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", srv, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		switch reply.Rcode {
		case dns.RcodeSuccess:
			return addrsOf(reply, name, qtype), nil
		case dns.RcodeNameError:
			return nil, errNotFound
		}
		failures = append(failures, fmt.Sprintf("%s: answered %s", srv, rcodeString(reply.Rcode)))
	}
	return nil, errors.New(strings.Join(failures, "; "))
}

// exchange asks srv over UDP, and again over TCP if the answer was
// truncated, and checks that the reply answers q.
func (r *Stub) exchange(ctx context.Context, q *dns.Msg, srv netip.AddrPort) (*dns.Msg, error) {
	reply, err := r.exchangeOver(ctx, q, srv, "udp")
	if err == nil && reply.Truncated {
		reply, err = r.exchangeOver(ctx, q, srv, "tcp")
	}
	if err != nil {
		return nil, err
	}
	return reply, nil
}

// exchangeOver sends q (with a new ID) to srv over proto, within the
// timeout, and returns the reply if it answers q.
func (r *Stub) exchangeOver(ctx context.Context, q *dns.Msg, srv netip.AddrPort, proto string) (*dns.Msg, error) {
	m := q.Copy()
	m.Id = dns.Id()
	return Exchange(ctx, m, srv, proto, r.timeout)
}

// addrsOf returns the qtype addresses the answer section gives for name,
// following the CNAME chain it holds (records for other names are
// ignored).
func addrsOf(reply *dns.Msg, name string, qtype uint16) []netip.Addr {
	target := name
	for range maxCNAMEs {
		next := ""
		for _, rr := range reply.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, target) {
				next = c.Target
				break
			}
		}
		if next == "" {
			break
		}
		target = next
	}
	var out []netip.Addr
	for _, rr := range reply.Answer {
		if !strings.EqualFold(rr.Header().Name, target) {
			continue
		}
		var ip net.IP
		switch v := rr.(type) {
		case *dns.A:
			if qtype == dns.TypeA {
				ip = v.A
			}
		case *dns.AAAA:
			if qtype == dns.TypeAAAA {
				ip = v.AAAA
			}
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			if qtype == dns.TypeA {
				a = a.Unmap()
			}
			out = append(out, a)
		}
	}
	return out
}

func rcodeString(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprintf("rcode %d", rc)
}
