package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// The relay benchmarks' host on the fake internet: testnet's usual servers
// plus two of the benchmark's own (see benchServer), and the ports of the
// bare relay in the host namespace.
const (
	benchName        = "bench.example.test"
	benchRawPort     = 7000 // ClientHello, then raw bytes
	benchTLSPort     = 7443 // real TLS, then a request and its answer (see serveTLS)
	bareRelayRawPort = 7100 // relays to benchRawPort
	bareRelayTLSPort = 7543 // relays to benchTLSPort
	// The sockmap relay's (bench_sockmap_test.go).
	sockmapRelayRawPort = 7200 // relays to benchRawPort
	sockmapRelayTLSPort = 7643 // relays to benchTLSPort
	// benchSettleTime is how long the relays run idle before their
	// fresh memory is read: the proxy unmaps the binary pages its start
	// touched a second after it started.
	benchSettleTime = 1500 * time.Millisecond
)

// benchAddr is benchName's address, benchDeniedAddr benchDeniedName's.
var benchAddr, benchDeniedAddr = netip.MustParseAddr("203.0.113.80"), netip.MustParseAddr("203.0.113.81")

// relayBed is the world of the relay benchmarks: a fake internet holding
// benchName, sandboxes routed to it the same way, and up to five paths from
// a client in a sandbox to the server:
//
//   - direct: from the sandbox that is left alone, straight to the server;
//   - bare relay: from the same sandbox to a minimal splicing relay in the
//     host namespace (runBareRelay), which dials the server: the floor for
//     any user-space TCP relay;
//   - sockmap relay: the same with the bytes relayed inside the kernel
//     (runSockmapRelay), where the kernel and the process's capabilities
//     allow its BPF;
//   - doorman: from the sandbox enforced by sandbox.Enforce with the real
//     doorman binary, through its nftables redirect and proxy;
//   - haproxy and squid: from a sandbox of each, through the peer
//     configured as an SNI allowlist (see bench_peers_test.go); a peer that
//     is not installed has no path.
type relayBed struct {
	net     *testnet.Net
	server  *benchServer
	paths   []*benchPath // direct, bare relay, sockmap relay (if it runs), doorman, then the peers
	direct  *benchPath
	relay   *benchPath
	sockmap *benchPath // nil if the kernel or the capabilities refuse its BPF
	// sockmapWhy is why the sockmap relay does not run, if it does not.
	sockmapWhy string
	doorman    *benchPath
	bases      []*benchPath   // the doormans of DOORMAN_BENCH_BASELINE, in its order
	haproxy    *benchPath     // nil if HAProxy is not installed
	squid      *benchPath     // nil if Squid is not installed
	state      *sandbox.State // the enforced sandbox: its proxy's pid
	hello      []byte         // a real ClientHello from crypto/tls, SNI benchName
	denied     []byte         // the same for benchDeniedName, which no path allows
	tlsConf    *tls.Config    // trusts the TLS server's certificate; no session cache: every handshake is a full one
	// noFile is the hard descriptor limit of this process, which the
	// bare relay, the proxy and the peers inherit (see benchRaiseNoFile).
	noFile uint64
	// doormanCap is the doorman proxy's connection cap as its limits
	// line gives it (the configured one, or less if its descriptor or
	// memory limit lowers it), and doormanCapBy what lowered it, if
	// anything.
	doormanCap   int
	doormanCapBy string
}

// benchDeniedName is a name no relaying path allows: checkPaths proves
// each refuses it.
const benchDeniedName = "denied.example.test"

