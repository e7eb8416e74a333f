package daemon

import (
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/doorman-net/doorman/proxy"
	"github.com/doorman-net/doorman/proxy/dnsfilter"
	"github.com/doorman-net/doorman/proxy/launch"
)

// sockets are the listeners one proxy serves.
type sockets struct {
	tcp    []net.Listener   // redirected connections (inherited, then bound)
	dnsTCP []net.Listener   // the DNS filter's TCP listeners
	dnsUDP []net.PacketConn // the DNS filter's UDP sockets
}

// openSockets turns the inherited descriptors of l into listeners and
// binds its addresses. On error nothing stays open.
func openSockets(l launch.Listeners) (_ *sockets, err error) {
	s := &sockets{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	for _, fd := range l.TCP {
		ln, err := tcpListenerFD("listener", fd)
		if err != nil {
			return nil, err
		}
		s.tcp = append(s.tcp, ln)
	}
	for _, fd := range l.DNSTCP {
		ln, err := tcpListenerFD("DNS filter TCP listener", fd)
		if err != nil {
			return nil, err
		}
		s.dnsTCP = append(s.dnsTCP, ln)
	}
	for _, fd := range l.DNSUDP {
		pc, err := udpConnFD(fd)
		if err != nil {
			return nil, err
		}
		s.dnsUDP = append(s.dnsUDP, pc)
	}
	for _, a := range l.Addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", a, err)
		}
		s.tcp = append(s.tcp, ln)
	}
	return s, nil
}

func (s *sockets) close() {
	for _, ln := range append(s.tcp, s.dnsTCP...) {
		ln.Close()
	}
	for _, pc := range s.dnsUDP {
		pc.Close()
	}
}

// serve serves every socket on a goroutine of its own, counted in wg.
func (s *sockets) serve(wg *sync.WaitGroup, p *proxy.Proxy, filter *dnsfilter.Filter) {
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	for _, ln := range s.tcp {
		run(func() { p.Serve(ln) })
	}
	for _, ln := range s.dnsTCP {
		run(func() { filter.ServeTCP(ln) })
	}
	for _, pc := range s.dnsUDP {
		run(func() { filter.ServeUDP(pc) })
	}
}

// tcpListenerFD turns the inherited descriptor fd into a TCP listener.
func tcpListenerFD(what string, fd int) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), fmt.Sprintf("fd-%d", fd))
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s fd %d: %w", what, fd, err)
	}
	if _, ok := ln.(*net.TCPListener); !ok {
		ln.Close()
		return nil, fmt.Errorf("%s fd %d: %w: not a TCP listening socket", what, fd, errNotSocket)
	}
	return ln, nil
}

// udpConnFD turns the inherited descriptor fd into a UDP socket.
func udpConnFD(fd int) (net.PacketConn, error) {
	f := os.NewFile(uintptr(fd), fmt.Sprintf("fd-%d", fd))
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("DNS filter UDP socket fd %d: %w", fd, err)
	}
	if _, ok := pc.(*net.UDPConn); !ok {
		pc.Close()
		return nil, fmt.Errorf("DNS filter UDP socket fd %d: %w: not a UDP socket", fd, errNotSocket)
	}
	return pc, nil
}
