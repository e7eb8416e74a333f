package proxy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
)

func TestTLSAllowedBytesIntact(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	tc, line, err := e.tlsClient(c, "api.test")
	if err != nil {
		t.Fatalf("allowed TLS failed: %v", err)
	}
	if want := fmt.Sprintf("server %s", netip.AddrPortFrom(apiAddr, e.tlsPort)); line != want {
		t.Fatalf("first line %q, want %q", line, want)
	}
	// Go's default client offers X25519MLKEM768: the ~1.5 KB hello must pass.
	if cs := tc.ConnectionState(); cs.CurveID != tls.X25519MLKEM768 {
		t.Errorf("key exchange %v, want X25519MLKEM768 (post-quantum hello)", cs.CurveID)
	}
	payload := make([]byte, 4<<20)
	rand.Read(payload)
	go func() {
		tc.Write(payload)
		tc.CloseWrite()
	}()
	got, err := io.ReadAll(tc)
	if err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo differs: got %d bytes, want %d", len(got), len(payload))
	}
	tc.Close()
	r := e.waitRecord(recordFor("api.test", "allow"))
	if r["proto"] != "tls" || r["rule"] != "api.test" || r["upstream"] != netip.AddrPortFrom(apiAddr, e.tlsPort).String() {
		t.Errorf("record %v", r)
	}
	if up, _ := r["bytes_up"].(float64); up < float64(len(payload)) {
		t.Errorf("bytes_up %v < %d", r["bytes_up"], len(payload))
	}
}

func TestTLSDeniedGetsAccessDenied(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	c := e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
	_, _, err := e.tlsClient(c, "evil.test")
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("denied TLS: err = %v, want a remote access_denied alert", err)
	}
	r := e.waitRecord(recordFor("evil.test", "deny"))
	if r["reason"] != "name not allowed" {
		t.Errorf("reason %q", r["reason"])
	}
}

func TestSNISpoofingReachesNamedHost(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	// The client aims at evil's IP but claims api.test.
	c := e.dial(netip.AddrPortFrom(evilAddr, e.tlsPort))
	_, line, err := e.tlsClient(c, "api.test")
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if !strings.Contains(line, apiAddr.String()) {
		t.Fatalf("spoofed connection answered by %q, want the real api.test at %v", line, apiAddr)
	}
	c.Close() // the decision line is written when the connection ends
	r := e.waitRecord(recordFor("api.test", "allow"))
	if r["dst"] != netip.AddrPortFrom(evilAddr, e.tlsPort).String() || r["upstream"] != netip.AddrPortFrom(apiAddr, e.tlsPort).String() {
		t.Errorf("record %v", r)
	}
}

func TestPortIsTheOriginalPort(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test:443"), Config{})
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort)) // not 443
	if _, _, err := e.tlsClient(c, "api.test"); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("api.test on port %d with only :443 allowed: err = %v, want access denied", e.tlsPort, err)
	}
	e.waitRecord(recordFor("api.test", "deny"))
}

func TestWildcardAllowed(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "*.wild.test"), Config{})
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	if _, _, err := e.tlsClient(c, "x.wild.test"); err != nil {
		t.Fatalf("x.wild.test under *.wild.test: %v", err)
	}
	c.Close()
	e.waitRecord(recordFor("x.wild.test", "allow"))
}

func TestForbiddenUpstreamRefused(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "lo.test"), Config{})
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	if _, _, err := e.tlsClient(c, "lo.test"); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("name resolving to loopback: err = %v, want access denied", err)
	}
	r := e.waitRecord(recordFor("lo.test", "deny"))
	if r["reason"] != "private upstream 127.0.0.1: loopback (127.0.0.0/8)" || r["upstream"] != fmt.Sprintf("127.0.0.1:%d", e.tlsPort) {
		t.Errorf("record %v: want the reason to name the loopback range, and upstream 127.0.0.1:%d", r, e.tlsPort)
	}
}

func TestNoSNIOnlyAddressRules(t *testing.T) {
	// Without an address rule, a hello without SNI is denied...
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("no SNI: err = %v, want access denied", err)
	}
	e.waitRecord(recordFor("", "deny"))

	// ...and an address rule admits it, dialing the original destination.
	e2 := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "127.0.0.3"), Config{})
	c2 := e2.dial(netip.AddrPortFrom(evilAddr, e2.tlsPort))
	tc2 := tls.Client(c2, &tls.Config{InsecureSkipVerify: true})
	tc2.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc2.Handshake(); err != nil {
		t.Fatalf("no SNI to an allowed address: %v", err)
	}
	line, _ := bufio.NewReader(tc2).ReadString('\n')
	if !strings.Contains(line, evilAddr.String()) {
		t.Fatalf("answered by %q, want %v", line, evilAddr)
	}
}

func TestUnknownProtocolReset(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	rec := e.startRecorder(netip.AddrPortFrom(evilAddr, 0))
	c := e.dial(rec)
	c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, netErrReset) {
		t.Fatalf("unknown protocol: read err = %v, want connection reset", err)
	}
	e.waitRecord(func(m map[string]any) bool { return m["proto"] == "unknown" && m["verdict"] == "deny" })
	if n := e.receivedAt(rec); n != 0 {
		t.Fatalf("recorder received %d bytes from a denied connection", n)
	}
}

