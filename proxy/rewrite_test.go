package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/doorman-net/doorman/conf"
)

// fakeRewrites stands for a host whose nat OUTPUT rules rewrite the
// addresses in to (any port: to the same port of the target), and counts
// the lookups. err, if set, is every lookup's answer.
type fakeRewrites struct {
	mu      sync.Mutex
	to      map[netip.Addr]netip.Addr
	err     error
	lookups atomic.Int64
}

func (f *fakeRewrites) Destination(local, remote netip.AddrPort) (netip.AddrPort, bool, error) {
	f.lookups.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !local.IsValid() {
		return remote, false, fmt.Errorf("test: no local address for %v", remote)
	}
	if f.err != nil {
		return remote, false, f.err
	}
	if a, ok := f.to[remote.Addr()]; ok {
		return netip.AddrPortFrom(a, remote.Port()), true, nil
	}
	return remote, false, nil
}

// rewriteEnv is a test proxy on a host that rewrites api.test's address
// (apiAddr) to the LAN address 10.0.0.5.
func rewriteEnv(t *testing.T, pol *conf.Policy) (*testEnv, *fakeRewrites) {
	f := &fakeRewrites{to: map[netip.Addr]netip.Addr{apiAddr: netip.MustParseAddr("10.0.0.5")}}
	return newTestEnv(t, pol, Config{Destinations: f}), f
}

// A name admitted by the policy whose address the host rewrites to a LAN
// address is refused in the client's protocol, on the goroutine path and
// the relay loop's alike, and the line names the rewrite; whatever the
// host does not rewrite goes through.
func TestRewriteRefused(t *testing.T) {
	e, f := rewriteEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test", "evil.test"))
	want := fmt.Sprintf("private upstream 10.0.0.5: RFC 1918 (10.0.0.0/8), where the host rewrites %v to 10.0.0.5:%d (a nat OUTPUT rule)",
		netip.AddrPortFrom(apiAddr, e.tlsPort), e.tlsPort)
	for i := range 2 { // the second is dialed on the loop
		c := e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
		if _, _, err := e.tlsClient(c, "api.test"); err == nil || !strings.Contains(err.Error(), "access denied") {
			t.Fatalf("TLS %d to a name the host rewrites into the LAN: %v, want access denied", i, err)
		}
		c.Close()
	}
	if e.p.dialedOnLoop.Load() != 1 {
		t.Errorf("%d connections dialed on the loop, want 1", e.p.dialedOnLoop.Load())
	}
	n := 0
	for _, r := range e.logs.lines() {
		if r["name"] == "api.test" {
			n++
			if r["verdict"] != "deny" || r["reason"] != want || r["upstream"] != fmt.Sprintf("10.0.0.5:%d", e.tlsPort) {
				t.Errorf("record %v, want deny, reason %q", r, want)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d lines for api.test, want 2", n)
	}
	// HTTP: a 403.
	if resp := e.httpClose(netip.AddrPortFrom(evilAddr, e.tlsPort), "api.test"); !strings.HasPrefix(resp, "HTTP/1.1 403") || strings.Contains(resp, "10.0.0.5") {
		t.Errorf("HTTP to a name the host rewrites into the LAN:\n%s", resp)
	}
	// Not rewritten: allowed.
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	if _, line, err := e.tlsClient(c, "evil.test"); err != nil || !strings.Contains(line, "server "+evilAddr.String()) {
		t.Errorf("TLS to evil.test, not rewritten: %q, %v", line, err)
	}
	if f.lookups.Load() < 4 {
		t.Errorf("%d lookups, want one per connection dialed", f.lookups.Load())
	}
}

// The real destination of a rewrite passes as an upstream would: an
// address entry for it admits it, and a public one needs none; a
// redirect to the host itself passes. A lookup that fails refuses the
// connection (an error line).
func TestRewriteAdmitted(t *testing.T) {
	e, f := rewriteEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test", "10.0.0.5"))
	c := e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
	if _, line, err := e.tlsClient(c, "api.test"); err != nil || !strings.Contains(line, "server "+apiAddr.String()) {
		t.Errorf("rewritten to an admitted address: %q, %v", line, err)
	}
	f.mu.Lock()
	f.to = map[netip.Addr]netip.Addr{apiAddr: netip.MustParseAddr("203.0.113.7")}
	f.mu.Unlock()
	c = e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
	if _, line, err := e.tlsClient(c, "api.test"); err != nil || !strings.Contains(line, "server "+apiAddr.String()) {
		t.Errorf("rewritten to a public address: %q, %v", line, err)
	}

	// A REDIRECT to the host itself (a transparent proxy of the host, an
	// enclosing sandbox's doorman): the host's own process decides.
	f.mu.Lock()
	f.to = map[netip.Addr]netip.Addr{apiAddr: netip.MustParseAddr("127.0.0.1")}
	f.mu.Unlock()
	c = e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
	if _, line, err := e.tlsClient(c, "api.test"); err != nil || !strings.Contains(line, "server "+apiAddr.String()) {
		t.Errorf("rewritten to the host itself: %q, %v", line, err)
	}

	f.mu.Lock()
	f.to, f.err = nil, errors.New("netlink: boom")
	f.mu.Unlock()
	c = e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
	if _, _, err := e.tlsClient(c, "api.test"); err == nil {
		t.Error("a lookup that fails: the connection went through")
	}
	r := e.waitRecord(func(m map[string]any) bool { return m["name"] == "api.test" && m["verdict"] == "error" })
	if !strings.Contains(r["reason"].(string), "cannot tell where the host sends the connection to") || !strings.Contains(r["reason"].(string), "boom") {
		t.Errorf("record %v", r)
	}
}

// A policy change that removes the entry a rewritten connection needed
// closes it.
func TestRewriteLostPermission(t *testing.T) {
	e, _ := rewriteEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test", "10.0.0.5"))
	c := e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
	tc, _, err := e.tlsClient(c, "api.test")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	e.p.SetPolicy(mustPolicy(t, conf.ModeAllowlist, "api.test"))
	r := e.waitRecord(recordFor("api.test", "deny"))
	if !strings.Contains(r["reason"].(string), "where the host rewrites") {
		t.Errorf("record %v", r)
	}
}
