package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
)

// The unit tests run the proxy in-process on loopback. Loopback addresses
// stand in for the internet: 127.0.0.2 serves api.test, 127.0.0.3 serves
// evil.test (the spoofing target); 127.0.0.1 stays forbidden. There is no
// REDIRECT here (integration/ has that), so each client dials from its own
// source address and the test tells the proxy which original destination
// that client "meant".

var (
	apiAddr  = netip.MustParseAddr("127.0.0.2")
	evilAddr = netip.MustParseAddr("127.0.0.3")
)

// noAddrs and noSubnets stand for a host with no address and no connected
// subnet: the unit tests' servers are on loopback, and the root
// namespace's own routes must not change what they see.
func noAddrs() ([]netip.Addr, error)     { return nil, nil }
func noSubnets() ([]netip.Prefix, error) { return nil, nil }

type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// syncBuffer collects decision lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

type testEnv struct {
	t       *testing.T
	p       *Proxy
	ln      net.Listener
	logs    *syncBuffer
	dsts    sync.Map // client source addr → netip.AddrPort
	nextSrc atomic.Uint32
	ca      *x509.CertPool
	certs   *testCerts
	tlsPort uint16 // port of the TLS servers on apiAddr and evilAddr
	// received counts bytes each raw recorder got, by "addr:port".
	received sync.Map
}

// newTestEnv starts a proxy with policy pol and cfg; setup functions run
// on it before it serves.
func newTestEnv(t *testing.T, pol *conf.Policy, cfg Config, setup ...func(*Proxy)) *testEnv {
	t.Helper()
	e := &testEnv{t: t, logs: &syncBuffer{}, certs: newTestCerts(t)}
	e.ca = e.certs.pool
	cfg.Sandbox = "sb-test"
	cfg.Policy = pol
	cfg.Logger = slog.New(slog.NewJSONHandler(e.logs, nil))
	if cfg.Resolver == nil {
		cfg.Resolver = mapResolver{
			"api.test":     {apiAddr},
			"x.wild.test":  {apiAddr},
			"evil.test":    {evilAddr},
			"lo.test":      {netip.MustParseAddr("127.0.0.1")},
			"nowhere.test": {netip.MustParseAddr("127.0.0.9")},
		}
	}
	cfg.OriginalDst = func(c *net.TCPConn) (netip.AddrPort, error) {
		v, ok := e.dsts.Load(c.RemoteAddr().String())
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("test: no destination for %v", c.RemoteAddr())
		}
		return v.(netip.AddrPort), nil
	}
	if cfg.Guard == nil {
		cfg.Guard = guard.New(guard.Config{OwnAddrs: noAddrs, ConnectedSubnets: noSubnets})
	}
	e.p = New(cfg)
	// The same stand-in for connections the relay loop accepts.
	e.p.origDstFD = func(_ int, client netip.AddrPort, _ uint16) (netip.AddrPort, error) {
		v, ok := e.dsts.Load(client.String())
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("test: no destination for %v", client)
		}
		return v.(netip.AddrPort), nil
	}
	e.p.permitUpstream = func(a netip.Addr) bool { return a == apiAddr || a == evilAddr || a == netip.MustParseAddr("127.0.0.9") }
	// Nothing a test proxy dials may leave the machine, whatever the
	// guard says.
	e.p.dial = func(ctx context.Context, to netip.AddrPort) (net.Conn, error) {
		if !to.Addr().Unmap().IsLoopback() {
			return nil, fmt.Errorf("test: the proxy dials only loopback here, not %v", to)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", to.String())
	}
	e.p.dialGuard = func(to netip.AddrPort) error {
		if !to.Addr().Unmap().IsLoopback() {
			return fmt.Errorf("test: the proxy dials only loopback here, not %v", to)
		}
		return nil
	}
	for _, f := range setup {
		f(e.p)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.ln = ln
	go e.p.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e.p.Shutdown(ctx)
	})
	e.tlsPort = e.startTLSServers()
	return e
}