func TestSplitHelloOneByteRecords(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	rec := e.startRecorder(netip.AddrPortFrom(apiAddr, 0))
	hello := captureHello(t, "api.test")
	split := splitRecords(hello, 1)
	c := e.dial(netip.AddrPortFrom(evilAddr, rec.Port())) // spoofed IP, too
	// Send it in several segments, with pauses, as a slow client would.
	for i := 0; i < len(split); i += 700 {
		c.Write(split[i:min(i+700, len(split))])
		time.Sleep(5 * time.Millisecond)
	}
	got := make([]byte, len(split))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo of a %d-byte split hello: %v", len(split), err)
	}
	if !bytes.Equal(got, split) {
		t.Fatal("upstream did not receive the hello byte for byte")
	}
	c.Close()
	r := e.waitRecord(func(m map[string]any) bool { return m["name"] == "api.test" })
	if r["verdict"] != "allow" || r["upstream"] != netip.AddrPortFrom(apiAddr, rec.Port()).String() {
		t.Fatalf("record %v", r)
	}
}

func TestSilentClientDroppedAtDeadline(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{SniffTimeout: 300 * time.Millisecond})
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent client: err = %v, want the proxy to close", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("silent client dropped after %v", el)
	}
	r := e.waitRecord(recordFor("", "deny"))
	if !strings.Contains(r["reason"].(string), "no name within") {
		t.Errorf("reason %q", r["reason"])
	}
}

func TestModes(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeNone, "api.test"), Config{})
	// The reset comes at once, maybe before connect() has returned.
	if c, err := e.tryDial(netip.AddrPortFrom(apiAddr, e.tlsPort)); err == nil {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, netErrReset) {
			t.Fatalf("mode none: err = %v, want reset without waiting for a hello", err)
		}
	} else if !errors.Is(err, netErrReset) {
		t.Fatalf("mode none: dial err = %v, want reset", err)
	}
	e.waitRecord(func(m map[string]any) bool { return m["reason"] == "mode none" })

	o := newTestEnv(t, mustPolicy(t, conf.ModeOpen), Config{})
	c2 := o.dial(netip.AddrPortFrom(evilAddr, o.tlsPort))
	_, line, err := o.tlsClient(c2, "evil.test")
	if err != nil || !strings.Contains(line, evilAddr.String()) {
		t.Fatalf("mode open: line %q err %v", line, err)
	}
	c2.Close()
	o.waitRecord(func(m map[string]any) bool { return m["name"] == "evil.test" && m["reason"] == "mode open" })
}

func TestHTTPAllowedAndDenied(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	srv := e.startHTTP(apiAddr, 0)
	e.startHTTP(evilAddr, srv.Port())

	resp := e.httpDo(netip.AddrPortFrom(evilAddr, srv.Port()), "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.1 200") || !strings.Contains(resp, "server "+srv.String()) {
		t.Fatalf("allowed HTTP (spoofed IP) answered:\n%s", resp)
	}
	resp = e.httpDo(srv, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.1 403") || !strings.Contains(resp, `"evil.test"`) || !strings.Contains(resp, `"sb-test"`) {
		t.Fatalf("denied HTTP answered:\n%s", resp)
	}
	e.waitRecord(recordFor("evil.test", "deny"))
	resp = e.httpDo(srv, "GET http://evil.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.1 403") {
		t.Fatalf("absolute-form URI disagreeing with Host answered:\n%s", resp)
	}
}

func TestHTTPKeepAliveHostSwitch(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	srv := e.startHTTP(apiAddr, 0)
	c := e.dial(srv)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "POST /one HTTP/1.1\r\nHost: api.test\r\nContent-Length: 5\r\n\r\nhello")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("first request: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "path /one body 5") {
		t.Fatalf("first response %d %q", resp.StatusCode, body)
	}
	fmt.Fprintf(c, "GET /two HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("second request: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), "evil.test") {
		t.Fatalf("second response %d %q, want 403 naming evil.test", resp.StatusCode, body)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("connection still open after the 403")
	}
	r := e.waitRecord(recordFor("evil.test", "deny"))
	if !strings.Contains(r["reason"].(string), "request for evil.test") {
		t.Errorf("reason %q", r["reason"])
	}
}

func TestReloadClosesLiveConnections(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy")
	e := watchedEnv(t, file, "api.test\n*.wild.test\n")

	keep := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	keepTLS, _, err := e.tlsClient(keep, "x.wild.test")
	if err != nil {
		t.Fatal(err)
	}
	lose := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	loseTLS, _, err := e.tlsClient(lose, "api.test")
	if err != nil {
		t.Fatal(err)
	}
	// Tighten: api.test loses its permission.
	writeAtomic(t, file, "*.wild.test\n")
	start := time.Now()
	loseTLS.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := loseTLS.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection that lost permission: read err = %v, want closed", err)
	}
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Fatalf("closed after %v, want within 1 s", el)
	}
	e.waitRecord(func(m map[string]any) bool {
		return m["name"] == "api.test" && m["verdict"] == "deny" && strings.HasPrefix(m["reason"].(string), "policy changed")
	})
	// The other connection still works.
	keepTLS.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := keepTLS.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(keepTLS).ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("kept connection: %q %v", line, err)
	}
	// A file that does not parse means deny-all, not the old policy.
	writeAtomic(t, file, "*.wild.test\nbad entry with spaces\n")
	deadline := time.Now().Add(2 * time.Second)
	for e.p.Policy().Mode != conf.ModeNone && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if e.p.Policy().Mode != conf.ModeNone {
		t.Fatalf("invalid policy file left mode %q, want none", e.p.Policy().Mode)
	}
	keepTLS.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := keepTLS.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection survived a policy file that failed to parse")
	}
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// httpDo sends a raw request to the proxy as if addressed to dst and returns the raw response.
func (e *testEnv) httpDo(dst netip.AddrPort, req string) string {
	e.t.Helper()
	c := e.dial(dst)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("request %q: %v", req, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%s %s\r\n\r\n%s", resp.Proto, resp.Status, body)
}

var _ = net.IPv4len
