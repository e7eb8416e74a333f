package sniff

import (
	"crypto/tls"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// update rewrites the captured ClientHellos and fuzz seed corpora under
// testdata: go test ./proxy/sniff -run 'TestCapture|TestWriteFuzzSeeds' -update
var update = flag.Bool("update", false, "rewrite testdata from live captures")

// goHello is a crypto/tls client configuration whose ClientHello is
// captured into testdata/hellos/<name>.bin.
type goHello struct {
	name string
	cfg  func() *tls.Config
	want string // the SNI ServerName must return
}

var classicCurves = []tls.CurveID{tls.X25519, tls.CurveP256}

// goHellos are the configurations captured: the post-quantum default
// (X25519MLKEM768, a hello over 1.2 KB), classic key shares (a small
// hello), ALPN, TLS 1.2 only, with and without SNI.
var goHellos = []goHello{
	{"go-pq-sni", func() *tls.Config { return &tls.Config{ServerName: "example.com"} }, "example.com"},
	{"go-pq-alpn-h2", func() *tls.Config {
		return &tls.Config{ServerName: "api.example.com", NextProtos: []string{"h2", "http/1.1"}}
	}, "api.example.com"},
	{"go-pq-nosni", func() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }, ""},
	{"go-classic-sni", func() *tls.Config {
		return &tls.Config{ServerName: "www.example.org", CurvePreferences: classicCurves}
	}, "www.example.org"},
	{"go-classic-alpn-h2", func() *tls.Config {
		return &tls.Config{ServerName: "h2.example.net", CurvePreferences: classicCurves, NextProtos: []string{"h2"}}
	}, "h2.example.net"},
	{"go-classic-nosni", func() *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, CurvePreferences: classicCurves}
	}, ""},
	{"go-tls12-sni", func() *tls.Config {
		return &tls.Config{ServerName: "legacy.example.net", MaxVersion: tls.VersionTLS12}
	}, "legacy.example.net"},
	{"go-pq-mixedcase-sni", func() *tls.Config { return &tls.Config{ServerName: "MiXeD.Example.COM"} }, "mixed.example.com"},
}

// otherHellos were captured once from other clients (see testdata/hellos/README).
var otherHellos = []struct{ name, want string }{
	{"curl-openssl3", "curl.example.test"},
}

// captureHello returns the exact bytes a crypto/tls client writes first:
// the records that carry its ClientHello.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(client, cfg).Handshake() // fails once server closes
	}()
	defer func() {
		server.Close()
		client.Close()
		<-done
	}()
	var out, msg []byte
	for {
		hdr := make([]byte, recordHeaderLen)
		if _, err := io.ReadFull(server, hdr); err != nil {
			t.Fatalf("reading record header: %v", err)
		}
		body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
		if _, err := io.ReadFull(server, body); err != nil {
			t.Fatalf("reading record: %v", err)
		}
		out = append(append(out, hdr...), body...)
		msg = append(msg, body...)
		if len(msg) >= 4 && len(msg) >= 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3])) {
			return out
		}
	}
}

func helloPath(name string) string {
	return filepath.Join("testdata", "hellos", name+".bin")
}

// goldenHellos returns every committed hello with the name it carries.
func goldenHellos(t testing.TB) []struct {
	name, want string
	data       []byte
} {
	t.Helper()
	var out []struct {
		name, want string
		data       []byte
	}
	add := func(name, want string) {
		b, err := os.ReadFile(helloPath(name))
		if err != nil {
			t.Fatalf("missing captured hello (run with -update): %v", err)
		}
		out = append(out, struct {
			name, want string
			data       []byte
		}{name, want, b})
	}
	for _, h := range goHellos {
		add(h.name, h.want)
	}
	for _, h := range otherHellos {
		add(h.name, h.want)
	}
	return out
}

// TestCaptureGoHellos parses the hellos of the crypto/tls in use now, so a
// Go release that changes its hello shows up here, and with -update
// rewrites testdata/hellos.
func TestCaptureGoHellos(t *testing.T) {
	for _, h := range goHellos {
		t.Run(h.name, func(t *testing.T) {
			b := captureHello(t, h.cfg())
			got, err := ServerName(b)
			if err != nil || got != h.want {
				t.Fatalf("ServerName(live hello of %d bytes) = %q, %v; want %q", len(b), got, err, h.want)
			}
			if *update {
				if err := os.WriteFile(helloPath(h.name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestGoldenHelloSizes checks that the captures are what they claim: the
// post-quantum hellos are larger than a 1460-byte MSS (a 1500-byte MTU less
// the IPv4 and TCP headers), so they arrive in two segments; the classic
// ones are small.
func TestGoldenHelloSizes(t *testing.T) {
	for _, h := range goldenHellos(t) {
		switch {
		case strings.HasPrefix(h.name, "go-pq-") && len(h.data) <= 1460:
			t.Errorf("%s: %d bytes; a post-quantum hello should be over 1460", h.name, len(h.data))
		case strings.HasPrefix(h.name, "go-classic-") && len(h.data) > 600:
			t.Errorf("%s: %d bytes; a classic hello should be small", h.name, len(h.data))
		}
		t.Logf("%s: %d bytes", h.name, len(h.data))
	}
}

// TestWriteFuzzSeeds writes the seed corpora under testdata/fuzz with
// -update.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*update {
		t.Skip("only with -update")
	}
	write := func(fuzz, name string, data []byte) {
		dir := filepath.Join("testdata", "fuzz", fuzz)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range goldenHellos(t) {
		write("FuzzServerName", "hello-"+h.name, h.data)
		if h.name == "go-classic-sni" {
			write("FuzzServerName", "hello-"+h.name+"-split7", resplit(t, h.data, func(int) int { return 7 }))
		}
	}
	for i, r := range seedRequests {
		write("FuzzParseRequestHead", fmt.Sprintf("request-%02d", i), []byte(r))
		write("FuzzRequestReader", fmt.Sprintf("request-%02d", i), []byte(r))
	}
	write("FuzzRequestReader", "pipelined", []byte(pipelinedStream))
}
