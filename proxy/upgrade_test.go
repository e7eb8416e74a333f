package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
)

// startUpgradeServer serves /ws by switching protocols (then echoing raw
// bytes) and everything else with a plain 200 that ignores Upgrade.
func (e *testEnv) startUpgradeServer(addr netip.Addr) netip.AddrPort {
	e.t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		e.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws" {
			fmt.Fprintf(w, "plain host %s\n", r.Host)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw)
	})}
	go srv.Serve(ln)
	e.t.Cleanup(func() { srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func TestHTTPUpgradeAccepted(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	srv := e.startUpgradeServer(apiAddr)
	c := e.dial(srv)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	// After the switch, opaque bytes (not HTTP) flow both ways.
	fmt.Fprint(c, "\x81\x05hello-frames")
	got := make([]byte, len("\x81\x05hello-frames"))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "\x81\x05hello-frames" {
		t.Fatalf("after upgrade: %q %v", got, err)
	}
}

func TestHTTPUpgradeDeclinedStaysChecked(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	srv := e.startUpgradeServer(apiAddr)
	c := e.dial(srv)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET /no HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("declined upgrade: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	// The server did not switch: the next request is HTTP and its Host is checked.
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("second request: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), "evil.test") {
		t.Fatalf("Host switch after a declined upgrade: %d %q, want 403", resp.StatusCode, body)
	}
}

// bigHello builds a ClientHello for name padded to about size bytes (a
// padding extension), in one TLS record.
func bigHello(name string, size int) []byte {
	var ext []byte
	sni := append([]byte{0, byte(len(name) >> 8), byte(len(name))}, name...)
	sniList := append([]byte{byte(len(sni) >> 8), byte(len(sni))}, sni...)
	ext = append(ext, 0, 0, byte(len(sniList)>>8), byte(len(sniList)))
	ext = append(ext, sniList...)
	pad := make([]byte, size)
	ext = append(ext, 0, 21, byte(len(pad)>>8), byte(len(pad)))
	ext = append(ext, pad...)
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id
	body = append(body, 0, 2, 0x13, 0x01)    // cipher suites
	body = append(body, 1, 0)                // compression
	body = append(body, byte(len(ext)>>8), byte(len(ext)))
	body = append(body, ext...)
	hs := append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{0x16, 3, 1, byte(len(hs) >> 8), byte(len(hs))}, hs...)
}

func TestLargeHelloInTinyRecords(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	rec := e.startRecorder(netip.AddrPortFrom(apiAddr, 0))
	hello := splitRecords(bigHello("api.test", 15000), 1) // ~90 KiB on the wire
	c := e.dial(rec)
	go c.Write(hello)
	got := make([]byte, len(hello))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo of a %d-byte hello in 1-byte records: %v", len(hello), err)
	}
	if string(got) != string(hello) {
		t.Fatal("upstream did not receive the hello byte for byte")
	}
}
