package realdst

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// The test's namespace: a "LAN" server at lan4/lan6 port lanPort, and
// the public addresses pub4/pub6 (also on the loopback device, with
// nothing listening on pubPort) that a nat OUTPUT rule rewrites to it.
var (
	lan4 = netip.MustParseAddr("10.66.77.10")
	lan6 = netip.MustParseAddr("fdd0:7e57::10")
	pub4 = netip.MustParseAddr("203.0.113.7")
	pub6 = netip.MustParseAddr("2001:db8::7")
)

const (
	lanPort = 8443
	pubPort = 443
)

// newNS makes a network namespace holding the addresses above on its
// loopback device, with a server on lan4 and lan6, and returns it.
func newNS(t testing.TB) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Close(); testutils.UnmountNS(netns) })
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", lan4.String() + "/32", "dev", "lo"},
		{"addr", "add", pub4.String() + "/32", "dev", "lo"},
		{"addr", "add", lan6.String() + "/128", "dev", "lo", "nodad"},
		{"addr", "add", pub6.String() + "/128", "dev", "lo", "nodad"},
	} {
		cmd := exec.Command("nsenter", append([]string{"--net=" + netns.Path(), "ip"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	err = netns.Do(func(ns.NetNS) error {
		for _, a := range []netip.Addr{lan4, lan6} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, lanPort).String())
			if err != nil {
				return err
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return netns
}

// addDNAT adds `table inet realdst-test { chain out { type nat hook output
// priority -100; ip daddr pub4 tcp dport 443 dnat to lan4:8443; ip6 ...
// } }` to netns: what kube-proxy does for a service's external address.
func addDNAT(t testing.TB, netns ns.NetNS) {
	t.Helper()
	n, err := nft.OpenNetNS(netns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := n.Conn
	tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "realdst-test"})
	prio := nftables.ChainPriorityNATDest
	ch := c.AddChain(&nftables.Chain{Name: "out", Table: tbl, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: prio})
	for _, r := range []struct {
		from, to netip.Addr
		family   uint32
	}{{pub4, lan4, unix.NFPROTO_IPV4}, {pub6, lan6, unix.NFPROTO_IPV6}} {
		port := binary.BigEndian.AppendUint16(nil, lanPort)
		exprs := append(append(nft.Daddr(r.from), nft.TCP()...), nft.Dport(pubPort)...)
		exprs = append(exprs,
			&expr.Immediate{Register: 1, Data: r.to.AsSlice()},
			&expr.Immediate{Register: 2, Data: port},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: r.family, RegAddrMin: 1, RegProtoMin: 2, Specified: true})
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: exprs})
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("add the DNAT rules: %v", err)
	}
}

// dialIn connects to to from inside netns and returns the connection's
// local address.
func dialIn(t testing.TB, netns ns.NetNS, to netip.AddrPort) (netip.AddrPort, func()) {
	t.Helper()
	var c net.Conn
	err := netns.Do(func(ns.NetNS) error {
		var err error
		c, err = net.Dial("tcp", to.String())
		return err
	})
	if err != nil {
		t.Fatalf("dial %v: %v", to, err)
	}
	return netip.MustParseAddrPort(c.LocalAddr().String()), func() { c.Close() }
}

