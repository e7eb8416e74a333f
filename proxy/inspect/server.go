package inspect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
)

// Limits on what a client may send inside an inspected session.
const (
	maxHeaderBytes    = 64 << 10
	maxStreams        = 100
	readHeaderTimeout = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	handshakeTimeout  = 10 * time.Second
	maxTransports     = 256
)

// Config configures a Server.
type Config struct {
	// Sandbox names the sandbox, for the log and the 403 page.
	Sandbox string
	// Minter mints the leaf certificates (the network's CA). nil: every
	// inspected session is refused, since there is no CA.
	Minter *ca.Minter
	// UpstreamRoots verify the upstream hosts' certificates; nil means
	// the host's system roots (which SSL_CERT_FILE can name).
	UpstreamRoots *x509.CertPool
	// Dial connects to the upstream of one session (see Session.Dial).
	Logger *slog.Logger
	// Policy returns the policy in force: each request is judged by the
	// rules in force when it arrives.
	Policy func() *conf.Policy
}

// Session is one client connection to an inspected host.
type Session struct {
	// Conn is the client's connection; its ClientHello has been peeked,
	// not read.
	Conn net.Conn
	// Name is the inspected host the ClientHello named (normalized).
	Name   string
	Client netip.AddrPort
	Dst    netip.AddrPort // the original destination
	// Dial connects to the upstream the policy admitted (the name's
	// addresses through the guard, or the original destination).
	Dial func(ctx context.Context) (net.Conn, error)
	// DialKey says what Dial reaches ("name" or the address), for
	// sharing upstream connections between sessions that reach the same.
	DialKey string
}

// Result is what a session did, for its connection line.
type Result struct {
	Requests int
	Denied   int
	// HandshakeErr is set when the client's TLS handshake failed.
	HandshakeErr error
	BytesUp      int64
	BytesDown    int64
}

// Server terminates inspected sessions. One Server serves every session
// of a proxy; its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	http    *http.Server
	ln      *chanListener
	secrets *secretCache
	tlsConf *tls.Config

	mu         sync.Mutex
	transports map[string]*http.Transport

	// judging bounds the rule-set judgements in flight by what they
	// may cost: each holds the objects and arrays its body may hold
	// (conf.JSONContainerBound), at most conf.MaxJSONContainers+1 in
	// all, so that a sandbox's concurrent requests cannot together
	// take what one large one may.
	judging *semaphore.Weighted
	// bodies bounds the bytes of request bodies held to judge them
	// (see maxHeldBodies).
	bodies *semaphore.Weighted
	// bodyIdle is bodyIdleTimeout (a test's shorter one).
	bodyIdle time.Duration
}

// New returns a Server; Close stops it.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, ln: newChanListener(), secrets: newSecretCache(), transports: map[string]*http.Transport{},
		judging: semaphore.NewWeighted(conf.MaxJSONContainers + 1), bodies: semaphore.NewWeighted(maxHeldBodies),
		bodyIdle: bodyIdleTimeout}
	s.tlsConf = &tls.Config{
		NextProtos: []string{"h2", "http/1.1"},
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sc, ok := hello.Conn.(*sessionConn)
			if !ok {
				return nil, errors.New("no session")
			}
			if s.cfg.Minter == nil {
				return nil, errors.New("this network has no CA")
			}
			return s.cfg.Minter.Leaf(sc.s.Name)
		},
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	s.http = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		Protocols:         protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
		ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				if sc, ok := tc.NetConn().(*sessionConn); ok {
					return context.WithValue(ctx, sessionKey{}, sc)
				}
			}
			return ctx
		},
	}
	go s.http.Serve(s.ln)
	return s
}

// Close stops serving and closes every session and upstream connection.
func (s *Server) Close() error {
	err := s.http.Close()
	s.mu.Lock()
	for _, t := range s.transports {
		t.CloseIdleConnections()
	}
	s.mu.Unlock()
	return err
}

type sessionKey struct{}

// sessionConn is a session's client connection as the TLS server sees
// it: it counts bytes and says when it is closed.
type sessionConn struct {
	net.Conn
	s        *Session
	up, down atomic.Int64
	requests atomic.Int64
	denied   atomic.Int64
	closed   chan struct{}
	once     sync.Once
	// upstream and upstreamAuthority are where the session's requests
	// go: its transport and the host:port requests are sent to.
	upstream          *http.Transport
	upstreamAuthority string
	// sets are the rule sets in force for the session's host, as last
	// resolved (see setsFor).
	sets atomic.Pointer[sessionSets]
}

func (c *sessionConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.up.Add(int64(n))
	return n, err
}

func (c *sessionConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.down.Add(int64(n))
	return n, err
}

func (c *sessionConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// Serve terminates one session and returns when it has ended.
func (s *Server) Serve(sess *Session) Result {
	sc := &sessionConn{Conn: sess.Conn, s: sess, closed: make(chan struct{})}
	tc := tls.Server(sc, s.tlsConf)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		sc.Close()
		return Result{HandshakeErr: err, BytesUp: sc.up.Load(), BytesDown: sc.down.Load()}
	}
	sc.upstream = s.transport(sess, tc.ConnectionState().NegotiatedProtocol == "h2")
	sc.upstreamAuthority = net.JoinHostPort(sess.Name, strconv.Itoa(int(sess.Dst.Port())))
	if !s.ln.push(tc) {
		tc.Close()
	}
	<-sc.closed
	return Result{Requests: int(sc.requests.Load()), Denied: int(sc.denied.Load()), BytesUp: sc.up.Load(), BytesDown: sc.down.Load()}
}

// transport returns the upstream transport for a session's target: one
// per name and dial target, so that sessions reaching the same host share
// its connections and never another's, and per client protocol. A client
// that speaks HTTP/2 to doorman is relayed over HTTP/2 if the host offers
// it (its streams share one connection); one that speaks HTTP/1.1 is
// relayed over HTTP/1.1, a pooled connection per request in flight: one
// HTTP/2 connection would make every HTTP/1.1 session's requests queue
// behind its one writer and reader.
func (s *Server) transport(sess *Session, clientH2 bool) *http.Transport {
	key := sess.Name + "|" + sess.DialKey + "|" + strconv.Itoa(int(sess.Dst.Port())) + "|" + strconv.FormatBool(clientH2)
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.transports[key]; ok {
		return t
	}
	if len(s.transports) >= maxTransports {
		for k, t := range s.transports {
			t.CloseIdleConnections()
			delete(s.transports, k)
		}
	}
	dial := sess.Dial
	t := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		TLSClientConfig: &tls.Config{
			ServerName: sess.Name,
			RootCAs:    s.cfg.UpstreamRoots,
			MinVersion: tls.VersionTLS12,
		},
		ForceAttemptHTTP2:     clientH2,
		TLSHandshakeTimeout:   handshakeTimeout,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	if !clientH2 {
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // no HTTP/2
	}
	s.transports[key] = t
	return t
}
