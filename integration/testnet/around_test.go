package testnet_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/integration/testnet"
)

// TestLANAndICMP checks the LAN a rebinding test aims at: a sandbox
// reaches a LAN host's servers on a private IPv4 and a ULA address through
// host, AddRecord points a name there, the Host counts requests by the
// name asked for, and an ICMP recorder in the LAN counts echo requests
// and their payload (and not what arrives elsewhere).
func TestLANAndICMP(t *testing.T) {
	n := testnet.New(t)
	lan4, lan6 := netip.MustParseAddr("10.66.77.10"), netip.MustParseAddr("fdd0:7e57::10")
	h := n.AddLANHost("lan.internal", lan4, lan6)
	if got := n.LANAddrs(); len(got) != 2 {
		t.Errorf("LANAddrs() = %v, want both", got)
	}
	n.AddRecord("lan.rebind.example.test", lan4)
	rec := n.LANNS().RecordICMP(t, "")
	inet := n.InetNS().RecordICMP(t, "")
	sb := n.NewSandbox(t)

	addrs, err := sb.LookupHost(t.Context(), "lan.rebind.example.test")
	if err != nil || len(addrs) != 1 || addrs[0] != lan4 {
		t.Fatalf("lookup of the rebinding name: %v %v", addrs, err)
	}
	for _, a := range []netip.Addr{lan4, lan6} {
		resp := get(t, sb.HTTPClient(), "http://"+netip.AddrPortFrom(a, testnet.PortHTTP).String()+"/x", "lan.rebind.example.test")
		wantBody(t, resp, fmt.Sprintf("lan.internal %s GET /x\n", netip.AddrPortFrom(a, testnet.PortHTTP)))
	}
	if got := h.RequestsFor("LAN.rebind.example.test"); got != 2 {
		t.Errorf("RequestsFor = %d, want 2 (hosts %v)", got, h.RequestHosts())
	}
	if _, err := n.InetNS().DialTCP(netip.AddrPortFrom(lan4, testnet.PortHTTP).String()); err == nil {
		t.Errorf("inet reached the LAN: it must not be routed there")
	}
	if got := h.Connections(testnet.PortHTTP); got != 2 {
		t.Errorf("LAN host connections on port 80 = %d, want 2", got)
	}

	// Two echo requests with 100-byte payloads to the LAN host.
	err = sb.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for seq := range 2 {
			msg := make([]byte, 8+100)
			msg[0], msg[7] = 8, byte(seq)
			var s uint32
			for i := 0; i < len(msg); i += 2 {
				s += uint32(msg[i])<<8 | uint32(msg[i+1])
			}
			for s>>16 != 0 {
				s = s&0xffff + s>>16
			}
			msg[2], msg[3] = byte(^s>>8), byte(^s)
			if err := unix.Sendto(fd, msg, 0, &unix.SockaddrInet4{Addr: lan4.As4()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two echo requests in the LAN", func() bool { m, _ := rec.ICMP(8); return m == 2 })
	if m, b := rec.ICMP(8); m != 2 || b != 200 {
		t.Errorf("LAN recorder: %d echo requests, %d payload bytes; want 2, 200", m, b)
	}
	if m, _ := inet.ICMP(8); m != 0 {
		t.Errorf("inet recorder counted %d echo requests sent to the LAN", m)
	}
}

// TestFake101AndH2CUpgrade checks the two responses a proxy's upgrade
// logic is tested with: Fake101Path's body (a 101 status line) comes only
// after the next request, and an Upgrade: h2c request is answered 101.
func TestFake101AndH2CUpgrade(t *testing.T) {
	n := testnet.New(t)
	api := n.AddHost("api.example.test", apiV4)
	sb := n.NewSandbox(t)
	dst := netip.AddrPortFrom(apiV4, testnet.PortHTTP).String()

	c, err := sb.DialTCP(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: api.example.test\r\n\r\n", testnet.Fake101Path)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("response head: %v %v", resp, err)
	}
	// The body is not there yet.
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := br.Peek(1); err == nil {
		t.Fatalf("the body came before the next request")
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /next HTTP/1.1\r\nHost: evil.example.test\r\n\r\n")
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasPrefix(string(body), "HTTP/1.1 101 Switching Protocols\r\n") {
		t.Fatalf("body %q, %v", body, err)
	}
	next, err := http.ReadResponse(br, nil)
	if err != nil || next.StatusCode != 200 {
		t.Fatalf("the next response: %v %v", next, err)
	}
	wantBody(t, next, fmt.Sprintf("api.example.test %s GET /next\n", dst))
	if got := api.RequestsFor("evil.example.test"); got != 1 {
		t.Errorf("requests for evil at api: %d, want 1", got)
	}

	u, err := sb.DialTCP(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(u, "GET / HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABk\r\n\r\n")
	up, err := http.ReadResponse(bufio.NewReader(u), nil)
	if err != nil || up.StatusCode != http.StatusSwitchingProtocols || up.Header.Get("Upgrade") != "h2c" {
		t.Fatalf("h2c upgrade: %v %v", up, err)
	}
}
