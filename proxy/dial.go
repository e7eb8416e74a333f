package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/guard"
)

// refusedError means every address the connection could go to is one the
// guard refuses (see package guard): a policy denial, unlike a name that
// does not resolve or a host that refuses.
type refusedError struct {
	port     uint16
	refusals []*guard.Refusal
}

// Error is the reason logged: "private upstream 10.0.0.5: RFC 1918
// (10.0.0.0/8)", one such clause per address refused (the first few).
func (e *refusedError) Error() string {
	return guard.Reason(decisionlog.ReasonPrivateUpstream, e.refusals)
}

// upstream is the first address refused, at the port it would have been
// dialed on: the decision record's upstream.
func (e *refusedError) upstream() netip.AddrPort {
	return netip.AddrPortFrom(e.refusals[0].Addr, e.port)
}

// privateUpstream is the reason of one guard refusal. Every refusal of the
// guard starts so, loopback and the host's own addresses included, so that
// the log has one reason to look for.
func privateUpstream(r *guard.Refusal) string { return decisionlog.ReasonPrivateUpstream + r.String() }

// refusal asks the guard whether a:port may be dialed under pol, for
// name: the name the proxy resolved to a (whose scopes then apply, see
// guard.CheckName), or "" for the client's own destination.
func (p *Proxy) refusal(pol *conf.Policy, name string, a netip.Addr, port uint16) *guard.Refusal {
	if p.permitUpstream != nil && p.permitUpstream(a.Unmap()) {
		return nil
	}
	return p.guard.CheckName(pol, name, a, port)
}

// dialUpstream connects to the upstream for decision d: the addresses of
// d.dialName (resolved by the proxy) at the original port, or else the
// original destination itself. Every address goes past the guard first,
// whatever admitted the connection and in every mode; of a name's
// addresses only those it permits are dialed, and of those only the ones
// below the cap of connections per upstream. It returns the connection
// and the upstream its slot counts (to release when it ends), a
// *refusedError if the guard permits none, or a *limitError if every one
// it permits is at the cap.
func (p *Proxy) dialUpstream(ctx context.Context, pol *conf.Policy, d decision, dst netip.AddrPort) (*net.TCPConn, netip.AddrPort, error) {
	var candidates []netip.Addr
	if d.dialName != "" {
		addrs, err := p.resolver.LookupNetIP(ctx, "ip", d.dialName)
		if err != nil {
			return nil, netip.AddrPort{}, fmt.Errorf("resolve %s: %w", d.dialName, err)
		}
		candidates = addrs
	} else {
		candidates = []netip.Addr{dst.Addr()}
	}
	permitted, err := p.permittedUpstreams(pol, d, dst, candidates)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	var errs []error
	full := 0
	for _, a := range permitted {
		to := netip.AddrPortFrom(a, dst.Port())
		if !p.upstreams.acquire(to, time.Now()) {
			full++
			continue
		}
		c, err := p.dial(ctx, to)
		if err == nil {
			return c.(*net.TCPConn), to, nil
		}
		p.upstreams.release(to, false, time.Now())
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if full == len(permitted) {
		return nil, netip.AddrPort{}, &limitError{limit: decisionlog.LimitPerUpstream, max: int64(p.upstreams.max)}
	}
	return nil, netip.AddrPort{}, fmt.Errorf("dial %s port %d: %w", nameOr(d.dialName, dst.Addr().String()), dst.Port(), errors.Join(errs...))
}

// permittedUpstreams returns the candidates the guard permits, or a
// *refusedError if it permits none.
func (p *Proxy) permittedUpstreams(pol *conf.Policy, d decision, dst netip.AddrPort, candidates []netip.Addr) ([]netip.Addr, error) {
	var refused []*guard.Refusal
	var permitted []netip.Addr
	for _, a := range candidates {
		if r := p.refusal(pol, d.dialName, a, dst.Port()); r != nil {
			refused = append(refused, r)
			continue
		}
		permitted = append(permitted, a.Unmap())
	}
	if len(permitted) == 0 {
		if len(refused) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", d.dialName)
		}
		return nil, &refusedError{port: dst.Port(), refusals: refused}
	}
	return permitted, nil
}

// lostPermission says why pol no longer admits the established connection
// t, or "" if it still does: the policy's decision on its name and
// destination, then the guard's on the upstream it reached (an address
// entry inside a private range may have gone).
func (p *Proxy) lostPermission(pol *conf.Policy, t *tracked) string {
	d := decide(pol, t.currentName(), t.dst)
	if d.verdict == Deny {
		return d.reason
	}
	if !t.inspected && pol.InspectFor(t.currentName()) != nil {
		return reasonNowInspected
	}
	if t.inspected {
		return "" // each upstream dial goes past the guard
	}
	if r := p.refusal(pol, d.dialName, t.upAddr.Addr(), t.upAddr.Port()); r != nil {
		return privateUpstream(r)
	}
	return ""
}

func nameOr(name, alt string) string {
	if name != "" {
		return name
	}
	return alt
}
