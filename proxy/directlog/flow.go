package directlog

import (
	"net/netip"
	"time"

	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// Reason is the reason field of every line this package writes.
const Reason = decisionlog.ReasonAllowDirect

// protoNames are the protocols the sandbox's ruleset lets out directly to
// allowDirect destinations, by IP protocol number.
var protoNames = map[uint8]string{
	unix.IPPROTO_TCP: "tcp",
	unix.IPPROTO_UDP: "udp",
}

// directRecord returns the decision line for conntrack flow f if it is an
// allowDirect flow: TCP or UDP, not redirected (the reply comes from the
// original destination, so no NAT sent it to the proxy or the DNS filter),
// and its original destination matched by one of entries (the first that
// matches is the rule). Start is now.
func directRecord(sandbox string, f *conntrack.Flow, entries []conf.Entry, now time.Time) (proxy.Record, bool) {
	orig, reply := f.TupleOrig, f.TupleReply
	proto, ok := protoNames[orig.Proto.Protocol]
	if !ok {
		return proxy.Record{}, false
	}
	dst := netip.AddrPortFrom(orig.IP.DestinationAddress, orig.Proto.DestinationPort)
	if !dst.Addr().IsValid() || reply.IP.SourceAddress != dst.Addr() || reply.Proto.SourcePort != dst.Port() {
		return proxy.Record{}, false
	}
	for _, e := range entries {
		if e.MatchAddr(dst.Addr(), dst.Port()) {
			return proxy.Record{
				Sandbox: sandbox,
				Client:  netip.AddrPortFrom(orig.IP.SourceAddress, orig.Proto.SourcePort),
				Dst:     dst,
				Proto:   proto,
				Rule:    e.String(),
				Verdict: proxy.Allow,
				Reason:  Reason,
				Start:   now,
			}, true
		}
	}
	return proxy.Record{}, false
}
