package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// resolve asks the resolver for name's A and AAAA records, noting what it
// said.
func resolve(t *tally, cfg *config, name string) []netip.Addr {
	var addrs []netip.Addr
	var said []string
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), qtype)
		c := &dns.Client{Net: "udp", Timeout: cfg.timeout}
		resp, _, err := c.Exchange(m, netip.AddrPortFrom(cfg.resolver, 53).String())
		if err != nil {
			said = append(said, dns.TypeToString[qtype]+" "+describe(err))
			continue
		}
		var got []string
		for _, rr := range resp.Answer {
			var ip net.IP
			switch rr := rr.(type) {
			case *dns.A:
				ip = rr.A
			case *dns.AAAA:
				ip = rr.AAAA
			default:
				continue
			}
			if a, ok := netip.AddrFromSlice(ip); ok {
				addrs = append(addrs, a.Unmap())
				got = append(got, a.Unmap().String())
			}
		}
		if len(got) == 0 {
			got = []string{dns.RcodeToString[resp.Rcode]}
		}
		said = append(said, dns.TypeToString[qtype]+" "+strings.Join(got, ","))
	}
	t.note("%s: %s", name, strings.Join(said, " "))
	return addrs
}

// dialFirst connects to port at the first of addrs that answers, or else
// at the allowed host's address: the proxy takes every connection and
// dials the name it reads, whatever address the client aimed at.
func dialFirst(cfg *config, addrs []netip.Addr, port uint16) (net.Conn, netip.AddrPort, error) {
	for _, a := range addrs {
		dst := netip.AddrPortFrom(a, port)
		if c, err := dial(cfg, dst, nil); err == nil {
			return c, dst, nil
		}
	}
	dst := netip.AddrPortFrom(cfg.allowed4, port)
	c, err := dial(cfg, dst, nil)
	return c, dst, err
}

// clientHello is the ClientHello a TLS client would send for name.
func clientHello(name string) ([]byte, error) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go tls.Client(client, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := make([]byte, 5)
	if _, err := io.ReadFull(server, head); err != nil {
		return nil, err
	}
	body := make([]byte, int(head[3])<<8|int(head[4]))
	if _, err := io.ReadFull(server, body); err != nil {
		return nil, err
	}
	return append(head, body...), nil
}

// rebindName sends HTTP with Host name to port 80 and a ClientHello with
// SNI name, then Redis commands, to the Redis port.
func rebindName(t *tally, cfg *config, name string) {
	addrs := resolve(t, cfg, name)
	if c, dst, err := dialFirst(cfg, addrs, cfg.httpPort); err != nil {
		t.fail("HTTP connect for "+name, err)
	} else {
		req := fmt.Sprintf("POST /escape-rebind HTTP/1.1\r\nHost: %s\r\nContent-Length: 40\r\nConnection: close\r\n\r\n%-40s", name, "secret="+randomHex(8))
		sendAndWatch(t, "HTTP "+name+" via "+dst.String(), c, []byte(req), cfg.timeout)
		c.Close()
	}
	hello, err := clientHello(name)
	if err != nil {
		t.fail("ClientHello for "+name, err)
		return
	}
	c, dst, err := dialFirst(cfg, addrs, cfg.redisPort)
	if err != nil {
		t.fail("TLS connect for "+name, err)
		return
	}
	defer c.Close()
	redis := "*3\r\n$3\r\nSET\r\n$6\r\nsecret\r\n$16\r\n" + randomHex(8) + "\r\n*1\r\n$4\r\nINFO\r\n"
	sendAndWatch(t, "ClientHello+Redis "+name+" via "+dst.String(), c, append(hello, redis...), cfg.timeout)
}

func tryRebind(cfg *config) row {
	var t tally
	if len(cfg.rebind) == 0 {
		t.note("skipped: no -rebind names")
		return t.row("rebind")
	}
	results := make([]tally, len(cfg.rebind))
	var wg sync.WaitGroup
	for i, name := range cfg.rebind {
		wg.Go(func() { rebindName(&results[i], cfg, name) })
	}
	wg.Wait()
	for _, r := range results {
		t.sent += r.sent
		t.errs = append(t.errs, r.errs...)
		t.detail = append(t.detail, r.detail...)
	}
	return t.row("rebind")
}
