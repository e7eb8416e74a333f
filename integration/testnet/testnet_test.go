package testnet_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"

	"github.com/doorman-net/doorman/integration/testnet"
)

var (
	apiV4  = netip.MustParseAddr("203.0.113.10")
	apiV6  = netip.MustParseAddr("2001:db8:100::10")
	evilV4 = netip.MustParseAddr("203.0.113.20")
)

// TestTopology builds a Net with two hosts and a sandbox, checks every
// service from the sandbox (no doorman involved), then checks that the
// cleanup left no namespace behind.
func TestTopology(t *testing.T) {
	var names []string
	t.Run("net", func(t *testing.T) {
		n := testnet.New(t)
		names = append(names, n.InetNS().Name(), n.HostNS().Name())
		api := n.AddHost("api.example.test", apiV4, apiV6)
		evil := n.AddHost("evil.example.test", evilV4)
		sb := n.NewSandbox(t)
		names = append(names, sb.Name())
		for _, name := range names {
			if !strings.HasPrefix(name, "dm-") {
				t.Errorf("namespace %q is not named dm-*", name)
			}
		}
		ctx := t.Context()

		t.Run("resolve", func(t *testing.T) {
			before := n.QueriesFor("api.example.test")
			got, err := sb.LookupHost(ctx, "API.example.test.")
			if err != nil {
				t.Fatal(err)
			}
			if want := []netip.Addr{apiV4, apiV6}; !slices.Equal(got, want) {
				t.Errorf("LookupHost(api) = %v, want %v", got, want)
			}
			if got := n.QueriesFor("api.example.test") - before; got != 2 {
				t.Errorf("resolver counted %d queries for api (A+AAAA), want 2", got)
			}
			if _, err := sb.LookupHost(ctx, "nothing.example.test"); err == nil {
				t.Error("LookupHost(nothing.example.test) succeeded, want NXDOMAIN")
			}
			r, err := sb.QueryDNS(ctx, n.DNS, "nothing.example.test", dns.TypeA)
			if err != nil {
				t.Fatal(err)
			}
			if r.Rcode != dns.RcodeNameError {
				t.Errorf("unknown name: rcode %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
			}
			// TCP, over IPv6, to the resolver's v6 address.
			m := new(dns.Msg).SetQuestion("evil.example.test.", dns.TypeA)
			r, err = sb.ExchangeDNS(ctx, "tcp", netip.AddrPortFrom(n.DNS6, 53), m)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != evilV4.String() {
				t.Errorf("TCP/IPv6 query for evil: answer %v, want %s", r.Answer, evilV4)
			}
		})

		t.Run("https-by-name", func(t *testing.T) {
			resp := get(t, sb.HTTPClient(), "https://api.example.test/hello", "")
			wantBody(t, resp, "api.example.test 203.0.113.10:443 GET /hello\n")
			wantHeader(t, resp, testnet.HeaderHost, "api.example.test")
			wantHeader(t, resp, testnet.HeaderSNI, "api.example.test")
			// No NAT anywhere: the server sees the sandbox's own address.
			wantHeaderPrefix(t, resp, testnet.HeaderRemote, sb.Addr4.String()+":")
		})

		t.Run("https-ipv6-no-sni", func(t *testing.T) {
			// An IP in the URL means no SNI: the host's own certificate,
			// which names its addresses, must verify.
			resp := get(t, sb.HTTPClient(), "https://[2001:db8:100::10]:8443/six", "")
			wantBody(t, resp, "api.example.test [2001:db8:100::10]:8443 GET /six\n")
			wantHeader(t, resp, testnet.HeaderSNI, "")
			wantHeaderPrefix(t, resp, testnet.HeaderRemote, "["+sb.Addr6.String()+"]:")
		})

		t.Run("sni-names-the-answering-address", func(t *testing.T) {
			// The shape of an SNI-spoofing attempt: api's name, evil's IP.
			// Without doorman evil answers, and its body says so.
			before := api.Connections(testnet.PortHTTPS)
			raw, err := sb.DialTCP("203.0.113.20:443")
			if err != nil {
				t.Fatal(err)
			}
			c := tls.Client(raw, &tls.Config{ServerName: "api.example.test", RootCAs: n.CertPool()})
			defer c.Close()
			fmt.Fprint(c, "GET /spoof HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n")
			out, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(out, []byte("\r\n\r\nevil.example.test 203.0.113.20:443 GET /spoof\n")) {
				t.Errorf("response %q does not end with evil's body line", out)
			}
			if got := evil.Connections(testnet.PortHTTPS); got != 1 {
				t.Errorf("evil accepted %d connections on 443, want 1", got)
			}
			if got := api.Connections(testnet.PortHTTPS) - before; got != 0 {
				t.Errorf("api accepted %d connections on 443, want 0", got)
			}
		})

		t.Run("http-ipv6", func(t *testing.T) {
			before := api.Requests()
			resp := get(t, sb.HTTPClient(), "http://[2001:db8:100::10]/plain", "api.example.test")
			wantBody(t, resp, "api.example.test [2001:db8:100::10]:80 GET /plain\n")
			wantHeader(t, resp, testnet.HeaderHost, "api.example.test")
			wantHeader(t, resp, testnet.HeaderProto, "HTTP/1.1")
			if got := api.Requests() - before; got != 1 {
				t.Errorf("api counted %d requests, want 1", got)
			}
		})

		t.Run("h2c-prior-knowledge", func(t *testing.T) {
			tr := &http.Transport{DialContext: sb.Dial, Protocols: new(http.Protocols)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			defer tr.CloseIdleConnections()
			resp := get(t, &http.Client{Transport: tr, Timeout: 5 * time.Second}, "http://203.0.113.10:8080/h2c", "")
			wantBody(t, resp, "api.example.test 203.0.113.10:8080 GET /h2c\n")
			wantHeader(t, resp, testnet.HeaderProto, "HTTP/2.0")
		})

		t.Run("recorder", func(t *testing.T) {
			payload := bytes.Repeat([]byte("x"), 1234)
			for _, addr := range []string{"203.0.113.10:5432", "[2001:db8:100::10]:5432"} {
				c, err := sb.DialTCP(addr)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Write(payload); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			waitFor(t, "api's recorder to count 2×1234 bytes on 5432", func() bool {
				return api.Received(testnet.PortPostgres) == 2*len(payload)
			})
			if got := api.Connections(testnet.PortPostgres); got != 2 {
				t.Errorf("api recorder counted %d connections on 5432, want 2", got)
			}
			if got := api.Received(testnet.PortRecorder) + evil.Received(testnet.PortPostgres); got != 0 {
				t.Errorf("%d bytes arrived on ports nobody wrote to", got)
			}
		})

		t.Run("udp-echo", func(t *testing.T) {
			for _, tc := range []struct {
				addr string
				port int
				msg  string
			}{
				{"203.0.113.10:9999", testnet.PortUDPEcho, "ping over v4"},
				{"[2001:db8:100::10]:443", testnet.PortHTTPS, "quic-ish"},
			} {
				c, err := sb.DialUDP(tc.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Write([]byte(tc.msg)); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				buf := make([]byte, 100)
				k, err := c.Read(buf)
				if err != nil {
					t.Fatalf("no echo from %s: %v", tc.addr, err)
				}
				if string(buf[:k]) != tc.msg {
					t.Errorf("echo from %s = %q, want %q", tc.addr, buf[:k], tc.msg)
				}
				if got := api.UDPReceived(tc.port); got != len(tc.msg) {
					t.Errorf("UDPReceived(%d) = %d, want %d", tc.port, got, len(tc.msg))
				}
				if got := api.UDPDatagrams(tc.port); got != 1 {
					t.Errorf("UDPDatagrams(%d) = %d, want 1", tc.port, got)
				}
			}
		})

		t.Run("rogue-dns", func(t *testing.T) {
			resolver := n.QueriesSeen(n.DNS)
			if got := n.QueriesSeen(n.RogueDNS); got != 0 {
				t.Fatalf("rogue DNS saw %d queries before any was sent to it", got)
			}
			r, err := sb.QueryDNS(ctx, n.RogueDNS, "api.example.test", dns.TypeA)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != apiV4.String() {
				t.Errorf("rogue answer %v, want %s", r.Answer, apiV4)
			}
			if _, err := sb.QueryDNS(ctx, n.RogueDNS6, "api.example.test", dns.TypeAAAA); err != nil {
				t.Fatal(err)
			}
			if got := n.QueriesSeen(n.RogueDNS); got != 1 {
				t.Errorf("QueriesSeen(RogueDNS) = %d, want 1", got)
			}
			if got := n.QueriesSeen(n.RogueDNS6); got != 1 {
				t.Errorf("QueriesSeen(RogueDNS6) = %d, want 1", got)
			}
			if got := n.QueriesSeen(n.DNS) - resolver; got != 0 {
				t.Errorf("the resolver saw %d queries meant for the rogue server", got)
			}
		})

		// A name only the resolver knows: the rogue server denies it,
		// and each server's count of it is its own.
		t.Run("answer-only-at", func(t *testing.T) {
			n.AddHost("split.example.test", netip.MustParseAddr("203.0.113.41"))
			n.AnswerOnlyAt("split.example.test", n.DNS)
			r, err := sb.QueryDNS(ctx, n.DNS, "Split.example.test", dns.TypeA)
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("at the resolver: %v, %v", r, err)
			}
			r, err = sb.QueryDNS(ctx, n.RogueDNS, "split.example.test", dns.TypeA)
			if err != nil || r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
				t.Errorf("at the rogue server: %v, %v; want NXDOMAIN", r, err)
			}
			if a, b, c := n.QueriesAt(n.DNS, "split.example.test"), n.QueriesAt(n.RogueDNS, "SPLIT.example.test."), n.QueriesAt(n.DNS6, "split.example.test"); a != 1 || b != 1 || c != 0 {
				t.Errorf("QueriesAt: DNS %d, RogueDNS %d, DNS6 %d; want 1, 1, 0", a, b, c)
			}
			// Other names stay answered everywhere.
			if r, err := sb.QueryDNS(ctx, n.RogueDNS, "api.example.test", dns.TypeA); err != nil || len(r.Answer) != 1 {
				t.Errorf("api at the rogue server: %v, %v", r, err)
			}
		})

		t.Run("tunnel-zone", func(t *testing.T) {
			r, err := sb.QueryDNS(ctx, n.DNS, "c2VjcmV0.Tunnel.Test", dns.TypeTXT)
			if err != nil {
				t.Fatal(err)
			}
			if r.Rcode != dns.RcodeNameError {
				t.Errorf("tunnel query: rcode %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
			}
			if got := n.TunnelQueries(); got != 1 {
				t.Errorf("TunnelQueries() = %d, want 1", got)
			}
			if got, want := n.TunnelNames(), []string{"c2vjcmv0.tunnel.test"}; !slices.Equal(got, want) {
				t.Errorf("TunnelNames() = %q, want %q", got, want)
			}
		})

		t.Run("host-dials-from-its-uplink", func(t *testing.T) {
			resp := get(t, n.HostNS().HTTPClient(), "http://api.example.test:8080/from-host", "")
			wantBody(t, resp, "api.example.test 203.0.113.10:8080 GET /from-host\n")
			wantHeaderPrefix(t, resp, testnet.HeaderRemote, n.HostAddr4.String()+":")
		})

		t.Run("unassigned-address-fails-fast", func(t *testing.T) {
			for _, addr := range []string{"203.0.113.99:443", "[2001:db8:100::99]:443"} {
				start := time.Now()
				c, err := sb.DialTCP(addr)
				if err == nil {
					c.Close()
					t.Errorf("dial %s succeeded; nobody holds that address", addr)
					continue
				}
				if d := time.Since(start); d > 3*time.Second {
					t.Errorf("dial %s took %v to fail (%v), want an ICMP error at once", addr, d, err)
				}
			}
		})

		t.Run("curl-in-sandbox", func(t *testing.T) {
			if _, err := exec.LookPath("curl"); err != nil {
				t.Skip("curl not installed")
			}
			ca := n.WriteCA(t.TempDir())
			out, err := sb.Command(ctx, "curl", "-sS", "--ipv4", "--max-time", "5", "--cacert", ca,
				"https://api.example.test:8443/curl").CombinedOutput()
			if err != nil {
				t.Fatalf("curl in %s: %v: %s", sb.Name(), err, out)
			}
			if want := "api.example.test 203.0.113.10:8443 GET /curl\n"; string(out) != want {
				t.Errorf("curl got %q, want %q", out, want)
			}
		})

		t.Run("sandbox-per-subtest", func(t *testing.T) {
			var name, iface string
			t.Run("make", func(t *testing.T) {
				sb2 := n.NewSandbox(t)
				name, iface = sb2.Name(), sb2.HostIface
				if sb2.Addr4 == sb.Addr4 || sb2.Prefix6 == sb.Prefix6 {
					t.Errorf("second sandbox reuses the first's addresses: %s %s", sb2.Addr4, sb2.Prefix6)
				}
				resp := get(t, sb2.HTTPClient(), "https://evil.example.test/", "")
				wantBody(t, resp, "evil.example.test 203.0.113.20:443 GET /\n")
			})
			wantGone(t, name)
			if sb3 := n.NewSandbox(t); sb3.Index != 2 {
				t.Errorf("a new sandbox got index %d, want 2 (freed by the deleted one)", sb3.Index)
			}
			// The kernel tears a namespace down asynchronously once its
			// last reference is gone; the veth goes with it.
			waitFor(t, "host's "+iface+" to go with its sandbox", func() bool {
				err := n.InHost(func() error {
					_, err := netlink.LinkByName(iface)
					return err
				})
				return err != nil
			})
		})
	})
	if len(names) != 3 {
		t.Fatalf("made %d namespaces (%v), want 3", len(names), names)
	}
	for _, name := range names {
		wantGone(t, name)
	}
}

// TestParallelNets proves that two Nets with the same addresses do not see
// each other.
func TestParallelNets(t *testing.T) {
	for _, name := range []string{"one.example.test", "two.example.test"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := testnet.New(t)
			n.AddHost(name, apiV4)
			sb := n.NewSandbox(t)
			resp := get(t, sb.HTTPClient(), "https://"+name+"/", "")
			wantBody(t, resp, name+" 203.0.113.10:443 GET /\n")
			other := "one.example.test"
			if name == other {
				other = "two.example.test"
			}
			if _, err := sb.LookupHost(t.Context(), other); err == nil {
				t.Errorf("%s resolves in the other Net", other)
			}
		})
	}
}

func get(t *testing.T, c *http.Client, url, host string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func wantBody(t *testing.T, resp *http.Response, want string) {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != want {
		t.Errorf("body %q, want %q", body, want)
	}
}

func wantHeader(t *testing.T, resp *http.Response, key, want string) {
	t.Helper()
	if got := resp.Header.Get(key); got != want {
		t.Errorf("%s: %q, want %q", key, got, want)
	}
}

func wantHeaderPrefix(t *testing.T, resp *http.Response, key, prefix string) {
	t.Helper()
	if got := resp.Header.Get(key); !strings.HasPrefix(got, prefix) {
		t.Errorf("%s: %q, want it to start with %q", key, got, prefix)
	}
}

// wantGone checks that the named namespace and its /etc/netns files are gone.
func wantGone(t *testing.T, name string) {
	t.Helper()
	for _, p := range []string{filepath.Join("/var/run/netns", name), filepath.Join("/etc/netns", name)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after cleanup (stat: %v)", p, err)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
