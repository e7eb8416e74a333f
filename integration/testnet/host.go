package testnet

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// Ports every Host serves on each of its addresses.
const (
	PortHTTP     = 80   // HTTP/1.1 and h2c
	PortHTTPAlt  = 8080 // HTTP/1.1 and h2c
	PortHTTPS    = 443  // HTTPS, also a UDP echo (QUIC's port)
	PortHTTPSAlt = 8443 // HTTPS
	PortSSH      = 22   // recorder
	PortPostgres = 5432 // recorder
	PortRecorder = 9000 // recorder
	PortRedis    = 6379 // recorder (Redis's port: raw bytes after a TLS ClientHello)
	PortUDPEcho  = 9999 // UDP echo
)

// Response headers in which every HTTP(S) handler echoes what it saw.
const (
	HeaderHost   = "X-Testnet-Host"   // the Host of the request
	HeaderSNI    = "X-Testnet-SNI"    // the TLS server name (HTTPS only)
	HeaderRemote = "X-Testnet-Remote" // the client's address:port as the server saw it
	HeaderProto  = "X-Testnet-Proto"  // HTTP/1.1, HTTP/2.0
)

var (
	httpPorts     = []int{PortHTTP, PortHTTPAlt}
	httpsPorts    = []int{PortHTTPS, PortHTTPSAlt}
	recorderPorts = []int{PortSSH, PortPostgres, PortRecorder, PortRedis}
	udpPorts      = []int{PortHTTPS, PortUDPEcho}
)

// The inet ranges AddHost takes addresses from.
var (
	inetPrefix4 = netip.MustParsePrefix("203.0.113.0/24")
	inetPrefix6 = netip.MustParsePrefix("2001:db8:100::/64")
)

// Host is a virtual server on the fake internet: a DNS name, its addresses
// in inet, and the servers listening on them (see the package comment for
// the ports). Its counters let a test prove what reached it, and what did not.
type Host struct {
	name  string
	addrs []netip.Addr
	cert  *tls.Certificate
	net   *Net
	ns    *Netns // where its servers listen: inet, the LAN, or a namespace of the caller's

	tcp      map[int]*traffic // port → connections and bytes, all addresses
	udp      map[int]*traffic // port → datagrams and bytes, all addresses
	requests atomic.Int64

	// streamRelease ends StreamPath's responses (ReleaseStreams).
	streamRelease chan struct{}
	streamOnce    sync.Once

	mu     sync.Mutex
	byHost map[string]int // the Host of each request (lowercased, without port) → requests

	// providers records the model calls a provider's fake API got (see
	// ProviderOf).
	providers providerLog
}

// traffic counts what arrived on one port.
type traffic struct {
	count atomic.Int64 // TCP connections accepted, or UDP datagrams
	bytes atomic.Int64
}

// AddHost registers the virtual host name on the fake internet: addrs (from
// 203.0.113.0/24 or 2001:db8:100::/64, none already taken) are added to
// inet, both DNS servers answer name with them, and HTTP, HTTPS, recorder
// and UDP echo servers listen on each until the Net's test ends. Bad input
// fails the test that made the Net.
func (n *Net) AddHost(name string, addrs ...netip.Addr) *Host {
	t := n.t
	t.Helper()
	cname, err := checkHostName(name)
	if err != nil {
		t.Fatalf("testnet: AddHost: %v", err)
	}
	if inTunnelZone(cname) {
		t.Fatalf("testnet: AddHost(%q): names under %s always answer NXDOMAIN", name, TunnelZone)
	}
	if len(addrs) == 0 {
		t.Fatalf("testnet: AddHost(%q): needs at least one address", name)
	}
	if err := n.claim(cname, addrs, checkServerAddr); err != nil {
		t.Fatalf("testnet: AddHost(%q): %v", name, err)
	}
	if err := n.inet.withLinks(func(nl *netlink.Handle) error { return addLoopbackAddrs(nl, addrs) }); err != nil {
		t.Fatalf("testnet: AddHost(%q): add addresses to %s: %v", name, n.inet.Name(), err)
	}
	h := n.newHost(t, n.inet, cname, addrs)
	n.zone.add(cname, addrs...)
	return h
}