// peers are the peer paths that run.
func (bed *relayBed) peers() []*benchPath {
	var out []*benchPath
	for _, p := range []*benchPath{bed.haproxy, bed.squid} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// benchPath is one way from a client to the server.
type benchPath struct {
	name     string
	side     *benchSide     // where the client runs
	raw, tls netip.AddrPort // what the client dials
	pid      int            // the relaying process, 0 for none
	logs     []string       // its log files, shown when a check fails
	freshRSS int64          // its VmRSS benchSettleTime after it started
	// freshAnon is the anonymous part of freshRSS (heap, stacks): the
	// rest maps the binary, whose pages all processes running it share.
	freshAnon int64
	// proxyCap is a doorman proxy's connection cap as it runs with it,
	// and proxyCapBy what lowered it, if anything.
	proxyCap   int
	proxyCapBy string
}

// benchSide is a sandbox and a handle to move threads into it.
type benchSide struct {
	sb *testnet.Sandbox
	ns ns.NetNS
}

// newRelayBed builds the bed, starts the bare relay and enforces the
// doorman sandbox, and proves each path goes where it should. Everything is
// torn down by b's cleanup.
func newRelayBed(b *testing.B) *relayBed {
	b.Helper()
	noFile := benchRaiseNoFile(b, benchWantNoFile)
	n := testnet.New(b)
	n.AddHost(benchName, benchAddr)
	// The denied name resolves to an address the server listens on too,
	// so that a relay that wrongly let it through would reach the server
	// (see checkPaths), rather than fail to resolve it.
	n.AddHost(benchDeniedName, benchDeniedAddr)
	raw, tlsAddr := netip.AddrPortFrom(benchAddr, benchRawPort), netip.AddrPortFrom(benchAddr, benchTLSPort)
	plain, enforced := newBenchSide(b, n.NewSandbox(b)), newBenchSide(b, n.NewSandbox(b))
	gw := plain.sb.Gateway4
	bed := &relayBed{
		net:    n,
		direct: &benchPath{name: "direct", side: plain, raw: raw, tls: tlsAddr},
		relay: &benchPath{name: "bare relay", side: plain,
			raw: netip.AddrPortFrom(gw, bareRelayRawPort), tls: netip.AddrPortFrom(gw, bareRelayTLSPort)},
		doorman: &benchPath{name: "doorman", side: enforced, raw: raw, tls: tlsAddr},
		noFile:  noFile,
	}
	bed.paths = []*benchPath{bed.direct, bed.relay, bed.doorman}

	cert, pool, err := benchSelfSignedCert(benchName)
	if err != nil {
		b.Fatal(err)
	}
	bed.tlsConf = &tls.Config{ServerName: benchName, RootCAs: pool}
	if bed.hello, err = benchClientHello(benchName); err != nil {
		b.Fatal(err)
	}
	if bed.denied, err = benchClientHello(benchDeniedName); err != nil {
		b.Fatal(err)
	}
	bed.server = startBenchServer(b, n.InetNS(), []netip.Addr{benchAddr, benchDeniedAddr}, cert)

	bed.relay.pid = startBareRelay(b, n.HostNS(), fmt.Sprintf("0.0.0.0:%d>%s,0.0.0.0:%d>%s",
		bareRelayRawPort, raw, bareRelayTLSPort, tlsAddr))
	pid, why := startSockmapRelay(b, n.HostNS(), fmt.Sprintf("0.0.0.0:%d>%s,0.0.0.0:%d>%s",
		sockmapRelayRawPort, raw, sockmapRelayTLSPort, tlsAddr))
	if pid != 0 {
		bed.sockmap = &benchPath{name: "sockmap relay", side: plain, pid: pid,
			raw: netip.AddrPortFrom(gw, sockmapRelayRawPort), tls: netip.AddrPortFrom(gw, sockmapRelayTLSPort)}
		bed.paths = []*benchPath{bed.direct, bed.relay, bed.sockmap, bed.doorman}
	} else {
		bed.sockmapWhy = why
	}

	var capErr error
	bed.state, bed.doormanCap, bed.doormanCapBy, capErr = bed.enforceDoorman(b, bed.doorman, doormanBin())
	if capErr != nil {
		b.Fatalf("doorman's proxy: %v", capErr)
	}
	for _, base := range benchBaselineBinaries(b) {
		p := &benchPath{name: "doorman@" + base.rev, side: newBenchSide(b, n.NewSandbox(b)), raw: raw, tls: tlsAddr}
		if _, _, _, err := bed.enforceDoorman(b, p, base.bin); err != nil {
			b.Fatalf("doorman@%s's proxy: %v", base.rev, err)
		}
		bed.bases = append(bed.bases, p)
		bed.paths = append(bed.paths, p)
	}

	// The peers, each with a sandbox of its own.
	sb := n.NewSandbox(b)
	if pid, logs := startHAProxy(b, n, sb, haproxyMaxConn(noFile)); pid != 0 {
		bed.haproxy = &benchPath{name: "haproxy", side: newBenchSide(b, sb), raw: raw, tls: tlsAddr, pid: pid, logs: logs}
		bed.paths = append(bed.paths, bed.haproxy)
	}
	sb = n.NewSandbox(b)
	if pid, logs := startSquid(b, n, sb); pid != 0 {
		bed.squid = &benchPath{name: "squid", side: newBenchSide(b, sb), raw: raw, tls: tlsAddr, pid: pid, logs: logs}
		bed.paths = append(bed.paths, bed.squid)
	}

	time.Sleep(benchSettleTime) // let the new processes settle
	for _, p := range bed.paths[1:] {
		v, err := benchProcStatus(p.pid, "VmRSS", "RssAnon")
		if err != nil {
			b.Fatalf("%s memory: %v", p.name, err)
		}
		p.freshRSS, p.freshAnon = v[0], v[1]
	}
	bed.checkPaths(b)
	return bed
}

// enforceDoorman enforces p's sandbox exactly as the CNI plugin would,
// from the host namespace (the proxy runs and dials from there), with the
// proxy of binary and its caps raised so that it may hold benchHeldConns
// connections to the one server (see benchDoormanLimits). It sets p's pid
// and logs, and returns the sandbox's state and the connection cap the
// proxy runs with and what lowered it. Teardown is b's cleanup.
func (bed *relayBed) enforceDoorman(b *testing.B, p *benchPath, binary string) (*sandbox.State, int, string, error) {
	b.Helper()
	n := bed.net
	pol, err := conf.NewPolicy(conf.ModeAllowlist, []string{benchName})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	req := sandbox.Request{
		Attachment: sandbox.Attachment{Key: p.side.sb.Name(), Runtime: "cni", NetNS: p.side.sb.Path(), Label: "full"},
		Spec: spec.Spec{
			Policy:            pol,
			Resolvers:         []netip.Addr{n.DNS},
			AllowICMP:         true,
			LogDir:            filepath.Join(dir, "log"),
			UpstreamResolvers: []netip.AddrPort{netip.AddrPortFrom(n.DNS, 53)},
			ProxyLimits:       cgroup.Limits{Memory: benchDoormanMemory},
			Proxy:             spec.Proxy{Limits: benchDoormanLimits},
		},
		StateDir: filepath.Join(dir, "state"), ProxyBinary: binary,
	}
	var st *sandbox.State
	err = n.InHost(func() error {
		var err error
		st, err = sandbox.Enforce(req)
		return err
	})
	if err != nil {
		b.Fatalf("enforce the %s sandbox: %v", p.name, err)
	}
	b.Cleanup(func() {
		if err := n.InHost(func() error { return sandbox.Teardown(req.StateDir, req.Key) }); err != nil {
			b.Errorf("teardown: %v", err)
		}
	})
	p.pid = st.PID
	decisions := filepath.Join(dir, "log", req.Key+".log")
	p.logs = []string{decisions, decisions + ".stderr"}
	capN, capBy, err := benchProxyCap(decisions)
	p.proxyCap, p.proxyCapBy = capN, capBy
	return st, capN, capBy, err
}

// doormans are the doorman paths: the tree's, and the baselines' if they
// run.
func (bed *relayBed) doormans() []*benchPath {
	return append([]*benchPath{bed.doorman}, bed.bases...)
}

// newBenchSide opens a handle to sb's namespace for benchSide.parallel.
func newBenchSide(b *testing.B, sb *testnet.Sandbox) *benchSide {
	b.Helper()
	h, err := ns.GetNS(sb.Path())
	if err != nil {
		b.Fatalf("open %s: %v", sb.Path(), err)
	}
	b.Cleanup(func() { h.Close() })
	return &benchSide{sb: sb, ns: h}
}

// checkPaths proves that each path is the one it is named for: the server
// sees direct clients by their own address, and relayed ones arriving from
// the host namespace, where the relays, the proxy and the peers dial; and
// doorman and each peer refuse a ClientHello for a name they do not allow
// (the server never sees it).
func (bed *relayBed) checkPaths(b *testing.B) {
	b.Helper()
	for _, p := range bed.paths {
		want := bed.net.HostAddr4
		if p == bed.direct {
			want = p.side.sb.Addr4
		}
		seen, err := bed.askPeerAddr(p, bed.hello)
		if err != nil {
			b.Fatalf("%s path: %v", p.name, err)
		}
		if ap, err := netip.ParseAddrPort(seen); err != nil || ap.Addr().Unmap() != want {
			b.Fatalf("%s path: the server saw the client as %q, want %s%s", p.name, seen, want, p.logTails())
		}
	}
	// The same over real TLS, to the TLS server: every path completes
	// a full TLS 1.3 handshake with the post-quantum key exchange (what
	// the TLS rows claim to measure) and arrives where it should.
	for _, p := range bed.paths {
		want := bed.net.HostAddr4
		if p == bed.direct {
			want = p.side.sb.Addr4
		}
		seen, st, err := bed.askTLSPeerAddr(p, bed.tlsConf)
		if err != nil {
			b.Fatalf("%s path, TLS: %v%s", p.name, err, p.logTails())
		}
		if st.Version != tls.VersionTLS13 || st.DidResume || st.CurveID != tls.X25519MLKEM768 {
			b.Fatalf("%s path, TLS: version %#x, resumed %v, key exchange %v; want a full TLS 1.3 handshake with %v",
				p.name, st.Version, st.DidResume, st.CurveID, tls.X25519MLKEM768)
		}
		if ap, err := netip.ParseAddrPort(seen); err != nil || ap.Addr().Unmap() != want {
			b.Fatalf("%s path, TLS: the server saw the client as %q, want %s%s", p.name, seen, want, p.logTails())
		}
	}
	for _, p := range append(bed.doormans(), bed.peers()...) {
		seen, _ := bed.askPeerAddr(p, bed.denied) // refused: a reset, a TLS alert, or EOF
		if _, err := netip.ParseAddrPort(seen); err == nil {
			b.Fatalf("%s path: a ClientHello for %s reached the server (it saw %q); want it refused%s", p.name, benchDeniedName, seen, p.logTails())
		}
		// Over TLS too. The client skips verification, so that only the
		// relay can stop the handshake (the server's certificate is not
		// for that name).
		seen, _, _ = bed.askTLSPeerAddr(p, &tls.Config{ServerName: benchDeniedName, InsecureSkipVerify: true})
		if _, err := netip.ParseAddrPort(seen); err == nil {
			b.Fatalf("%s path: a TLS handshake for %s reached the server (it saw %q); want it refused%s", p.name, benchDeniedName, seen, p.logTails())
		}
	}
}

// askTLSPeerAddr makes a TLS connection over p with conf, sends a
// benchModePeer request and returns the answer (the client's address as
// the TLS server saw it) and the connection's state.
func (bed *relayBed) askTLSPeerAddr(p *benchPath, conf *tls.Config) (string, tls.ConnectionState, error) {
	var seen string
	var st tls.ConnectionState
	err := p.side.parallel(1, func(int) error {
		c, err := benchDial(p.tls)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Client(c, conf)
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		st = tc.ConnectionState()
		if _, err := tc.Write(benchTLSRequest(0, benchModePeer)); err != nil {
			return err
		}
		out, err := io.ReadAll(tc)
		seen = string(out)
		return err
	})
	return seen, st, err
}

// logTails is the end of each of p's log files, for an error message.
func (p *benchPath) logTails() string {
	var sb strings.Builder
	for _, f := range p.logs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > 4096 {
			data = data[len(data)-4096:]
		}
		fmt.Fprintf(&sb, "\n%s:\n%s", f, data)
	}
	return sb.String()
}

