package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The fake internet's address plan: documentation ranges only (RFC 5737).
var (
	inetUplink = netip.MustParsePrefix("198.51.100.1/30") // inet's end of the uplink
	hostUplink = netip.MustParsePrefix("198.51.100.2/30") // "this machine"'s end
	dnsAddr    = netip.MustParseAddr("203.0.113.53")
)

// site is one HTTPS server of the fake internet.
type site struct {
	name     string
	addr     netip.Addr
	requests atomic.Int64 // HTTP requests its server answered
	queries  atomic.Int64 // DNS queries for its name the resolver saw
}

// internet is the demo's world: two namespaces, "inet" holding the
// servers and "host" playing this machine, joined by a veth. inet has no
// default route and the root namespace is never touched, so nothing can
// leave the machine.
type internet struct {
	inet, host *namespace
	sites      []*site
	caPEM      []byte
	ca         *x509.Certificate
	caKey      *ecdsa.PrivateKey
	closers    []func()
}

// namespace is a named network namespace (`ip netns add`), so that
// `ip netns exec` can run commands in it.
type namespace struct {
	name string
	ns   ns.NetNS
}

func newNamespace(name string) (*namespace, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	h, err := ns.GetNS(filepath.Join("/run/netns", name))
	if err != nil {
		exec.Command("ip", "netns", "del", name).Run()
		return nil, err
	}
	return &namespace{name: name, ns: h}, nil
}

func (x *namespace) delete() error {
	x.ns.Close()
	if out, err := exec.Command("ip", "netns", "del", x.name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", x.name, err, strings.TrimSpace(string(out)))
	}
	return os.RemoveAll(filepath.Join("/etc/netns", x.name))
}

func (x *namespace) links(fn func(*netlink.Handle) error) error {
	h, err := netlink.NewHandleAt(netns.NsHandle(x.ns.Fd()))
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

// newInternet builds the namespaces and starts the servers. close undoes
// it all, also after an error.
func newInternet(id string, sites []*site) (_ *internet, err error) {
	w := &internet{sites: sites}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.inet, err = newNamespace("dm-demo-inet-" + id); err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() { w.inet.delete() })
	if w.host, err = newNamespace("dm-demo-host-" + id); err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() { w.host.delete() })
	if err := w.wire(); err != nil {
		return nil, err
	}
	// `ip netns exec` mounts this over /etc/resolv.conf: in "host",
	// the fake internet's DNS server is the machine's resolver.
	etc := filepath.Join("/etc/netns", w.host.name)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver "+dnsAddr.String()+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := w.newCA(); err != nil {
		return nil, err
	}
	if err := w.serveDNS(); err != nil {
		return nil, err
	}
	for _, s := range sites {
		if err := w.serveHTTPS(s); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// wire joins host and inet: a veth, addresses, host's default route via
// inet, the servers' addresses on inet's lo.
func (w *internet) wire() error {
	err := w.inet.links(func(h *netlink.Handle) error {
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: "uplink"},
			PeerName:      "eth0",
			PeerNamespace: netlink.NsFd(int(w.host.ns.Fd())),
		}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		if err := up(h, "uplink", inetUplink); err != nil {
			return err
		}
		lo := []netip.Prefix{netip.PrefixFrom(dnsAddr, 32)}
		for _, s := range w.sites {
			lo = append(lo, netip.PrefixFrom(s.addr, 32))
		}
		return up(h, "lo", lo...)
	})
	if err != nil {
		return fmt.Errorf("wire %s: %w", w.inet.name, err)
	}
	err = w.host.links(func(h *netlink.Handle) error {
		if err := up(h, "lo"); err != nil {
			return err
		}
		if err := up(h, "eth0", hostUplink); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{Gw: inetUplink.Addr().AsSlice()})
	})
	if err != nil {
		return fmt.Errorf("wire %s: %w", w.host.name, err)
	}
	return nil
}

func up(h *netlink.Handle, name string, addrs ...netip.Prefix) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	for _, p := range addrs {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
		if err := h.AddrAdd(l, a); err != nil {
			return fmt.Errorf("add %s to %s: %w", p, name, err)
		}
	}
	return h.LinkSetUp(l)
}

// listen opens a socket inside inet.
func (w *internet) listen(fn func() error) error {
	return w.inet.ns.Do(func(ns.NetNS) error { return fn() })
}

// serveDNS answers A queries for the sites, NXDOMAIN for other names, and
// counts each site's queries.
func (w *internet) serveDNS() error {
	zone := map[string]*site{}
	for _, s := range w.sites {
		zone[dns.Fqdn(s.name)] = s
	}
	handler := dns.HandlerFunc(func(rw dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		if len(req.Question) != 1 {
			m.SetRcode(req, dns.RcodeFormatError)
			rw.WriteMsg(m)
			return
		}
		q := req.Question[0]
		s, ok := zone[strings.ToLower(q.Name)]
		if ok {
			s.queries.Add(1)
		}
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
				A:   s.addr.AsSlice(),
			})
		}
		rw.WriteMsg(m)
	})
	addr := netip.AddrPortFrom(dnsAddr, 53).String()
	var pc net.PacketConn
	var l net.Listener
	err := w.listen(func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		return fmt.Errorf("DNS server on %s: %w", addr, err)
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: l, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		w.closers = append(w.closers, func() { srv.Shutdown() })
	}
	return nil
}

// serveHTTPS serves "hello from <name>" on the site's port 443 and counts
// the requests that reach it.
func (w *internet) serveHTTPS(s *site) error {
	cert, err := w.issue(s.name)
	if err != nil {
		return err
	}
	var l net.Listener
	addr := netip.AddrPortFrom(s.addr, 443).String()
	if err := w.listen(func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		return fmt.Errorf("HTTPS server for %s on %s: %w", s.name, addr, err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			s.requests.Add(1)
			fmt.Fprintf(rw, "hello from %s\n", s.name)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{*cert}},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go srv.ServeTLS(l, "", "")
	w.closers = append(w.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return nil
}

// newCA makes the demo's throwaway certificate authority.
func (w *internet) newCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "doorman demo CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if w.ca, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	w.caKey = key
	w.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return nil
}

func (w *internet) issue(name string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, w.ca, &key.PublicKey, w.caKey)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// close stops the servers and deletes the namespaces, in reverse order.
func (w *internet) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.closers = nil
}

// hostLinks lists the links left in the host namespace.
func (w *internet) hostLinks() ([]string, error) {
	var names []string
	err := w.host.links(func(h *netlink.Handle) error {
		links, err := h.LinkList()
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return err
		}
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		return nil
	})
	return names, err
}