// openIn opens a Table in netns.
func openIn(t testing.TB, netns ns.NetNS) *Table {
	t.Helper()
	var tbl *Table
	err := netns.Do(func(ns.NetNS) error {
		var err error
		tbl, err = Open()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// TestDestination: a connection the host does not rewrite is its own
// destination, whether conntrack tracks the namespace or not; one a nat
// OUTPUT rule rewrote is the rule's target, for IPv4 and IPv6.
func TestDestination(t *testing.T) {
	netns := newNS(t)
	tbl := openIn(t, netns)
	lan := []netip.AddrPort{netip.AddrPortFrom(lan4, lanPort), netip.AddrPortFrom(lan6, lanPort)}
	pub := []netip.AddrPort{netip.AddrPortFrom(pub4, pubPort), netip.AddrPortFrom(pub6, pubPort)}

	// No rule uses conntrack: no entry, no rewrite.
	for _, to := range lan {
		local, done := dialIn(t, netns, to)
		real, rewritten, err := tbl.Destination(local, to)
		done()
		if err != nil || rewritten || real != to {
			t.Errorf("%v, untracked: %v, %v, %v", to, real, rewritten, err)
		}
	}
	addDNAT(t, netns)
	for i, to := range lan {
		local, done := dialIn(t, netns, to)
		real, rewritten, err := tbl.Destination(local, to)
		done()
		if err != nil || rewritten || real != to {
			t.Errorf("%v, tracked, not rewritten: %v, %v, %v", to, real, rewritten, err)
		}
		local, done = dialIn(t, netns, pub[i])
		real, rewritten, err = tbl.Destination(local, pub[i])
		done()
		if err != nil || !rewritten || real != to {
			t.Errorf("%v, rewritten: %v, %v, %v; want %v", pub[i], real, rewritten, err, to)
		}
		// The mapped form of an IPv4 socket's addresses is the same.
		if to.Addr().Is4() {
			local, done = dialIn(t, netns, pub[i])
			m := func(a netip.AddrPort) netip.AddrPort {
				return netip.AddrPortFrom(netip.AddrFrom16(a.Addr().As16()), a.Port())
			}
			real, rewritten, err = tbl.Destination(m(local), m(pub[i]))
			done()
			if err != nil || !rewritten || real != to {
				t.Errorf("%v mapped, rewritten: %v, %v, %v; want %v", pub[i], real, rewritten, err, to)
			}
		}
	}
	if _, _, err := tbl.Destination(netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("[2001:db8::1]:2")); err == nil {
		t.Error("mixed families: no error")
	}
	tbl.Close()
	if _, _, err := tbl.Destination(netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}

// TestDecodeReply: what the kernel may answer, and malformed answers.
func TestDecodeReply(t *testing.T) {
	msg := func(typ uint16, seq uint32, body []byte) []byte {
		b := binary.NativeEndian.AppendUint32(nil, uint32(nlmsgHdrLen+len(body)))
		b = binary.NativeEndian.AppendUint16(b, typ)
		b = binary.NativeEndian.AppendUint16(b, 0)
		b = binary.NativeEndian.AppendUint32(b, seq)
		b = binary.NativeEndian.AppendUint32(b, 0)
		return append(b, body...)
	}
	errBody := func(errno int32) []byte { return binary.NativeEndian.AppendUint32(make([]byte, 0, 20), uint32(-errno)) }
	if _, _, seq, err := decodeReply(msg(unix.NLMSG_ERROR, 7, errBody(int32(unix.ENOENT))), true); !errors.Is(err, unix.ENOENT) || seq != 7 {
		t.Errorf("ENOENT: %v, seq %d", err, seq)
	}
	if _, _, _, err := decodeReply(msg(unix.NLMSG_ERROR, 7, errBody(int32(unix.EPERM))), true); !errors.Is(err, unix.EPERM) {
		t.Errorf("EPERM: %v", err)
	}
	// A reply whose reply tuple is 10.66.77.10:8443 -> 198.51.100.2:40000,
	// built as encodeGet builds a tuple.
	get := encodeGet(nil, 9, netip.MustParseAddrPort("10.66.77.10:8443"), netip.MustParseAddrPort("198.51.100.2:40000"))
	tuple := append([]byte(nil), get[nlmsgHdrLen+nfgenLen:]...)
	binary.NativeEndian.PutUint16(tuple[2:], ctaTupleReply|nlaNested)
	body := append([]byte{unix.AF_INET, 0, 0, 0}, tuple...)
	found, src, seq, err := decodeReply(msg(nfnlSubsysCTNetlink<<8|ctMsgNew, 9, body), true)
	if err != nil || !found || seq != 9 || src != netip.MustParseAddrPort("10.66.77.10:8443") {
		t.Errorf("entry: %v %v %d %v", found, src, seq, err)
	}
	for name, b := range map[string][]byte{
		"short":          {1, 2, 3},
		"bad length":     append(msg(nfnlSubsysCTNetlink<<8|ctMsgNew, 9, body)[:nlmsgHdrLen], 0),
		"other type":     msg(0x0203, 9, body),
		"short error":    msg(unix.NLMSG_ERROR, 9, []byte{1}),
		"ack":            msg(unix.NLMSG_ERROR, 9, errBody(0)),
		"truncated body": msg(nfnlSubsysCTNetlink<<8|ctMsgNew, 9, body[:len(body)-6]),
	} {
		if found, _, _, err := decodeReply(b, true); err == nil && found {
			t.Errorf("%s: found an entry", name)
		}
	}
	// An IPv6 question answered with an IPv4 tuple has no source.
	if _, _, _, err := decodeReply(msg(nfnlSubsysCTNetlink<<8|ctMsgNew, 9, body), false); err == nil {
		t.Error("family mismatch: no error")
	}
}

// FuzzDecodeReply: whatever the bytes, decodeReply neither panics nor
// returns an entry with an invalid address.
func FuzzDecodeReply(f *testing.F) {
	get := encodeGet(nil, 1, netip.MustParseAddrPort("10.66.77.10:8443"), netip.MustParseAddrPort("198.51.100.2:40000"))
	f.Add(get, true)
	f.Add(encodeGet(nil, 1, netip.MustParseAddrPort("[fdd0::1]:8443"), netip.MustParseAddrPort("[2001:db8::2]:40000")), false)
	f.Fuzz(func(t *testing.T, b []byte, v4 bool) {
		found, src, _, err := decodeReply(b, v4)
		if found && (err != nil || !src.Addr().IsValid() || src.Addr().Is4() != v4) {
			t.Fatalf("found %v %v", src, err)
		}
	})
}

// BenchmarkLookup is the cost of one lookup of a tracked, rewritten
// connection: what the proxy adds to each upstream connection (with
// getsockname on the relay loop).
func BenchmarkLookup(b *testing.B) {
	netns := newNS(b)
	addDNAT(b, netns)
	to := netip.AddrPortFrom(pub4, pubPort)
	local, done := dialIn(b, netns, to)
	defer done()
	tbl := openIn(b, netns)
	b.ReportAllocs()
	for b.Loop() {
		if _, rw, err := tbl.Destination(local, to); err != nil || !rw {
			b.Fatal(rw, err)
		}
	}
}
