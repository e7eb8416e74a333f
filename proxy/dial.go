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
	// rewritten, when valid, is the address the proxy dialed, which a
	// nat rule of the host rewrote to the one refused (at port).
	rewritten netip.AddrPort
}

// Error is the reason logged: "private upstream 10.0.0.5: RFC 1918
// (10.0.0.0/8)", one such clause per address refused (the first few),
// and for a rewrite what the host rewrote: "private upstream 10.0.0.5:
// RFC 1918 (10.0.0.0/8), where the host rewrites 203.0.113.7:443 to
// 10.0.0.5:8443 (a nat OUTPUT rule)".
func (e *refusedError) Error() string {
	s := guard.Reason(decisionlog.ReasonPrivateUpstream, e.refusals)
	if e.rewritten.IsValid() {
		s += fmt.Sprintf(", where the host rewrites %v to %v (a nat OUTPUT rule)", e.rewritten, e.upstream())
	}
	return s
}

// upstream is the first address refused, at the port it would have been
// dialed on (or, rewritten, is sent to): the decision record's upstream.
func (e *refusedError) upstream() netip.AddrPort {
	return netip.AddrPortFrom(e.refusals[0].Addr, e.port)
}

// route is where an upstream connection goes: the address dialed, which
// holds its slot among the connections per upstream, and the one the
// host really sends it to (the same, unless a nat rule rewrote it).
type route struct {
	slot, real netip.AddrPort
}

// checkRewrite asks where the host really sends the connection from
// local to to, which the guard admitted for name under pol, and returns
// that address. When a nat OUTPUT rule rewrote it (a DNAT, as kube-proxy
// installs for a service's addresses), the real destination must pass
// the guard as well (rewriteRefusal); if it does not, the error is a
// *refusedError naming the rewrite. A lookup that fails is an error too:
// the proxy cannot tell where the connection goes.
func (p *Proxy) checkRewrite(pol *conf.Policy, name string, local, to netip.AddrPort) (netip.AddrPort, error) {
	if p.realDst == nil {
		return to, nil
	}
	real, rewritten, err := p.realDst.Destination(local, to)
	if err != nil {
		return to, fmt.Errorf("cannot tell where the host sends the connection to %v: %w", to, err)
	}
	if !rewritten {
		return to, nil
	}
	if r := p.rewriteRefusal(pol, name, to, real); r != nil {
		return real, &refusedError{port: real.Port(), refusals: []*guard.Refusal{r}, rewritten: to}
	}
	return real, nil
}

// rewriteRefusal judges real, where the host rewrote the admitted
// upstream to: nil if it may be reached. Two rewrites are the host's own
// handling and pass: of an address the guard refuses by itself, which an
// address entry or a cluster's scope opened (a service's address that
// kube-proxy sends to its pods); and to the host itself (a REDIRECT to a
// transparent proxy of the host, such as the enclosing sandbox's doorman
// proxy when this one runs inside a sandbox: the connection goes to one of
// the host's own processes, which decides where it goes next). A rewrite
// of any other address (a public one) elsewhere passes only if the guard
// admits real, as if it had been dialed for name.
func (p *Proxy) rewriteRefusal(pol *conf.Policy, name string, to, real netip.AddrPort) *guard.Refusal {
	if p.refusal(nil, "", to.Addr(), to.Port()) != nil || p.guard.Local(real.Addr()) {
		return nil
	}
	return p.refusal(pol, name, real.Addr(), real.Port())
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
// and its route (the upstream its slot counts, to release when it ends,
// and where the host sends it), a *refusedError if the guard permits
// none or the host rewrote the one dialed to an address the guard
// refuses (see checkRewrite), or a *limitError if every one it permits
// is at the cap.
func (p *Proxy) dialUpstream(ctx context.Context, pol *conf.Policy, d decision, dst netip.AddrPort) (*net.TCPConn, route, error) {
	var candidates []netip.Addr
	if d.dialName != "" {
		addrs, err := p.resolver.LookupNetIP(ctx, "ip", d.dialName)
		if err != nil {
			return nil, route{}, fmt.Errorf("resolve %s: %w", d.dialName, err)
		}
		candidates = addrs
	} else {
		candidates = []netip.Addr{dst.Addr()}
	}
	permitted, err := p.permittedUpstreams(pol, d, dst, candidates)
	if err != nil {
		return nil, route{}, err
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
			tc := c.(*net.TCPConn)
			local, _ := netip.ParseAddrPort(tc.LocalAddr().String())
			real, err := p.checkRewrite(pol, d.dialName, local, to)
			if err != nil {
				tc.Close()
				p.upstreams.release(to, true, time.Now())
				return nil, route{}, err
			}
			return tc, route{slot: to, real: real}, nil
		}
		p.upstreams.release(to, false, time.Now())
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if full == len(permitted) {
		return nil, route{}, &limitError{limit: decisionlog.LimitPerUpstream, max: int64(p.upstreams.max)}
	}
	return nil, route{}, fmt.Errorf("dial %s port %d: %w", nameOr(d.dialName, dst.Addr().String()), dst.Port(), errors.Join(errs...))
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
	if t.realAddr.IsValid() && t.realAddr != t.upAddr {
		if r := p.rewriteRefusal(pol, d.dialName, t.upAddr, t.realAddr); r != nil {
			return (&refusedError{port: t.realAddr.Port(), refusals: []*guard.Refusal{r}, rewritten: t.upAddr}).Error()
		}
	}
	return ""
}

func nameOr(name, alt string) string {
	if name != "" {
		return name
	}
	return alt
}
