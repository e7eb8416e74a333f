package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/inspect"
)

// ReasonPlaintextInspected is the reason of a plaintext HTTP request to
// an inspected host: its rules hold only over TLS, and a credential is
// never put into plaintext.
const ReasonPlaintextInspected = "inspected host over plaintext HTTP (its rules hold over https only)"

// reasonNowInspected closes a spliced connection to a host that a new
// policy inspects: its next connection is judged request by request.
const reasonNowInspected = "the host is now inspected"

// decideHTTP is decide for one plaintext HTTP request: an inspected host
// is refused, since its rules would not be applied.
func decideHTTP(pol *conf.Policy, name string, dst netip.AddrPort) decision {
	d := decide(pol, name, dst)
	if d.verdict == Allow && pol.InspectFor(name) != nil {
		return decision{verdict: Deny, reason: ReasonPlaintextInspected}
	}
	return d
}

// inspector returns the proxy's terminating relay, made on first use so
// that a proxy that inspects nothing holds none of it.
func (p *Proxy) inspector() *inspect.Server {
	p.inspectOnce.Do(func() {
		var roots *x509.CertPool
		if p.upstreamCAFile != "" {
			pool, err := loadRoots(p.upstreamCAFile)
			if err != nil {
				p.logger.Error("upstream roots", decisionlog.SandboxKey, p.sandbox, decisionlog.ErrKey, err.Error())
				// Fail closed: an empty pool verifies no upstream.
				pool = x509.NewCertPool()
			}
			roots = pool
		}
		var minter *ca.Minter
		if p.caDir != "" {
			minter = ca.NewMinter(p.caDir)
		}
		p.inspect = inspect.New(inspect.Config{
			Sandbox: p.sandbox, Minter: minter, UpstreamRoots: roots, Logger: p.logger, Policy: p.Policy,
		})
	})
	return p.inspect
}

// loadRoots reads a PEM bundle of upstream roots.
func loadRoots(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("upstream CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("upstream CA file %s: no PEM certificate", path)
	}
	return pool, nil
}

// serveInspected terminates an admitted TLS connection to an inspected
// host and relays its requests one by one (see package inspect). The
// upstream is dialed per upstream connection, for decision d, through the
// guard, against the policy in force then.
func (p *Proxy) serveInspected(c *net.TCPConn, rec *Record, d decision, dst netip.AddrPort) {
	t := &tracked{client: c, dst: dst, name: rec.Name, inspected: true}
	p.track(t)
	defer p.untrack(t)
	dialKey := d.dialName
	if dialKey == "" {
		dialKey = dst.Addr().String()
	}
	sess := &inspect.Session{
		Conn: c, Name: rec.Name, Client: rec.Client, Dst: dst, DialKey: dialKey,
		Dial: func(ctx context.Context) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
			defer cancel()
			pol := p.Policy()
			if now := decide(pol, rec.Name, dst); now.verdict == Deny {
				return nil, errors.New(now.reason)
			}
			up, rt, err := p.dialUpstream(ctx, pol, d, dst)
			if err != nil {
				return nil, err
			}
			return &slotConn{TCPConn: up, release: func() { p.upstreams.release(rt.slot, true, time.Now()) }}, nil
		},
	}
	res := p.inspector().Serve(sess)
	rec.BytesUp, rec.BytesDn = res.BytesUp, res.BytesDown
	rec.Reason = fmt.Sprintf("%s: %d requests, %d refused", decisionlog.ReasonInspected, res.Requests, res.Denied)
	if res.HandshakeErr != nil {
		rec.Reason = decisionlog.ReasonClientTLS + res.HandshakeErr.Error() +
			" (the host is inspected: the client must trust the network's CA, and cannot pin the host's own certificate)"
	}
	if why := t.killReason(); why != "" {
		rec.Verdict, rec.Reason = Deny, why
	}
	p.log(*rec)
}

// slotConn is an inspected session's upstream connection, which gives
// its per-upstream slot (see upstreamSlots) back when it is closed.
type slotConn struct {
	*net.TCPConn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.release)
	return err
}
