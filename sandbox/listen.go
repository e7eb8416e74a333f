package sandbox

import (
	"fmt"
	"net"
	"os"

	"github.com/containernetworking/plugins/pkg/ns"
)

// sockets are the proxy's sockets inside a sandbox: a TCP listener per
// family for redirected connections and, per family with a resolver, a
// UDP socket and a TCP listener on one port for the DNS filter.
type sockets struct {
	tcp4, tcp6 socket
	dns4, dns6 socket
}

// socket is one port's listener(s); zero if the family is absent.
type socket struct {
	tcp  *net.TCPListener
	udp  *net.UDPConn
	port uint16
}

func (s *sockets) close() {
	for _, k := range []socket{s.tcp4, s.tcp6, s.dns4, s.dns6} {
		if k.tcp != nil {
			k.tcp.Close()
		}
		if k.udp != nil {
			k.udp.Close()
		}
	}
}

// files returns duplicates of the sockets' descriptors for the proxy.
func (s *sockets) files() (tcp, dnsUDP, dnsTCP []*os.File, err error) {
	add := func(list *[]*os.File, f interface{ File() (*os.File, error) }) {
		if err != nil {
			return
		}
		var fd *os.File
		if fd, err = f.File(); err == nil {
			*list = append(*list, fd)
		}
	}
	for _, k := range []socket{s.tcp4, s.tcp6} {
		if k.tcp != nil {
			add(&tcp, k.tcp)
		}
	}
	for _, k := range []socket{s.dns4, s.dns6} {
		if k.udp != nil {
			add(&dnsUDP, k.udp)
			add(&dnsTCP, k.tcp)
		}
	}
	if err != nil {
		closeFiles(tcp)
		closeFiles(dnsUDP)
		closeFiles(dnsTCP)
		return nil, nil, nil, fmt.Errorf("socket fd: %w", err)
	}
	return tcp, dnsUDP, dnsTCP, nil
}

// listenIn creates the proxy's sockets inside the netns at path: TCP
// listeners on 0.0.0.0 and, where the namespace has IPv6, [::] (v6only);
// DNS filter sockets for the families in dns4/dns6. Redirected local
// connections arrive on loopback, forwarded ones from nested containers on
// the incoming interface's address, hence the wildcard binds; the ruleset
// rejects direct connections to these ports. The DNS filter answers each
// UDP query from the address it came to (IP_PKTINFO), as conntrack needs.
func listenIn(nsPath string, dns4, dns6 bool) (*sockets, error) {
	s := &sockets{}
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		ln4, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			return fmt.Errorf("listen tcp4 in sandbox: %w", err)
		}
		s.tcp4 = socket{tcp: ln4.(*net.TCPListener), port: portOf(ln4)}
		if ln6, err := net.Listen("tcp6", "[::]:0"); err == nil {
			s.tcp6 = socket{tcp: ln6.(*net.TCPListener), port: portOf(ln6)}
		}
		if dns4 {
			if s.dns4, err = listenDNS("4", "0.0.0.0"); err != nil {
				return err
			}
		}
		if dns6 && s.tcp6.tcp != nil {
			if s.dns6, err = listenDNS("6", "::"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// listenHost creates the proxy's host-side sockets in the caller's
// network namespace, the runtime's (see runtimeNetNS): TCP listeners on
// 0.0.0.0 and, where the namespace has IPv6, [::] (v6only), and DNS
// filter sockets for the families in dns4/dns6. The host-side layer
// redirects to them what a sandbox sends through its host interface
// without passing its own ruleset: the TCP and DNS of a runtime with a
// network stack of its own (gVisor, a microVM's guest kernel), or of a
// workload that flushed its rules. The redirect takes them to the address
// of the interface they came in on, hence the wildcard binds; the layer
// drops what reaches these ports without its redirect, and the proxy
// refuses a connection nothing redirected (see proxy.OriginalDst).
func listenHost(dns4, dns6 bool) (*sockets, error) {
	s := &sockets{}
	ln4, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return nil, fmt.Errorf("listen tcp4 in the runtime's namespace: %w", err)
	}
	s.tcp4 = socket{tcp: ln4.(*net.TCPListener), port: portOf(ln4)}
	if ln6, err := net.Listen("tcp6", "[::]:0"); err == nil {
		s.tcp6 = socket{tcp: ln6.(*net.TCPListener), port: portOf(ln6)}
	}
	if dns4 {
		if s.dns4, err = listenDNS("4", "0.0.0.0"); err != nil {
			s.close()
			return nil, err
		}
	}
	if dns6 && s.tcp6.tcp != nil {
		if s.dns6, err = listenDNS("6", "::"); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// listenDNS binds a UDP socket and a TCP listener to one free port.
func listenDNS(family, addr string) (socket, error) {
	var last error
	for range 16 {
		pc, err := net.ListenUDP("udp"+family, &net.UDPAddr{IP: net.ParseIP(addr)})
		if err != nil {
			return socket{}, fmt.Errorf("listen udp%s in sandbox: %w", family, err)
		}
		port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
		ln, err := net.ListenTCP("tcp"+family, &net.TCPAddr{IP: net.ParseIP(addr), Port: int(port)})
		if err == nil {
			return socket{tcp: ln, udp: pc, port: port}, nil
		}
		pc.Close()
		last = err
	}
	return socket{}, fmt.Errorf("listen dns tcp%s in sandbox: %w", family, last)
}

func portOf(ln net.Listener) uint16 {
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