// ServeHost starts a Host's servers (the ports of the package comment) on
// addrs inside x, a namespace that already holds those addresses: a
// container's, opened with OpenNetns, so that a test can count what
// reaches it. The name is only the servers' own (their certificate and
// the bodies they answer with); DNS does not answer it. The servers stop
// at t's cleanup, which must come before x goes away.
func (n *Net) ServeHost(t testing.TB, x *Netns, name string, addrs ...netip.Addr) *Host {
	t.Helper()
	cname, err := checkHostName(name)
	if err != nil {
		t.Fatalf("testnet: ServeHost: %v", err)
	}
	if len(addrs) == 0 {
		t.Fatalf("testnet: ServeHost(%q): needs at least one address", name)
	}
	n.mu.Lock()
	_, dup := n.certs[cname]
	n.mu.Unlock()
	if dup {
		t.Fatalf("testnet: ServeHost(%q): host %s already exists", name, cname)
	}
	return n.newHost(t, x, cname, addrs)
}

// newHost issues name's certificate and starts its servers on addrs in x.
func (n *Net) newHost(t testing.TB, x *Netns, name string, addrs []netip.Addr) *Host {
	t.Helper()
	cert, err := n.ca.issue(name, addrs)
	if err != nil {
		t.Fatalf("testnet: host %q: %v", name, err)
	}
	h := &Host{
		name:          name,
		streamRelease: make(chan struct{}),
		addrs:         slices.Clone(addrs),
		cert:          cert,
		net:           n,
		ns:            x,
		tcp:           map[int]*traffic{},
		udp:           map[int]*traffic{},
		byHost:        map[string]int{},
	}
	for _, p := range slices.Concat(httpPorts, httpsPorts, recorderPorts) {
		h.tcp[p] = new(traffic)
	}
	for _, p := range udpPorts {
		h.udp[p] = new(traffic)
	}
	n.mu.Lock()
	n.certs[name] = cert
	n.mu.Unlock()
	h.serve(t)
	return h
}

// claim checks addrs with check and that nobody holds them yet, and
// records them as name's.
func (n *Net) claim(name string, addrs []netip.Addr, check func(netip.Addr) error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, dup := n.certs[name]; dup {
		return fmt.Errorf("host %s already exists", name)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range addrs {
		if err := check(a); err != nil {
			return err
		}
		if owner, taken := n.owners[a]; taken || seen[a] {
			if !taken {
				owner = name
			}
			return fmt.Errorf("address %s is already held by %s", a, owner)
		}
		seen[a] = true
	}
	for _, a := range addrs {
		n.owners[a] = name
	}
	return nil
}

// checkServerAddr accepts the addresses a Host may take in inet.
func checkServerAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("invalid (zero) address")
	case a.Zone() != "":
		return fmt.Errorf("address %s has a zone; use a plain address", a)
	case a.Is4In6():
		return fmt.Errorf("address %s is IPv4-mapped; use %s", a, a.Unmap())
	case !inetPrefix4.Contains(a) && !inetPrefix6.Contains(a):
		return fmt.Errorf("address %s is outside the fake internet's ranges %s and %s", a, inetPrefix4, inetPrefix6)
	case a == inetPrefix4.Addr() || a == netip.MustParseAddr("203.0.113.255") || a == inetPrefix6.Addr():
		return fmt.Errorf("address %s is the network or broadcast address of its range", a)
	}
	for _, d := range defaultDNSAddrs() {
		if a == d {
			return fmt.Errorf("address %s is taken by a DNS server of the Net", a)
		}
	}
	return nil
}