// askPeerAddr sends hello and a benchModePeer request over p and returns
// everything it gets back: from the raw server, the client's address as
// the server saw it.
func (bed *relayBed) askPeerAddr(p *benchPath, hello []byte) (string, error) {
	var seen string
	err := p.side.parallel(1, func(int) error {
		c, err := benchDial(p.raw)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		req := benchRequest(hello, 0, benchModePeer)
		if _, err := c.Write(req); err != nil {
			return err
		}
		out, err := io.ReadAll(c)
		seen = string(out)
		return err
	})
	return seen, err
}

// parallel runs fn(0..n-1) on n goroutines whose threads are moved into
// the side's namespace, and waits for them. The threads are never
// unlocked: each dies with its goroutine, so no other goroutine ever runs in
// the sandbox's namespace by accident. Sockets fn creates belong to the
// namespace; any goroutine may use them.
func (s *benchSide) parallel(n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			runtime.LockOSThread()
			if err := s.ns.Set(); err != nil {
				errs[i] = fmt.Errorf("enter %s: %w", s.sb.Name(), err)
				return
			}
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// benchDial connects to a literal address, so the socket is created on the
// calling thread (see benchSide.parallel).
func benchDial(a netip.AddrPort) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", a.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// Modes of the servers, the last byte of a request.
const (
	benchModeClose = 'c' // send count bytes, then FIN (after a close_notify on TLS), then wait for the client's FIN
	benchModeHold  = 'h' // send count bytes, then wait for the client's FIN, or close first on benchServer.releaseHeld
	benchModePeer  = 'p' // send the client's address as the server saw it, then FIN
)

// benchForever is a count the server never reaches.
const benchForever = 1 << 62

// request is what a raw client sends: the ClientHello, then one TLS
// application-data record holding the count of bytes it wants back (8
// bytes, big-endian) and the mode. (Squid, peeking, insists that all the
// client sent so far parses as TLS records; the relays do not look past
// the hello.)
func (bed *relayBed) request(count uint64, mode byte) []byte {
	return benchRequest(bed.hello, count, mode)
}

// benchRequestLen is the size of the record request appends to the hello.
const benchRequestLen = 5 + 9

func benchRequest(hello []byte, count uint64, mode byte) []byte {
	out := append(bytes.Clone(hello), 23, 3, 3, 0, 9) // application_data, TLS 1.2, 9 bytes
	return append(out, benchTLSRequest(count, mode)...)
}

// benchTLSRequest is what a TLS client sends after its handshake, the
// TLS server's request: the same 9 bytes as the raw request's record
// holds, the count of bytes it wants back (big-endian) and the mode.
func benchTLSRequest(count uint64, mode byte) []byte {
	return append(binary.BigEndian.AppendUint64(nil, count), mode)
}

// benchClientHello records the first flight of a real crypto/tls client
// (default settings: ~1.5 KB with the post-quantum key share, so it spans
// two segments) asking for serverName.
func benchClientHello(serverName string) ([]byte, error) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go tls.Client(client, &tls.Config{ServerName: serverName}).Handshake()
	server.SetDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(server, hdr); err != nil {
		return nil, fmt.Errorf("capture ClientHello: %w", err)
	}
	if hdr[0] != 22 { // handshake record
		return nil, fmt.Errorf("capture ClientHello: record type %d, want 22", hdr[0])
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:5]))
	if _, err := io.ReadFull(server, body); err != nil {
		return nil, fmt.Errorf("capture ClientHello: %w", err)
	}
	if body[0] != 1 {
		return nil, fmt.Errorf("capture ClientHello: handshake type %d, want 1", body[0])
	}
	return append(hdr, body...), nil
}

