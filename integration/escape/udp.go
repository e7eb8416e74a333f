package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// udpExchange sends data to dst from a new UDP socket (control, if set,
// runs on it first) and waits cfg.timeout for the echo.
func udpExchange(t *tally, cfg *config, dst netip.AddrPort, data []byte, control func(string, string, syscall.RawConn) error) {
	d := net.Dialer{Control: control}
	c, err := d.Dial("udp", dst.String())
	if err != nil {
		t.fail("UDP socket to "+dst.String(), err)
		return
	}
	defer c.Close()
	n, err := c.Write(data)
	t.wrote(n)
	if err != nil {
		t.fail("UDP send to "+dst.String(), err)
		return
	}
	c.SetReadDeadline(time.Now().Add(cfg.timeout))
	n, err = c.Read(make([]byte, 2048))
	switch {
	case err == nil:
		t.note("UDP %s: %d bytes echoed", dst, n)
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.note("UDP %s: sent, no echo", dst)
	default:
		t.fail("UDP "+dst.String()+" after send", err)
	}
}

func tryUDP(cfg *config) row {
	var t tally
	udpExchange(&t, cfg, netip.AddrPortFrom(cfg.denied4, cfg.udpPort), payload("udp"), nil)
	return t.row("udp")
}

// quicInitial returns a 1200-byte datagram laid out as a QUIC v1 Initial
// (long header, random connection ID, padding). Its protection is not
// real: a server would drop it, but every middlebox sees QUIC.
func quicInitial() []byte {
	b := make([]byte, 1200)
	b[0] = 0xc3                                                  // long header, fixed bit, Initial, 4-byte packet number
	binary.BigEndian.PutUint32(b[1:], 1)                         // version 1
	b[5] = 8                                                     // DCID length
	copy(b[6:14], []byte(randomHex(4)))                          // DCID
	b[14] = 0                                                    // SCID length
	b[15] = 0                                                    // token length
	binary.BigEndian.PutUint16(b[16:], 0x4000|uint16(len(b)-18)) // length (2-byte varint)
	copy(b[22:], payload("quic"))
	return b
}

func tryQUIC(cfg *config) row {
	var t tally
	for _, a := range []netip.Addr{cfg.denied4, cfg.allowed4} {
		udpExchange(&t, cfg, netip.AddrPortFrom(a, cfg.quicPort), quicInitial(), nil)
	}
	return t.row("quic")
}

// dnsQuery sends one query to server:53 over network and notes the rcode.
func dnsQuery(t *tally, cfg *config, network string, server netip.Addr, name string, qtype uint16) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	packed, _ := m.Pack()
	c := &dns.Client{Net: network, Timeout: cfg.timeout}
	resp, _, err := c.Exchange(m, netip.AddrPortFrom(server, 53).String())
	if err != nil {
		t.fail(fmt.Sprintf("%s query to %s", strings.ToUpper(network), server), err)
		return
	}
	t.wrote(len(packed))
	t.note("%s %s: %s", strings.ToUpper(network), server, dns.RcodeToString[resp.Rcode])
}

func tryDNSRogue(cfg *config) row {
	var t tally
	if len(cfg.rogueDNS) == 0 {
		t.note("skipped: no -rogue-dns")
	}
	for _, s := range cfg.rogueDNS {
		dnsQuery(&t, cfg, "udp", s, cfg.allowedName, dns.TypeA)
		dnsQuery(&t, cfg, "tcp", s, cfg.allowedName, dns.TypeA)
	}
	return t.row("dns-rogue")
}

// tryDNSTunnel encodes a payload, hex in 60-character labels, into the
// names of TXT queries under the tunnel zone, and sends them to the
// resolver: a resolver that recurses carries every name to the zone's
// authoritative server.
func tryDNSTunnel(cfg *config) row {
	var t tally
	// The recognisable payload and 48 random bytes: four names.
	data := hex.EncodeToString(payload("dns-tunnel")) + randomHex(48)
	session := randomHex(4)
	var names []string
	for seq := 0; len(data) > 0; seq++ {
		chunk := data[:min(60, len(data))]
		data = data[len(chunk):]
		names = append(names, fmt.Sprintf("%s.%d.%s.%s", chunk, seq, session, cfg.tunnelZone))
	}
	// Outcomes repeat; count them instead of listing each query.
	var errs, notes counted
	for i, name := range names {
		network := "udp"
		if i%2 == 1 {
			network = "tcp"
		}
		var q tally
		dnsQuery(&q, cfg, network, cfg.resolver, name, dns.TypeTXT)
		t.sent += q.sent
		errs.add(q.errs...)
		notes.add(q.detail...)
	}
	t.errs = append(t.errs, errs.lines()...)
	t.detail = append(t.detail, notes.lines()...)
	if len(names) > 0 {
		t.note("%d names like %s", len(names), names[0])
	}
	return t.row("dns-tunnel")
}

// counted counts repeated lines, keeping the order of their first
// appearance.
type counted struct {
	order []string
	n     map[string]int
}

func (c *counted) add(lines ...string) {
	if c.n == nil {
		c.n = map[string]int{}
	}
	for _, l := range lines {
		if c.n[l] == 0 {
			c.order = append(c.order, l)
		}
		c.n[l]++
	}
}

// lines returns "N× line" for each line.
func (c *counted) lines() []string {
	var out []string
	for _, l := range c.order {
		out = append(out, fmt.Sprintf("%d× %s", c.n[l], l))
	}
	return out
}