// serve opens every listener inside inet, then serves them until t's cleanup.
func (h *Host) serve(t testing.TB) {
	t.Helper()
	var (
		plain, secure, record []net.Listener
		packets               []udpSocket
	)
	closeAll := func() {
		for _, l := range slices.Concat(plain, secure, record) {
			l.Close()
		}
		for _, u := range packets {
			u.pc.Close()
		}
	}
	listen := func(dst *[]net.Listener, a netip.Addr, port int) error {
		l, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err != nil {
			return err
		}
		*dst = append(*dst, &countingListener{Listener: l, traffic: h.tcp[port]})
		return nil
	}
	err := h.ns.Do(func() error {
		for _, a := range h.addrs {
			for _, p := range httpPorts {
				if err := listen(&plain, a, p); err != nil {
					return err
				}
			}
			for _, p := range httpsPorts {
				if err := listen(&secure, a, p); err != nil {
					return err
				}
			}
			for _, p := range recorderPorts {
				if err := listen(&record, a, p); err != nil {
					return err
				}
			}
			for _, p := range udpPorts {
				pc, err := net.ListenPacket("udp", netip.AddrPortFrom(a, uint16(p)).String())
				if err != nil {
					return err
				}
				packets = append(packets, udpSocket{pc, h.udp[p]})
			}
		}
		return nil
	})
	if err != nil {
		closeAll()
		t.Fatalf("testnet: servers for %s in %s: %v", h.name, h.ns.Name(), err)
	}

	var wg sync.WaitGroup
	httpSrv := h.newHTTPServer()
	// Prior knowledge is the server's own; an Upgrade: h2c request goes
	// to x/net's h2c, the only implementation of RFC 7540's upgrade.
	httpSrv.Handler = h2cUpgrade(httpSrv.Handler)
	httpSrv.Protocols = new(http.Protocols)
	httpSrv.Protocols.SetHTTP1(true)
	httpSrv.Protocols.SetUnencryptedHTTP2(true)
	httpsSrv := h.newHTTPServer()
	httpsSrv.TLSConfig = &tls.Config{GetCertificate: h.certificate}
	for _, l := range plain {
		wg.Go(func() { _ = httpSrv.Serve(l) })
	}
	for _, l := range secure {
		wg.Go(func() { _ = httpsSrv.ServeTLS(l, "", "") })
	}
	rec := &recorder{conns: map[net.Conn]struct{}{}}
	for _, l := range record {
		wg.Go(func() { rec.serve(l, &wg) })
	}
	for _, u := range packets {
		wg.Go(func() { echoUDP(u.pc, u.traffic) })
	}
	t.Cleanup(func() {
		httpSrv.Close()
		httpsSrv.Close()
		closeAll()
		rec.closeConns()
		wg.Wait()
	})
}

func (h *Host) newHTTPServer() *http.Server {
	return &http.Server{
		Handler:           http.HandlerFunc(h.handleHTTP),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // denied handshakes are expected, not news
	}
}

// handleHTTP names the server that answered, and echoes what it saw.
func (h *Host) handleHTTP(w http.ResponseWriter, r *http.Request) {
	h.count(r.Host)
	if r.URL.Path == Fake101Path && r.ProtoMajor == 1 {
		h.serveFake101(w, r)
		return
	}
	if h.serveInspectPaths(w, r) {
		return
	}
	if r.TLS != nil && h.serveProvider(w, r) {
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	local := "?"
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		local = a.String()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set(HeaderHost, r.Host)
	w.Header().Set(HeaderRemote, r.RemoteAddr)
	w.Header().Set(HeaderProto, r.Proto)
	if r.TLS != nil {
		w.Header().Set(HeaderSNI, r.TLS.ServerName)
	}
	fmt.Fprintf(w, "%s %s %s %s\n", h.name, local, r.Method, r.URL.Path)
}

// certificate picks the certificate of whichever name of the Net the client
// asked for, and the host's own for an unknown or absent SNI. Every name's
// certificate is valid for the test CA, so which server answered is proved
// by the response body, not by the certificate.
func (h *Host) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	h.net.mu.Lock()
	defer h.net.mu.Unlock()
	if c, ok := h.net.certs[canonicalName(hello.ServerName)]; ok {
		return c, nil
	}
	return h.cert, nil
}

