package realdst

import (
	"net/netip"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/ti-mo/conntrack"
)

// benchmarkLibraryGet looks the connection local -> to up with
// ti-mo/conntrack's Conn.Get, opened in netns.
func benchmarkLibraryGet(b *testing.B, netns ns.NetNS, local, to netip.AddrPort) {
	var c *conntrack.Conn
	if err := netns.Do(func(ns.NetNS) error {
		var err error
		c, err = conntrack.Dial(nil)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var f conntrack.Flow
	f.TupleOrig.IP.SourceAddress, f.TupleOrig.IP.DestinationAddress = local.Addr(), to.Addr()
	f.TupleOrig.Proto.Protocol, f.TupleOrig.Proto.SourcePort, f.TupleOrig.Proto.DestinationPort = 6, local.Port(), to.Port()
	b.ReportAllocs()
	for b.Loop() {
		got, err := c.Get(f)
		if err != nil || got.TupleReply.IP.SourceAddress != lan4 {
			b.Fatal(got.TupleReply, err)
		}
	}
}
