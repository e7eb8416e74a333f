package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
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

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
)

func inspectPolicy(t *testing.T, lines ...string) *conf.Policy {
	t.Helper()
	p, err := conf.ParseFile([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A plaintext request for an inspected host is refused, first on a
// connection and later on a keep-alive one that began with another host.
func TestInspectedPlaintextRefused(t *testing.T) {
	e := newTestEnv(t, inspectPolicy(t, "api.test", "evil.test", "inspect api.test allow *"), Config{})
	srv := e.startHTTP(apiAddr, 0)
	e.startHTTP(evilAddr, srv.Port())
	c := e.dial(netip.AddrPortFrom(apiAddr, srv.Port()))
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("plaintext to an inspected host: %v %v", resp, err)
	}
	e.waitRecord(func(m map[string]any) bool { return m["name"] == "api.test" && m["reason"] == ReasonPlaintextInspected })

	k := e.dial(netip.AddrPortFrom(evilAddr, srv.Port()))
	defer k.Close()
	br := bufio.NewReader(k)
	k.SetReadDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(k, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("uninspected host: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	fmt.Fprintf(k, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err == nil && resp.StatusCode == 200 {
		t.Fatal("a keep-alive request for the inspected host passed in plaintext")
	}
}

// A spliced connection to a host a new policy inspects is closed.
func TestNowInspectedClosesSplice(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	tc, _, err := e.tlsClient(c, "api.test")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	e.p.SetPolicy(inspectPolicy(t, "api.test", "inspect api.test deny DELETE"))
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("the spliced connection stayed open")
	}
	e.waitRecord(func(m map[string]any) bool {
		r, _ := m["reason"].(string)
		return m["name"] == "api.test" && strings.HasSuffix(r, reasonNowInspected)
	})
}

// An inspected host's session is terminated with the network's CA, its
// requests judged and relayed to the real host, verified with the
// upstream roots; the connection line says it was inspected.
func TestInspectedTerminates(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	pol := inspectPolicy(t, "api.test", "inspect api.test deny /forbidden")
	if _, err := ca.Ensure(caDir, pol.InspectedHosts()); err != nil {
		t.Fatal(err)
	}
	certs := newTestCerts(t)
	roots := filepath.Join(dir, "roots.pem")
	os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs.caCert.Raw}), 0o644)
	e := newTestEnv(t, pol, Config{CADir: caDir, UpstreamCAFile: roots})

	ln, err := net.Listen("tcp", netip.AddrPortFrom(apiAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{TLSConfig: &tls.Config{GetCertificate: certs.get}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin %s %s", r.Host, r.URL.Path)
	})}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	port := netip.MustParseAddrPort(ln.Addr().String()).Port()

	caPEM, _ := ca.CertPEM(caDir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(_ context.Context, _, _ string) (net.Conn, error) {
			return e.dial(netip.AddrPortFrom(apiAddr, port)), nil
		},
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
	url := fmt.Sprintf("https://api.test:%d", port)
	resp, err := client.Get(url + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != fmt.Sprintf("origin api.test:%d /ok", port) || resp.TLS.PeerCertificates[0].Issuer.CommonName != "doorman CA ca" {
		t.Fatalf("inspected GET: %q, issuer %q", body, resp.TLS.PeerCertificates[0].Issuer)
	}
	if resp, err := client.Get(url + "/forbidden"); err != nil || resp.StatusCode != 403 {
		t.Fatalf("denied path: %v %v", resp, err)
	}
	client.CloseIdleConnections()
	e.waitRecord(func(m map[string]any) bool {
		r, _ := m["reason"].(string)
		return m["msg"] == "connection" && strings.HasPrefix(r, "inspected: 2 requests, 1 refused")
	})
}