// Name is the host's DNS name, lowercased.
func (h *Host) Name() string { return h.name }

// Addrs are the host's addresses in inet.
func (h *Host) Addrs() []netip.Addr { return slices.Clone(h.addrs) }

// Received is the number of bytes the host's servers read on TCP port
// (over all its addresses and connections so far). A port the host does not
// serve fails the test.
func (h *Host) Received(port int) int { return int(h.tcpTraffic("Received", port).bytes.Load()) }

// Connections is the number of TCP connections the host accepted on port.
func (h *Host) Connections(port int) int {
	return int(h.tcpTraffic("Connections", port).count.Load())
}

// UDPReceived is the number of bytes of UDP payload that reached port.
func (h *Host) UDPReceived(port int) int { return int(h.udpTraffic("UDPReceived", port).bytes.Load()) }

// UDPDatagrams is the number of UDP datagrams that reached port.
func (h *Host) UDPDatagrams(port int) int {
	return int(h.udpTraffic("UDPDatagrams", port).count.Load())
}

// Requests is the number of HTTP requests the host answered, on any port.
func (h *Host) Requests() int { return int(h.requests.Load()) }

// RequestsFor is the number of HTTP requests whose Host (or HTTP/2
// :authority), lowercased and without its port, was name.
func (h *Host) RequestsFor(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byHost[canonicalName(name)]
}

// RequestHosts counts the host's HTTP requests by their Host (lowercased,
// without the port): the names the clients asked this server for.
func (h *Host) RequestHosts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.byHost)
}

// count records one request for the Host header value host.
func (h *Host) count(host string) {
	h.requests.Add(1)
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	h.mu.Lock()
	h.byHost[canonicalName(strings.Trim(host, "[]"))]++
	h.mu.Unlock()
}

func (h *Host) tcpTraffic(method string, port int) *traffic {
	tr, ok := h.tcp[port]
	if !ok {
		h.net.t.Fatalf("testnet: %s.%s(%d): %s serves no TCP port %d (it serves %v)",
			h.name, method, port, h.name, port, slices.Sorted(maps.Keys(h.tcp)))
	}
	return tr
}

func (h *Host) udpTraffic(method string, port int) *traffic {
	tr, ok := h.udp[port]
	if !ok {
		h.net.t.Fatalf("testnet: %s.%s(%d): %s serves no UDP port %d (it serves %v)",
			h.name, method, port, h.name, port, slices.Sorted(maps.Keys(h.udp)))
	}
	return tr
}

// countingListener counts the connections it accepts and the bytes they read.
type countingListener struct {
	net.Listener
	traffic *traffic
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.traffic.count.Add(1)
	return &countingConn{Conn: c, traffic: l.traffic}, nil
}

type countingConn struct {
	net.Conn
	traffic *traffic
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.traffic.bytes.Add(int64(n))
	return n, err
}

// recorder swallows whatever a client sends (the listener counts it) and
// never answers.
type recorder struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (r *recorder) serve(l net.Listener, wg *sync.WaitGroup) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			return
		}
		r.conns[c] = struct{}{}
		r.mu.Unlock()
		wg.Go(func() {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
			r.mu.Lock()
			delete(r.conns, c)
			r.mu.Unlock()
		})
	}
}

func (r *recorder) closeConns() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
}

// udpSocket is a UDP echo server's socket and its counters.
type udpSocket struct {
	pc      net.PacketConn
	traffic *traffic
}

// echoUDP sends every datagram back to its sender.
func echoUDP(pc net.PacketConn, tr *traffic) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		tr.count.Add(1)
		tr.bytes.Add(int64(n))
		_, _ = pc.WriteTo(buf[:n], from)
	}
}
