package proxy

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"

	"github.com/doorman-net/doorman/conf"
)

// echFront serves TLS with Encrypted Client Hello on apiAddr, as a CDN's
// client-facing server does: it decrypts the inner hello and answers for
// the name in it. It returns its port and the ECHConfigList a client
// needs, whose public name is publicName.
func echFront(t *testing.T, e *testEnv, publicName string) (uint16, []byte) {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// ECHConfig (the ECH specification, section 4): version 0xfe0d, then its contents: HPKE
	// key config (config_id, DHKEM(X25519), the public key, one suite
	// HKDF-SHA256/AES-128-GCM), maximum_name_length, public_name, no
	// extensions.
	var b cryptobyte.Builder
	b.AddUint16(0xfe0d)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint8(7)
		b.AddUint16(0x0020)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(key.PublicKey().Bytes()) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x0001); b.AddUint16(0x0001) })
		b.AddUint8(64)
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(publicName)) })
		b.AddUint16(0)
	})
	config := b.BytesOrPanic()
	var l cryptobyte.Builder
	l.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(config) })
	list := l.BytesOrPanic()

	ln, err := net.Listen("tcp", netip.AddrPortFrom(apiAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tln := tls.NewListener(ln, &tls.Config{
		GetCertificate:           e.certs.get,
		EncryptedClientHelloKeys: []tls.EncryptedClientHelloKey{{Config: config, PrivateKey: key.Bytes(), SendAsRetry: true}},
	})
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				if tc.Handshake() != nil {
					return
				}
				fmt.Fprintf(c, "front answering for %s\n", tc.ConnectionState().ServerName)
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String()).Port(), list
}

// A client with an ECH configuration of a front whose public name is
// allowed reaches any host behind the front: the proxy sees only the
// public name in the ClientHello. doorman cannot see the inner name, and
// cannot refuse every hello with ECH (Chrome sends GREASE ECH in each),
// but its decision line must say that the name it decided on came from
// a hello with ECH, on the relay loop's path and on a goroutine's.
func TestECHHelloIsOnTheDecisionLine(t *testing.T) {
	for _, path := range []struct {
		name   string
		setup  func(*Proxy)
		onLoop int64 // connections decided on the loop
	}{
		{"loop", func(*Proxy) {}, 1},
		{"goroutine", func(p *Proxy) { p.noLoop = true }, 0},
	} {
		t.Run(path.name, func(t *testing.T) {
			e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{}, path.setup)
			port, list := echFront(t, e, "api.test")
			c := e.dial(netip.AddrPortFrom(evilAddr, port))
			tc := tls.Client(c, &tls.Config{ServerName: "hidden.test", RootCAs: e.ca, EncryptedClientHelloConfigList: list})
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err := tc.Handshake(); err != nil {
				t.Fatalf("ECH handshake through the proxy: %v", err)
			}
			if !tc.ConnectionState().ECHAccepted {
				t.Fatalf("the front did not accept ECH")
			}
			line := make([]byte, 64)
			n, _ := tc.Read(line)
			if want := "front answering for hidden.test\n"; string(line[:n]) != want {
				t.Fatalf("front said %q, want %q", line[:n], want)
			}
			tc.Close()
			r := e.waitRecord(recordFor("api.test", "allow"))
			if r["ech"] != true {
				t.Errorf("decision line %v: want \"ech\": true, since the hello carried ECH and the name is only the front's", r)
			}
			if got := e.p.decidedOnLoop.Load(); got != path.onLoop {
				t.Errorf("%d connections decided on the relay loop, want %d", got, path.onLoop)
			}
		})
	}
}

// A hello without ECH has no "ech" field on its line.
func TestNoECHFieldWithoutECH(t *testing.T) {
	e := newTestEnv(t, mustPolicy(t, conf.ModeAllowlist, "api.test"), Config{})
	c := e.dial(netip.AddrPortFrom(apiAddr, e.tlsPort))
	if _, _, err := e.tlsClient(c, "api.test"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	r := e.waitRecord(recordFor("api.test", "allow"))
	if _, ok := r["ech"]; ok {
		t.Errorf("decision line %v has \"ech\" for a hello without ECH", r)
	}
}
