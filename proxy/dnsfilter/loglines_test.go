package dnsfilter

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy/internal/logtest"
)

// The dns lines are fixed to the byte: field names, order and types, the
// level of each verdict, "none" for no reply, "" for no upstream.
func TestDNSLinesGolden(t *testing.T) {
	var buf bytes.Buffer
	f := New(Config{Sandbox: "sb-golden", Logger: slog.New(slog.NewJSONHandler(&buf, nil))}, nil)
	allowed := &record{
		proto: "udp", client: netip.MustParseAddrPort("10.88.0.5:5353"),
		name: "api.example.com", qtype: "AAAA", verdict: "allow",
		rule: "*.example.com:443", reason: "name allowed", rcode: "NOERROR",
		upstream:   netip.MustParseAddrPort("198.51.100.53:53"),
		echRemoved: true, privateRemoved: 2, start: time.Now(),
	}
	denied := &record{proto: "tcp", client: netip.MustParseAddrPort("[2001:db8::5]:40000"), start: time.Now()}
	denied.name, denied.qtype, denied.rcode = "evil.example", "TXT", "REFUSED"
	denied.deny("name not allowed")
	dropped := &record{proto: "udp", client: netip.MustParseAddrPort("10.88.0.5:5354"), start: time.Now()}
	dropped.deny("not a query: the QR bit is set")
	failed := &record{
		proto: "udp", client: netip.MustParseAddrPort("10.88.0.5:5355"),
		name: "gone.example.com", qtype: "A", rule: "gone.example.com", rcode: "SERVFAIL",
		upstream: netip.MustParseAddrPort("198.51.100.54:53"), start: time.Now(),
	}
	failed.fail("no upstream answered: %s", "198.51.100.54:53: i/o timeout")
	for _, r := range []*record{allowed, denied, dropped, failed} {
		f.log(r)
	}
	logtest.Check(t, logtest.Lines(buf.String(), "duration_ms"),
		`{"level":"INFO","msg":"dns","sandbox":"sb-golden","proto":"udp","client":"10.88.0.5:5353","name":"api.example.com","qtype":"AAAA","verdict":"allow","rule":"*.example.com:443","reason":"name allowed","rcode":"NOERROR","upstream":"198.51.100.53:53","ech_removed":true,"private_removed":2,"duration_ms":_}`,
		`{"level":"WARN","msg":"dns","sandbox":"sb-golden","proto":"tcp","client":"[2001:db8::5]:40000","name":"evil.example","qtype":"TXT","verdict":"deny","rule":"","reason":"name not allowed","rcode":"REFUSED","upstream":"","ech_removed":false,"private_removed":0,"duration_ms":_}`,
		`{"level":"WARN","msg":"dns","sandbox":"sb-golden","proto":"udp","client":"10.88.0.5:5354","name":"","qtype":"","verdict":"deny","rule":"","reason":"not a query: the QR bit is set","rcode":"none","upstream":"","ech_removed":false,"private_removed":0,"duration_ms":_}`,
		`{"level":"ERROR","msg":"dns","sandbox":"sb-golden","proto":"udp","client":"10.88.0.5:5355","name":"gone.example.com","qtype":"A","verdict":"error","rule":"gone.example.com","reason":"no upstream answered: 198.51.100.54:53: i/o timeout","rcode":"SERVFAIL","upstream":"198.51.100.54:53","ech_removed":false,"private_removed":0,"duration_ms":_}`,
	)
	if f.allowed.Load() != 1 || f.denied.Load() != 2 || f.failed.Load() != 1 {
		t.Errorf("counted %d allowed, %d denied, %d failed; want 1, 2, 1", f.allowed.Load(), f.denied.Load(), f.failed.Load())
	}
}

// failingPacketConn fails its first read with err, then is closed.
type failingPacketConn struct {
	net.PacketConn
	err error
}

func (c *failingPacketConn) ReadFrom([]byte) (int, net.Addr, error) {
	if err := c.err; err != nil {
		c.err = nil
		return 0, nil, err
	}
	return 0, nil, net.ErrClosed
}

func (c *failingPacketConn) Close() error { return nil }

// failingListener fails its first Accept with err, then is closed.
type failingListener struct {
	net.Listener
	err error
}

func (l *failingListener) Accept() (net.Conn, error) {
	if err := l.err; err != nil {
		l.err = nil
		return nil, err
	}
	return nil, net.ErrClosed
}

func (l *failingListener) Close() error { return nil }

// The lines for a read and an accept that failed.
func TestServeErrorLinesGolden(t *testing.T) {
	var buf bytes.Buffer
	f := New(Config{Sandbox: "sb-golden", Logger: slog.New(slog.NewJSONHandler(&buf, nil))}, nil)
	if err := f.ServeUDP(&failingPacketConn{err: errors.New("recvmsg: no buffer space available")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("ServeUDP: %v", err)
	}
	if err := f.ServeTCP(&failingListener{err: errors.New("accept4: too many open files")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("ServeTCP: %v", err)
	}
	logtest.Check(t, logtest.Lines(buf.String()),
		`{"level":"ERROR","msg":"dns read","sandbox":"sb-golden","proto":"udp","err":"recvmsg: no buffer space available"}`,
		`{"level":"ERROR","msg":"dns accept","sandbox":"sb-golden","proto":"tcp","err":"accept4: too many open files"}`,
	)
}