// benchSelfSignedCert makes a throwaway certificate for name and a pool that
// trusts it.
func benchSelfSignedCert(name string) (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

// benchPayloadSize is the size of the file the raw server streams with
// sendfile(2), over and over.
const benchPayloadSize = 8 << 20

// benchServer is the far end of the relay benchmarks, in inet. Its raw
// port reads a TLS ClientHello record and a request (see request), then
// streams bytes by sendfile(2) from a file in the page cache: the proxy
// sniffs a real SNI and then relays raw bytes, so the comparison shows the
// relay's own cost, not TLS's. Its TLS port is a real TLS server that
// reads a request after the handshake (benchTLSRequest) and answers as
// the raw port does: a stream for the bulk rows, a small answer and a
// close for the TLS connection rows.
type benchServer struct {
	payload string // path of the streamed file
	small   []byte // the first bytes of it, for short answers
	cert    tls.Certificate

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	// release is closed by releaseHeld: the connections holding in
	// benchModeHold then close first.
	release chan struct{}
	wg      sync.WaitGroup
}

// startBenchServer starts the servers on benchRawPort and benchTLSPort of
// each of addrs inside inet, until the benchmark ends.
func startBenchServer(b *testing.B, inet *testnet.Netns, addrs []netip.Addr, cert tls.Certificate) *benchServer {
	b.Helper()
	s := &benchServer{payload: filepath.Join(b.TempDir(), "payload"), cert: cert, conns: map[net.Conn]struct{}{},
		release: make(chan struct{})}
	data := make([]byte, benchPayloadSize)
	rand.Read(data)
	if err := os.WriteFile(s.payload, data, 0o600); err != nil {
		b.Fatal(err)
	}
	s.small = data[:64<<10]
	var rawLns, tlsLns []net.Listener
	err := inet.Do(func() error {
		for _, a := range addrs {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, benchRawPort).String())
			if err != nil {
				return err
			}
			rawLns = append(rawLns, ln)
			if ln, err = net.Listen("tcp", netip.AddrPortFrom(a, benchTLSPort).String()); err != nil {
				return err
			}
			tlsLns = append(tlsLns, ln)
		}
		return nil
	})
	closeAll := func() {
		for _, ln := range append(rawLns, tlsLns...) {
			ln.Close()
		}
	}
	if err != nil {
		closeAll()
		b.Fatalf("bench server in %s: %v", inet.Name(), err)
	}
	for _, ln := range rawLns {
		s.wg.Go(func() { s.accept(ln, s.serveRaw) })
	}
	for _, ln := range tlsLns {
		s.wg.Go(func() { s.accept(ln, s.serveTLS) })
	}
	b.Cleanup(func() {
		closeAll()
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// accept serves ln's connections until ln is closed. A serve error just
// ends its connection: clients going away mid-stream is how bulk rounds end.
func (s *benchServer) accept(ln net.Listener, serve func(*net.TCPConn) error) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of fds and the like
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			serve(c.(*net.TCPConn))
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		})
	}
}

