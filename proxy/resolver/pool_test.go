package resolver

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// udpServer answers A queries on loopback, recording the source ports it
// hears from.
type udpServer struct {
	addr  netip.AddrPort
	mu    sync.Mutex
	ports map[uint16]bool
}

func newUDPServer(t *testing.T) *udpServer {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &udpServer{addr: c.LocalAddr().(*net.UDPAddr).AddrPort(), ports: map[uint16]bool{}}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.ports[from.Port()] = true
			s.mu.Unlock()
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			r := new(dns.Msg)
			r.SetReply(q)
			r.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(203, 0, 113, 7)}}
			out, _ := r.Pack()
			c.WriteToUDPAddrPort(out, from)
		}
	}()
	return s
}

// seen is how many source ports the server heard from.
func (s *udpServer) seen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ports)
}

func query(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	return m
}

// Many queries in flight, as a sandbox's flood forwards them, go out over
// the pool's few sockets: each is one conntrack entry of the host's for
// 30 s after its last packet, where a socket a query was one a query.
// Every query gets its own answer.
func TestUDPPoolSharesSockets(t *testing.T) {
	t.Parallel()
	srv := newUDPServer(t)
	p := &UDPPool{Size: 3, MaxAge: time.Hour}
	defer p.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	// 30 in flight at once: more lose datagrams to a full socket buffer
	// on a busy machine, which is UDP's, not the pool's.
	slots := make(chan struct{}, 30)
	for i := range 300 {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			name := strings.Repeat("a", 1+i%50) + ".example.test"
			r, err := p.Exchange(context.Background(), query(name), srv.addr, 5*time.Second)
			if err == nil && (len(r.Answer) != 1 || r.Answer[0].Header().Name != dns.Fqdn(name)) {
				err = &net.AddrError{Err: "wrong answer " + r.String()}
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := srv.seen(); n > 3 {
		t.Errorf("300 queries came from %d source ports, want at most the pool's 3", n)
	}
}

// A socket takes new queries for MaxAge only, then one on another port
// takes its place: the port is something a forger must guess, and it
// changes.
func TestUDPPoolRotates(t *testing.T) {
	t.Parallel()
	srv := newUDPServer(t)
	p := &UDPPool{Size: 1, MaxAge: 20 * time.Millisecond}
	defer p.Close()
	for range 4 {
		if _, err := p.Exchange(context.Background(), query("a.example.test"), srv.addr, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	if n := srv.seen(); n < 4 {
		t.Errorf("4 queries %v apart came from %d source ports, want a new one each time", 30*time.Millisecond, n)
	}
}

// A server that does not listen fails the query at once (its ICMP error),
// so that the next upstream is tried without waiting for the timeout; a
// server that does not answer fails it at the timeout, saying so; and a
// closed pool fails every query.
func TestUDPPoolFailures(t *testing.T) {
	t.Parallel()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	silent := c.LocalAddr().(*net.UDPAddr).AddrPort()
	defer c.Close()
	c2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closed := c2.LocalAddr().(*net.UDPAddr).AddrPort()
	c2.Close()

	p := &UDPPool{}
	start := time.Now()
	if _, err := p.Exchange(context.Background(), query("a.example.test"), closed, 5*time.Second); err == nil {
		t.Error("a server that does not listen answered")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a server that does not listen took %v to fail, want at once", d)
	}
	_, err = p.Exchange(context.Background(), query("a.example.test"), silent, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Errorf("a silent server: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := p.Exchange(ctx, query("a.example.test"), silent, 5*time.Second); err != context.Canceled {
		t.Errorf("a cancelled query: %v, want context.Canceled", err)
	}
	p.Close()
	if _, err := p.Exchange(context.Background(), query("a.example.test"), silent, time.Second); err == nil {
		t.Error("a closed pool sent a query")
	}
}