// dial connects to the proxy as if the client had addressed dst.
func (e *testEnv) dial(dst netip.AddrPort) *net.TCPConn {
	e.t.Helper()
	c, err := e.tryDial(dst)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// tryDial is dial returning the connect error.
func (e *testEnv) tryDial(dst netip.AddrPort) (*net.TCPConn, error) {
	e.t.Helper()
	n := e.nextSrc.Add(1)
	src := netip.AddrFrom4([4]byte{127, 10, byte(n >> 8), byte(n)})
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	// Register before connecting: the proxy asks as soon as it accepts.
	// The source port is unknown until the dial, so key by a listener
	// on the source address that reserves a port first.
	pl, err := net.Listen("tcp", netip.AddrPortFrom(src, 0).String())
	if err != nil {
		e.t.Fatal(err)
	}
	srcAP := netip.MustParseAddrPort(pl.Addr().String())
	pl.Close()
	d.LocalAddr = net.TCPAddrFromAddrPort(srcAP)
	e.dsts.Store(srcAP.String(), dst)
	c, err := d.Dial("tcp", e.ln.Addr().String())
	if err != nil {
		return nil, err
	}
	e.t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn), nil
}

// waitRecord waits for a decision line that pred accepts.
func (e *testEnv) waitRecord(pred func(map[string]any) bool) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range e.logs.lines() {
			if l["msg"] == "connection" && pred(l) {
				return l
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no matching decision line; have:\n%s", e.logs.b.String())
	return nil
}

func recordFor(name, verdict string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["name"] == name && m["verdict"] == verdict }
}

// startTLSServers serves TLS on apiAddr and evilAddr at one port. Each
// connection gets a first line naming the server that answered, then its
// bytes are echoed until EOF.
func (e *testEnv) startTLSServers() uint16 {
	e.t.Helper()
	first, err := net.Listen("tcp", netip.AddrPortFrom(apiAddr, 0).String())
	if err != nil {
		e.t.Fatal(err)
	}
	port := netip.MustParseAddrPort(first.Addr().String()).Port()
	second, err := net.Listen("tcp", netip.AddrPortFrom(evilAddr, port).String())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ln := range []net.Listener{first, second} {
		e.t.Cleanup(func() { ln.Close() })
		tln := tls.NewListener(ln, &tls.Config{GetCertificate: e.certs.get})
		go func() {
			for {
				c, err := tln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					fmt.Fprintf(c, "server %s\n", c.LocalAddr())
					io.Copy(c, c)
				}()
			}
		}()
	}
	return port
}

// startRecorder accepts raw TCP on addr and counts what arrives.
func (e *testEnv) startRecorder(addr netip.AddrPort) netip.AddrPort {
	e.t.Helper()
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { ln.Close() })
	ap := netip.MustParseAddrPort(ln.Addr().String())
	counter := new(atomic.Int64)
	e.received.Store(ap.String(), counter)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(c, c) // echo
				counter.Add(n)
			}()
		}
	}()
	return ap
}

func (e *testEnv) receivedAt(ap netip.AddrPort) int64 {
	v, ok := e.received.Load(ap.String())
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// startHTTP serves HTTP on addr:port; each response names the server address and the Host it saw.
func (e *testEnv) startHTTP(addr netip.Addr, port uint16) netip.AddrPort {
	e.t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, port).String())
	if err != nil {
		e.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "server %s host %s path %s body %d\n", ln.Addr(), r.Host, r.URL.Path, len(body))
	})}
	go srv.Serve(ln)
	e.t.Cleanup(func() { srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// testCerts is a throwaway CA with leaf certificates made on demand.
type testCerts struct {
	t      *testing.T
	pool   *x509.CertPool
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func newTestCerts(t *testing.T) *testCerts {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "doorman test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testCerts{t: t, pool: pool, caCert: ca, caKey: key, leaves: map[string]*tls.Certificate{}}
}

func (c *testCerts) get(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := hello.ServerName
	if name == "" {
		name = "default.test"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[name]; ok {
		return l, nil
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.caCert, &key.PublicKey, c.caKey)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	c.leaves[name] = l
	return l, nil
}

func mustPolicy(t *testing.T, mode conf.Mode, entries ...string) *conf.Policy {
	t.Helper()
	p, err := conf.NewPolicy(mode, entries)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsClient runs a TLS handshake for name over c and reads the server's first line.
func (e *testEnv) tlsClient(c net.Conn, name string) (*tls.Conn, string, error) {
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: e.ca})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(io.LimitReader(tc, 200)).ReadString('\n')
	tc.SetDeadline(time.Time{})
	return tc, strings.TrimSpace(line), err
}