// serveRaw reads a ClientHello record and a request (see request) and
// answers as its mode says.
func (s *benchServer) serveRaw(c *net.TCPConn) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return err
	}
	if hdr[0] != 22 {
		return fmt.Errorf("not a TLS handshake record")
	}
	rest := make([]byte, int(binary.BigEndian.Uint16(hdr[3:5]))+benchRequestLen)
	if _, err := io.ReadFull(c, rest); err != nil {
		return err
	}
	c.SetReadDeadline(time.Time{})
	req := rest[len(rest)-9:]
	if rest[len(rest)-benchRequestLen] != 23 {
		return fmt.Errorf("no application-data record after the hello")
	}
	count, mode := binary.BigEndian.Uint64(req), req[8]
	switch mode {
	case benchModePeer:
		_, err := io.WriteString(c, c.RemoteAddr().String())
		return err
	case benchModeClose:
		if err := s.stream(c, count); err != nil {
			return err
		}
		c.CloseWrite()
		_, err := io.Copy(io.Discard, c)
		return err
	case benchModeHold:
		if err := s.stream(c, count); err != nil {
			return err
		}
		return s.hold(c, c.CloseWrite)
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
}

// hold keeps a connection that got its answer open until the client
// closes it (whatever it sends is dropped) or releaseHeld asks the server
// to close first: closeWrite then ends the server's side, and hold waits
// for the client's FIN. Closing first leaves TIME_WAIT here, on the
// server's port, rather than on ephemeral ports of the relays and
// clients, so that thousands of held connections can be opened again
// within a minute.
func (s *benchServer) hold(r io.Reader, closeWrite func() error) error {
	s.mu.Lock()
	release := s.release
	s.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-release:
		if err := closeWrite(); err != nil {
			return err
		}
		return <-done
	}
}

