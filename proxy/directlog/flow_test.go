package directlog

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy"
)

func entries(t *testing.T, raw ...string) []conf.Entry {
	t.Helper()
	var out []conf.Entry
	for _, r := range raw {
		e, err := conf.ParseEntry(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// flow builds a conntrack flow from src to dst whose reply comes from
// replySrc (dst unless NAT rewrote it).
func flow(proto uint8, src, dst, replySrc string) *conntrack.Flow {
	s, d, r := netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), netip.MustParseAddrPort(replySrc)
	var f conntrack.Flow
	f.TupleOrig.IP.SourceAddress, f.TupleOrig.IP.DestinationAddress = s.Addr(), d.Addr()
	f.TupleOrig.Proto = conntrack.ProtoTuple{Protocol: proto, SourcePort: s.Port(), DestinationPort: d.Port()}
	f.TupleReply.IP.SourceAddress, f.TupleReply.IP.DestinationAddress = r.Addr(), s.Addr()
	f.TupleReply.Proto = conntrack.ProtoTuple{Protocol: proto, SourcePort: r.Port(), DestinationPort: s.Port()}
	return &f
}

func TestDirectRecord(t *testing.T) {
	es := entries(t, "203.0.113.7:5432", "198.51.100.0/24:8000-8999", "[2001:db8::1]:443", "example.com", "203.0.113.0/24")
	const client = "10.88.0.5:40000"
	tests := []struct {
		name  string
		f     *conntrack.Flow
		proto string // "" if not logged
		rule  string
	}{
		{"tcp to an address entry", flow(unix.IPPROTO_TCP, client, "203.0.113.7:5432", "203.0.113.7:5432"), "tcp", "203.0.113.7:5432"},
		{"udp to the same entry", flow(unix.IPPROTO_UDP, client, "203.0.113.7:5432", "203.0.113.7:5432"), "udp", "203.0.113.7:5432"},
		{"cidr and port range", flow(unix.IPPROTO_TCP, client, "198.51.100.9:8080", "198.51.100.9:8080"), "tcp", "198.51.100.0/24:8000-8999"},
		{"any port of a cidr", flow(unix.IPPROTO_UDP, client, "203.0.113.200:9", "203.0.113.200:9"), "udp", "203.0.113.0/24"},
		{"ipv6", flow(unix.IPPROTO_TCP, "[2001:db8:1::5]:40000", "[2001:db8::1]:443", "[2001:db8::1]:443"), "tcp", "[2001:db8::1]:443"},
		{"port outside the range", flow(unix.IPPROTO_TCP, client, "198.51.100.9:9000", "198.51.100.9:9000"), "", ""},
		{"no entry for the address", flow(unix.IPPROTO_TCP, client, "192.0.2.1:5432", "192.0.2.1:5432"), "", ""},
		{"redirected to the proxy", flow(unix.IPPROTO_TCP, client, "203.0.113.7:5432", "127.0.0.1:41000"), "", ""},
		{"redirected, same address other port", flow(unix.IPPROTO_TCP, client, "203.0.113.7:5432", "203.0.113.7:41000"), "", ""},
		{"not tcp or udp", flow(unix.IPPROTO_SCTP, client, "203.0.113.7:5432", "203.0.113.7:5432"), "", ""},
	}
	now := time.Now()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, ok := directRecord("sb1", tt.f, es, now)
			if ok != (tt.proto != "") {
				t.Fatalf("logged = %v, want %v (%+v)", ok, !ok, rec)
			}
			if !ok {
				return
			}
			want := proxy.Record{
				Sandbox: "sb1", Proto: tt.proto, Rule: tt.rule, Verdict: proxy.Allow, Reason: "allowDirect", Start: now,
				Client: netip.AddrPortFrom(tt.f.TupleOrig.IP.SourceAddress, tt.f.TupleOrig.Proto.SourcePort),
				Dst:    netip.AddrPortFrom(tt.f.TupleOrig.IP.DestinationAddress, tt.f.TupleOrig.Proto.DestinationPort),
			}
			if rec != want {
				t.Errorf("record\n got %+v\nwant %+v", rec, want)
			}
		})
	}
}

// Name entries cannot admit a flow without a name: a sandbox with only
// those gets no socket, and Run returns at once.
func TestNoAddressEntriesNoSocket(t *testing.T) {
	w, err := Open(Config{Sandbox: "sb1", Entries: entries(t, "example.com", "*.example.org:443"), NetNS: -1})
	if err != nil {
		t.Fatal(err)
	}
	if w.events != nil || w.addrs != nil {
		t.Fatal("opened sockets without address entries")
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(t.Context()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("Run did not return at once")
	}
}

func TestOpenNeedsNetNS(t *testing.T) {
	if _, err := Open(Config{Sandbox: "sb1", Entries: entries(t, "203.0.113.7"), NetNS: -1}); err == nil {
		t.Fatal("want an error without a namespace")
	}
}
