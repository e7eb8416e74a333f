package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
)

// The "LAN": private addresses held by a network namespace the test makes,
// which the proxy dials into (see lanEnv) as if it were the host's LAN.
// The namespace also holds neighbourAddr, standing for another sandbox on
// the host's bridge 198.51.100.128/25.
var (
	lanAddr       = netip.MustParseAddr("10.0.0.5")
	lanAddr6      = netip.MustParseAddr("fd00::5")
	neighbourAddr = netip.MustParseAddr("198.51.100.130")
	lanNets       = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fc00::/7"), netip.MustParsePrefix("198.51.100.128/25"),
	}
)

// lanServer counts the connections and bytes that reach one LAN port;
// HTTP ports also answer, naming the server.
type lanServer struct {
	conns, bytes atomic.Int64
}

// lan is the namespace and its servers, by port.
type lan struct {
	path    string
	servers map[uint16]*lanServer
	dials   atomic.Int64 // connections the proxy tried to open into it
}

// newLAN makes a namespace holding lanAddr, lanAddr6 and neighbourAddr on
// its loopback, with a counting server on each of ports on each; httpPort
// answers HTTP. Nothing is routed to it: only the proxy's test dialer
// reaches it (see dialInto).
func newLAN(t *testing.T, httpPort uint16, ports ...uint16) *lan {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var b [4]byte
	rand.Read(b[:])
	name := "dm-proxylan-" + hex.EncodeToString(b[:])
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ip("-n", name, "link", "set", "lo", "up")
	ip("-n", name, "addr", "add", lanAddr.String()+"/32", "dev", "lo")
	ip("-n", name, "addr", "add", lanAddr6.String()+"/128", "dev", "lo", "nodad")
	ip("-n", name, "addr", "add", neighbourAddr.String()+"/32", "dev", "lo")
	l := &lan{path: filepath.Join("/var/run/netns", name), servers: map[uint16]*lanServer{}}
	var listeners []net.Listener
	err := ns.WithNetNSPath(l.path, func(ns.NetNS) error {
		for _, port := range append([]uint16{httpPort}, ports...) {
			for _, a := range []netip.Addr{lanAddr, lanAddr6, neighbourAddr} {
				ln, err := net.Listen("tcp", netip.AddrPortFrom(a, port).String())
				if err != nil {
					return err
				}
				listeners = append(listeners, ln)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range listeners {
		t.Cleanup(func() { ln.Close() })
		port := netip.MustParseAddrPort(ln.Addr().String()).Port()
		srv := l.servers[port]
		if srv == nil {
			srv = &lanServer{}
			l.servers[port] = srv
		}
		if port == httpPort {
			hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				srv.conns.Add(1)
				fmt.Fprintf(w, "lan server %s host %s\n", ln.Addr(), r.Host)
			})}
			go hs.Serve(ln)
			t.Cleanup(func() { hs.Close() })
			continue
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				srv.conns.Add(1)
				go func() {
					defer c.Close()
					buf := make([]byte, 4096)
					for {
						n, err := c.Read(buf)
						srv.bytes.Add(int64(n))
						if err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	return l
}

// dialInto makes p dial the addresses of lanNets inside l (as the proxy
// would from a host on that LAN), counting the attempts, and the rest as
// the test proxy does (loopback only).
func dialInto(l *lan) func(*Proxy) {
	return func(p *Proxy) {
		def := p.dial
		p.dial = func(ctx context.Context, to netip.AddrPort) (net.Conn, error) {
			for _, pfx := range lanNets {
				if pfx.Contains(to.Addr()) {
					l.dials.Add(1)
					var c net.Conn
					err := ns.WithNetNSPath(l.path, func(ns.NetNS) error {
						var err error
						c, err = (&net.Dialer{}).DialContext(ctx, "tcp", to.String())
						return err
					})
					return c, err
				}
			}
			return def(ctx, to)
		}
	}
}

// lanEnv is a test proxy whose resolver answers the names under wild.test
// with LAN addresses (rebind, rebind6), LAN and public ones (mixed), or a
// connected subnet's (neighbour), and that dials the LAN's addresses
// inside l.
func lanEnv(t *testing.T, l *lan, pol *conf.Policy) *testEnv {
	t.Helper()
	cfg := Config{
		Resolver: mapResolver{
			"rebind.wild.test":    {lanAddr, lanAddr6},
			"rebind6.wild.test":   {lanAddr6},
			"mixed.wild.test":     {lanAddr, apiAddr},
			"neighbour.wild.test": {neighbourAddr},
			"x.wild.test":         {apiAddr},
		},
		Guard: guard.New(guard.Config{
			OwnAddrs: noAddrs,
			ConnectedSubnets: func() ([]netip.Prefix, error) {
				return []netip.Prefix{netip.MustParsePrefix("198.51.100.128/25")}, nil
			},
		}),
	}
	return newTestEnv(t, pol, cfg, dialInto(l))
}

// aimed is the address the clients aim at, the workload's choice for an
// allowed name: the proxy dials the name's addresses, never this one (were
// it to, evil.test's servers on loopback would answer, and nothing would
// leave the machine).
var aimed = evilAddr

// sendExpectReset connects through the proxy as if to dst, sends a few
// bytes and returns an error unless the proxy resets the connection (it
// may do so before the connect returns: the refusal of a connection
// decided by address needs no bytes).
func (e *testEnv) sendExpectReset(dst netip.AddrPort) error {
	e.t.Helper()
	c, err := e.tryDial(dst)
	if err != nil {
		if errors.Is(err, netErrReset) {
			return nil
		}
		return err
	}
	// The reset may come before the write: the write then reports it,
	// and the read that follows sees only the end of the stream.
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); errors.Is(err, netErrReset) {
		return nil
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, netErrReset) {
		return fmt.Errorf("read err = %v, want a reset", err)
	}
	return nil
}

// httpClose sends one request to dst through the proxy, reads the
// response and closes the connection, so that the decision is logged.
func (e *testEnv) httpClose(dst netip.AddrPort, host string) string {
	e.t.Helper()
	c := e.dial(dst)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("request for %s: %v", host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%s %s\r\n\r\n%s", resp.Proto, resp.Status, body)
}

// TestPrivateUpstreamRefused: an allowed wildcard name whose DNS points
// into the LAN is refused in the client's protocol (TLS alert, 403, reset),
// whatever the port, and nothing reaches the LAN; the decision says deny,
// private upstream, and the address.
func TestPrivateUpstreamRefused(t *testing.T) {
	l := newLAN(t, 80, 443, 6379)
	e := lanEnv(t, l, mustPolicy(t, conf.ModeAllowlist, "*.wild.test"))

	// TLS on 443.
	c := e.dial(netip.AddrPortFrom(aimed, 443))
	if _, _, err := e.tlsClient(c, "rebind.wild.test"); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("TLS to a name resolving into the LAN: err = %v, want access denied", err)
	}
	r := e.waitRecord(recordFor("rebind.wild.test", "deny"))
	wantReason := "private upstream 10.0.0.5: RFC 1918 (10.0.0.0/8); private upstream fd00::5: unique local (ULA) (fc00::/7)"
	if r["reason"] != wantReason || r["upstream"] != "10.0.0.5:443" || r["rule"] != "*.wild.test" {
		t.Errorf("record %v, want reason %q and upstream 10.0.0.5:443", r, wantReason)
	}

	// A ClientHello, then raw bytes, to the port of a LAN database.
	c = e.dial(netip.AddrPortFrom(aimed, 6379))
	c.Write(captureHello(t, "rebind6.wild.test"))
	c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	alert, _ := io.ReadAll(c)
	if string(alert) != string(tlsAccessDenied) {
		t.Errorf("hello to port 6379: got %x, want the access_denied alert", alert)
	}
	r = e.waitRecord(recordFor("rebind6.wild.test", "deny"))
	if r["reason"] != "private upstream fd00::5: unique local (ULA) (fc00::/7)" || r["upstream"] != "[fd00::5]:6379" {
		t.Errorf("record %v", r)
	}

	// Plaintext HTTP: a 403 that does not tell the private address.
	resp := e.httpClose(netip.AddrPortFrom(aimed, 80), "rebind.wild.test")
	if !strings.HasPrefix(resp, "HTTP/1.1 403") || !strings.Contains(resp, "upstream not permitted") || strings.Contains(resp, "10.0.0.5") {
		t.Errorf("HTTP to a name resolving into the LAN answered:\n%s", resp)
	}
	r = e.waitRecord(func(m map[string]any) bool { return m["name"] == "rebind.wild.test" && m["proto"] == "http" })
	if r["verdict"] != "deny" || r["reason"] != wantReason || r["upstream"] != "10.0.0.5:80" {
		t.Errorf("record %v", r)
	}

	// A connected subnet of the host: another sandbox on the bridge.
	c = e.dial(netip.AddrPortFrom(aimed, 443))
	if _, _, err := e.tlsClient(c, "neighbour.wild.test"); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("TLS to a name resolving to a neighbour: err = %v, want access denied", err)
	}
	r = e.waitRecord(recordFor("neighbour.wild.test", "deny"))
	if r["reason"] != "private upstream 198.51.100.130: connected subnet 198.51.100.128/25 of the proxy's host" || r["upstream"] != "198.51.100.130:443" {
		t.Errorf("record %v", r)
	}

	// By address (no name), admitted by 0.0.0.0/0: still refused, with a
	// reset.
	e = lanEnv(t, l, mustPolicy(t, conf.ModeAllowlist, "*.wild.test", "0.0.0.0/0", "::/0"))
	if err := e.sendExpectReset(netip.AddrPortFrom(lanAddr, 6379)); err != nil {
		t.Errorf("raw TCP to 10.0.0.5:6379: %v", err)
	}
	r = e.waitRecord(func(m map[string]any) bool { return m["dst"] == "10.0.0.5:6379" })
	if r["verdict"] != "deny" || r["reason"] != "private upstream 10.0.0.5: RFC 1918 (10.0.0.0/8)" || r["upstream"] != "10.0.0.5:6379" || r["rule"] != "0.0.0.0/0" {
		t.Errorf("record %v", r)
	}

	for port, srv := range l.servers {
		if n, b := srv.conns.Load(), srv.bytes.Load(); n != 0 || b != 0 {
			t.Errorf("LAN port %d: %d connections, %d bytes arrived", port, n, b)
		}
	}
	if n := l.dials.Load(); n != 0 {
		t.Errorf("the proxy tried %d connections into the LAN", n)
	}
}

// TestPrivateUpstreamModeOpen: mode open means the internet, not the LAN.
func TestPrivateUpstreamModeOpen(t *testing.T) {
	l := newLAN(t, 80, 6379)
	e := lanEnv(t, l, mustPolicy(t, conf.ModeOpen))
	if err := e.sendExpectReset(netip.AddrPortFrom(lanAddr6, 6379)); err != nil {
		t.Errorf("mode open, raw TCP to [fd00::5]:6379: %v", err)
	}
	r := e.waitRecord(func(m map[string]any) bool { return m["dst"] == "[fd00::5]:6379" })
	if r["verdict"] != "deny" || r["reason"] != "private upstream fd00::5: unique local (ULA) (fc00::/7)" {
		t.Errorf("record %v", r)
	}
	resp := e.httpClose(netip.AddrPortFrom(lanAddr, 80), "rebind.wild.test")
	if !strings.HasPrefix(resp, "HTTP/1.1 403") {
		t.Errorf("mode open, HTTP to 10.0.0.5:80 answered:\n%s", resp)
	}
	if n := l.dials.Load(); n != 0 {
		t.Errorf("the proxy tried %d connections into the LAN", n)
	}
}

// TestPrivateUpstreamAdmitted is the positive control: with an address
// entry inside the private ranges, the same name reaches the LAN, and the
// bytes arrive.
func TestPrivateUpstreamAdmitted(t *testing.T) {
	l := newLAN(t, 80, 6379)
	e := lanEnv(t, l, mustPolicy(t, conf.ModeAllowlist, "*.wild.test", "10.0.0.0/8", "fd00::/8"))

	resp := e.httpClose(netip.AddrPortFrom(aimed, 80), "rebind.wild.test")
	if !strings.HasPrefix(resp, "HTTP/1.1 200") || !strings.Contains(resp, "lan server 10.0.0.5:80 host rebind.wild.test") {
		t.Fatalf("admitted HTTP to the LAN answered:\n%s", resp)
	}
	r := e.waitRecord(recordFor("rebind.wild.test", "allow"))
	if r["upstream"] != "10.0.0.5:80" {
		t.Errorf("record %v", r)
	}

	hello := captureHello(t, "rebind6.wild.test")
	c := e.dial(netip.AddrPortFrom(aimed, 6379))
	c.Write(hello)
	c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	c.CloseWrite()
	r = e.waitRecord(recordFor("rebind6.wild.test", "allow"))
	if r["upstream"] != "[fd00::5]:6379" {
		t.Errorf("record %v", r)
	}
	srv := l.servers[6379]
	deadline := time.Now().Add(5 * time.Second)
	for srv.bytes.Load() < int64(len(hello)+14) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := srv.bytes.Load(); got != int64(len(hello)+14) {
		t.Errorf("LAN port 6379 got %d bytes, want the hello and PING (%d)", got, len(hello)+14)
	}
	// The name alone still does not open the neighbour's subnet.
	c = e.dial(netip.AddrPortFrom(aimed, 443))
	if _, _, err := e.tlsClient(c, "neighbour.wild.test"); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("TLS to a name resolving to a neighbour: err = %v, want access denied", err)
	}
}

// TestMixedAnswersDialThePublicOne: of a name's addresses, only those the
// guard permits are dialed.
func TestMixedAnswersDialThePublicOne(t *testing.T) {
	l := newLAN(t, 80, 6379)
	e := lanEnv(t, l, mustPolicy(t, conf.ModeAllowlist, "*.wild.test"))
	c := e.dial(netip.AddrPortFrom(aimed, e.tlsPort))
	_, line, err := e.tlsClient(c, "mixed.wild.test")
	if err != nil {
		t.Fatalf("name with a private and a public address: %v", err)
	}
	if want := fmt.Sprintf("server %s", netip.AddrPortFrom(apiAddr, e.tlsPort)); line != want {
		t.Fatalf("answered by %q, want %q", line, want)
	}
	c.Close()
	r := e.waitRecord(recordFor("mixed.wild.test", "allow"))
	if r["upstream"] != netip.AddrPortFrom(apiAddr, e.tlsPort).String() {
		t.Errorf("record %v", r)
	}
	if n := l.dials.Load(); n != 0 {
		t.Errorf("the proxy tried %d connections into the LAN", n)
	}
}

// TestPolicyChangeClosesPrivateUpstream: a connection to the LAN that an
// address entry admitted is closed when that entry goes, though its name
// is still allowed.
func TestPolicyChangeClosesPrivateUpstream(t *testing.T) {
	l := newLAN(t, 80, 6379)
	e := lanEnv(t, l, mustPolicy(t, conf.ModeAllowlist, "*.wild.test", "10.0.0.0/8"))
	c := e.dial(netip.AddrPortFrom(aimed, 80))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: mixed.wild.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "lan server 10.0.0.5:80") {
		t.Fatalf("admitted request answered %q, want the LAN server", body)
	}
	e.p.SetPolicy(mustPolicy(t, conf.ModeAllowlist, "*.wild.test"))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("connection to the LAN still open after its entry went")
	}
	r := e.waitRecord(recordFor("mixed.wild.test", "deny"))
	if r["reason"] != "policy changed: private upstream 10.0.0.5: RFC 1918 (10.0.0.0/8)" {
		t.Errorf("record %v", r)
	}
}