// releaseHeld makes every connection holding in benchModeHold close
// first (see hold). Connections that start holding afterwards wait for
// the next call.
func (s *benchServer) releaseHeld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.release)
	s.release = make(chan struct{})
}

// stream sends count bytes: short answers from memory, long ones by
// sendfile(2) (TCPConn.ReadFrom of a limited *os.File).
func (s *benchServer) stream(c *net.TCPConn, count uint64) error {
	if count <= uint64(len(s.small)) {
		_, err := c.Write(s.small[:count])
		return err
	}
	f, err := os.Open(s.payload)
	if err != nil {
		return err
	}
	defer f.Close()
	for count > 0 {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		n, err := c.ReadFrom(io.LimitReader(f, int64(min(count, benchPayloadSize))))
		count -= uint64(n)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
	}
	return nil
}

// serveTLS completes a TLS handshake, reads the client's request (its
// first application data, benchTLSRequest) and answers as its mode says:
// count bytes of application data (an endless stream for benchForever),
// then in benchModeClose a close_notify and a FIN, or the client's
// address in benchModePeer.
func (s *benchServer) serveTLS(c *net.TCPConn) error {
	tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{s.cert}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		return err
	}
	req := make([]byte, 9)
	if _, err := io.ReadFull(tc, req); err != nil {
		return fmt.Errorf("TLS request: %w", err)
	}
	tc.SetDeadline(time.Time{})
	count, mode := binary.BigEndian.Uint64(req), req[8]
	if mode == benchModePeer {
		if _, err := io.WriteString(tc, c.RemoteAddr().String()); err != nil {
			return err
		}
		return tc.Close()
	}
	if mode != benchModeClose && mode != benchModeHold {
		return fmt.Errorf("unknown mode %q", mode)
	}
	for count > 0 {
		n := min(count, uint64(len(s.small)))
		if _, err := tc.Write(s.small[:n]); err != nil {
			return err // the client went away
		}
		count -= n
	}
	closeWrite := func() error {
		if err := tc.CloseWrite(); err != nil { // close_notify
			return err
		}
		return c.CloseWrite()
	}
	if mode == benchModeHold {
		return s.hold(tc, closeWrite)
	}
	if err := closeWrite(); err != nil {
		return err
	}
	io.Copy(io.Discard, tc) // until the client's close_notify or FIN
	return nil
}

// benchWantNoFile is the descriptor limit the relay benchmarks ask for:
// enough for benchHeldConns relayed connections in one relay (two sockets
// each, more with splice pipes) and, in this process, their clients and
// the server's ends.
const benchWantNoFile = 1 << 16

// benchRaiseNoFile raises this process's hard and soft RLIMIT_NOFILE to
// want, before the relays start, so that they inherit it (the doorman
// proxy raises its soft limit to the hard one; HAProxy sets its own from
// its maxconn), and restores the old limits at the end. Raising a hard
// limit needs CAP_SYS_RESOURCE: without it the limit stays as it is (a
// log line says so) and the held-connection rows hold what fits. It
// returns the hard limit in force.
func benchRaiseNoFile(b *testing.B, want uint64) uint64 {
	b.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		b.Fatalf("RLIMIT_NOFILE: %v", err)
	}
	if old.Max >= want {
		return old.Max
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}); err != nil {
		b.Logf("cannot raise RLIMIT_NOFILE from %d to %d (%v; raising a hard limit needs CAP_SYS_RESOURCE): "+
			"each relay and this process keep %d descriptors, and the held-connection rows hold what fits", old.Max, want, err, old.Max)
		return old.Max
	}
	b.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	return want
}

// benchDoormanLimits are the caps of the benchmark's doorman sandbox,
// raised from the defaults (2048 connections; a share of the ephemeral
// ports per upstream, 3529 here) so that one sandbox may hold
// benchHeldConns connections to the one server. The proxy still lowers
// the connection cap to what its descriptor limit allows (benchProxyCap).
var benchDoormanLimits = spec.Limits{Connections: 2 * benchHeldConns, PerUpstream: 2 * benchHeldConns}

// benchDoormanMemory is the memory limit of the doorman proxy's cgroup,
// raised from the default 256 MiB (which counts socket buffers too) so
// that benchHeldConns connections never meet it.
const benchDoormanMemory = 1 << 30

// benchProxyCap reads the connection cap the doorman proxy runs with from
// the limits line it writes to its decision log at start (waiting up to
// 10 s for it), and what lowered it below the configured one, if
// anything.
func benchProxyCap(logFile string) (int, string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(logFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, "", err
		}
		for line := range bytes.Lines(data) {
			var l map[string]any
			if json.Unmarshal(line, &l) != nil || l["msg"] != decisionlog.MsgLimits {
				continue
			}
			n, ok := l[decisionlog.ConnectionsKey].(float64)
			if !ok || n < 1 {
				return 0, "", fmt.Errorf("limits line without a connection cap: %s", line)
			}
			by, _ := l[decisionlog.LimitedByKey].(string)
			return int(n), by, nil
		}
		if time.Now().After(deadline) {
			return 0, "", fmt.Errorf("no %q line in %s after 10 s", decisionlog.MsgLimits, logFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// benchOpenFiles is the number of descriptors this process holds.
func benchOpenFiles() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	return len(ents), err
}
