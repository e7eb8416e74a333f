package integration

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"

	"github.com/doorman-net/doorman/integration/testnet"
)

// escapeWorld is the fake internet an escape probe aims at: api is
// allowed by every sandbox's policy, evil and other are not; and what lies
// around the sandbox: the host's LAN (private addresses that the policy's
// wildcard zone rebinds to), a neighbour sandbox on the same bridge, and
// the runtime's namespace.
type escapeWorld struct {
	net              *testnet.Net
	api, evil, other *testnet.Host
	icmp             *testnet.ICMPRecorder // in the fake internet

	lan     []*testnet.Host       // the host's LAN (AddLANHost)
	lanICMP *testnet.ICMPRecorder // in the LAN's namespace
	// rebind are names under rebindZone whose DNS answers private
	// addresses: the LAN's and the neighbour's.
	rebind []string
	// rebindNAT64 are names under rebindZone whose DNS answers a LAN
	// address in the local-use NAT64 prefix, and nat64 those addresses
	// (see escapeNAT64LAN).
	rebindNAT64 []string
	nat64       []netip.Addr
	nbr         *escapeNeighbour
	runtime     *escapeRuntime
}

// escapeNeighbour is a second sandbox on the attacker's bridge, with the
// fake internet's servers on its addresses, so that the test counts what
// reaches it, and what of its traffic goes astray.
type escapeNeighbour struct {
	ns           *testnet.Netns
	addr4, addr6 netip.Addr // addr6 is invalid where the bridge has no IPv6
	mac          net.HardwareAddr
	host         *testnet.Host
	icmp         *testnet.ICMPRecorder
}

// escapeRuntime is the namespace where the sandboxes' proxies and host-side
// layers live, and the bridge the sandboxes are attached to there.
type escapeRuntime struct {
	ns     *testnet.Netns
	bridge string
	icmp   *testnet.ICMPRecorder // on the bridge only
}

// counterKey names one counter of the fake internet: what arrived where,
// in which unit.
type counterKey struct {
	where string // "evil.example.test tcp/9000", "rogue DNS", ...
	unit  string // bytes, connections, datagrams, queries, requests
}

// counters is a reading (or a difference of readings) of the fake
// internet's counters.
type counters map[counterKey]int

// Units in the order a table cell lists them, and their singulars.
var (
	counterUnits    = []string{"bytes", "connections", "datagrams", "packets", "frames", "queries", "requests", "entries", "routes", "addresses"}
	counterSingular = map[string]string{"entries": "entry", "addresses": "address"}
)

// The TCP and UDP ports every testnet host counts (testnet/host.go).
var (
	countedTCPPorts = []int{testnet.PortHTTP, testnet.PortHTTPAlt, testnet.PortHTTPS, testnet.PortHTTPSAlt,
		testnet.PortSSH, testnet.PortPostgres, testnet.PortRecorder, testnet.PortRedis}
	countedUDPPorts = []int{testnet.PortHTTPS, testnet.PortUDPEcho}
)

func tcpKey(h *testnet.Host, port int, unit string) counterKey {
	return counterKey{fmt.Sprintf("%s tcp/%d", h.Name(), port), unit}
}

func udpKey(h *testnet.Host, port int, unit string) counterKey {
	return counterKey{fmt.Sprintf("%s udp/%d", h.Name(), port), unit}
}

// requestsKey counts the HTTP requests that reached h asking for the
// virtual host name.
func requestsKey(h *testnet.Host, name string) counterKey {
	if name == "" {
		name = "(no Host)"
	}
	return counterKey{fmt.Sprintf("%s HTTP for %s", h.Name(), name), "requests"}
}

// ICMP requests that can carry a tunnel's payload: echo, timestamp,
// information and address-mask (RFC 792, 950), and ICMPv6 echo (RFC 4443).
var (
	icmpRequestTypes   = []int{8, 13, 15, 17}
	icmpv6RequestTypes = []int{128}
)

// icmpv6RouterAdvert is the router advertisement's type (RFC 4861).
const icmpv6RouterAdvert = 134

// icmpCounters adds r's requests (messages and payload bytes) under where,
// and its router advertisements under where+" router advertisements".
func icmpCounters(c counters, r *testnet.ICMPRecorder, where string) {
	for _, typ := range icmpRequestTypes {
		m, b := r.ICMP(typ)
		c[counterKey{where + " ICMP requests", "packets"}] += m
		c[counterKey{where + " ICMP requests", "bytes"}] += b
	}
	for _, typ := range icmpv6RequestTypes {
		m, b := r.ICMPv6(typ)
		c[counterKey{where + " ICMP requests", "packets"}] += m
		c[counterKey{where + " ICMP requests", "bytes"}] += b
	}
	m, _ := r.ICMPv6(icmpv6RouterAdvert)
	c[counterKey{where + " router advertisements", "packets"}] = m
}

// snapshot reads every counter: bytes and connections on each TCP port of
// each host, datagrams and bytes on each UDP port, HTTP requests, queries
// that reached the rogue DNS servers, and queries (and the bytes of their
// names) that reached any DNS server under the tunnel zone. The resolver's
// other queries are not counted: the proxies resolve allowed names there.
// Call it from the test's goroutine.
func (w escapeWorld) snapshot() counters {
	c := counters{}
	hosts := append([]*testnet.Host{w.api, w.evil, w.other}, w.lan...)
	if w.nbr != nil {
		hosts = append(hosts, w.nbr.host)
	}
	for _, h := range hosts {
		for _, p := range countedTCPPorts {
			c[tcpKey(h, p, "bytes")] = h.Received(p)
			c[tcpKey(h, p, "connections")] = h.Connections(p)
		}
		for _, p := range countedUDPPorts {
			c[udpKey(h, p, "bytes")] = h.UDPReceived(p)
			c[udpKey(h, p, "datagrams")] = h.UDPDatagrams(p)
		}
		for name, n := range h.RequestHosts() {
			c[requestsKey(h, name)] = n
		}
	}
	if w.icmp != nil {
		icmpCounters(c, w.icmp, "fake internet")
	}
	if w.lanICMP != nil {
		icmpCounters(c, w.lanICMP, "LAN")
	}
	if w.nbr != nil {
		icmpCounters(c, w.nbr.icmp, "neighbour "+w.nbr.host.Name())
	}
	if w.runtime != nil && w.runtime.icmp != nil {
		icmpCounters(c, w.runtime.icmp, "runtime namespace's "+w.runtime.bridge)
	}
	n := w.net
	c[counterKey{"rogue DNS", "queries"}] = n.QueriesSeen(n.RogueDNS) + n.QueriesSeen(n.RogueDNS6)
	c[counterKey{testnet.TunnelZone, "queries"}] = n.TunnelQueries()
	nameBytes := 0
	for _, name := range n.TunnelNames() {
		nameBytes += len(name)
	}
	c[counterKey{testnet.TunnelZone, "bytes"}] = nameBytes
	return c
}

// settledSnapshot waits until the counters stop moving (packets still on
// their way arrive) for up to a second and a half, and returns them.
func (w escapeWorld) settledSnapshot() counters {
	prev := w.snapshot()
	deadline := time.Now().Add(1500 * time.Millisecond)
	for {
		time.Sleep(100 * time.Millisecond)
		cur := w.snapshot()
		if maps.Equal(cur, prev) || time.Now().After(deadline) {
			return cur
		}
		prev = cur
	}
}

// since returns what grew from before to c, less allowed (traffic the
// policy admits), and without the counters in skip.
func (c counters) since(before counters, allowed counters, skip func(counterKey) bool) counters {
	out := counters{}
	for k, v := range c {
		if skip != nil && skip(k) {
			continue
		}
		if d := v - before[k] - allowed[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// totals sums the counters by unit.
func (c counters) totals() map[string]int {
	t := map[string]int{}
	for k, v := range c {
		t[k.unit] += v
	}
	return t
}

// zero reports whether nothing arrived.
func (c counters) zero() bool {
	for _, v := range c {
		if v != 0 {
			return false
		}
	}
	return true
}

// summary is "0 bytes" or what arrived, e.g. "31 bytes, 1 connection"
// or "1 request".
func (c counters) summary() string {
	if c.zero() {
		return "0 bytes"
	}
	t := c.totals()
	var parts []string
	for _, u := range counterUnits {
		if n := t[u]; n != 0 {
			unit := u
			if n == 1 {
				unit = strings.TrimSuffix(u, "s")
				if s, ok := counterSingular[u]; ok {
					unit = s
				}
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, unit))
		}
	}
	return strings.Join(parts, ", ")
}

// where lists the places that received something, e.g.
// "evil.example.test tcp/9000: 31 bytes, 1 connection".
func (c counters) where() string {
	byPlace := map[string]counters{}
	for k, v := range c {
		if byPlace[k.where] == nil {
			byPlace[k.where] = counters{}
		}
		byPlace[k.where][k] = v
	}
	var out []string
	for _, place := range slices.Sorted(maps.Keys(byPlace)) {
		out = append(out, place+": "+byPlace[place].summary())
	}
	return strings.Join(out, "; ")
}

// defaultMarks are packet marks that exemptions commonly use, tried in
// addition to those found in the rulesets: low bits, kube-proxy's
// masquerade and drop marks (0x4000, 0x8000), istio's 1337 (0x539), Cilium's
// and Calico's high bits, and all ones.
var defaultMarks = []uint32{0x1, 0x2, 0xff, 0x100, 0x539, 0x4000, 0x8000, 0xa00, 0xe00, 0x100000, 0xffff0000, 0xffffffff}

// maxMarks bounds how many marks the probe tries.
const maxMarks = 64

// rulesetMarks returns every packet or conntrack mark value that the
// nftables rulesets of the network namespaces at nsPaths compare against,
// mask with or set (meta mark, ct mark, iptables-nft's mark and connmark
// matches and MARK and CONNMARK targets, and the elements of sets such
// values are looked up in). Namespaces that cannot be read are reported in
// the error but do not stop the others; empty paths are skipped.
func rulesetMarks(nsPaths ...string) ([]uint32, error) {
	found := map[uint32]bool{}
	var errs []string
	for _, p := range nsPaths {
		if p == "" {
			continue
		}
		if err := marksIn(p, found); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", p, err))
		}
	}
	delete(found, 0)
	marks := slices.Sorted(maps.Keys(found))
	if len(errs) > 0 {
		return marks, fmt.Errorf("read rulesets: %s", strings.Join(errs, "; "))
	}
	return marks, nil
}

// probeMarks is found and defaultMarks, without duplicates, at most
// maxMarks of them (found first).
func probeMarks(found []uint32) []uint32 {
	out := slices.Clone(found)
	for _, m := range defaultMarks {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if len(out) > maxMarks {
		out = out[:maxMarks]
	}
	return out
}

func marksIn(nsPath string, found map[uint32]bool) error {
	return nftIn(nsPath, func(c *nftables.Conn) error {
		chains, err := c.ListChains()
		if err != nil {
			return err
		}
		for _, ch := range chains {
			rules, err := c.GetRules(ch.Table, ch)
			if err != nil {
				return fmt.Errorf("rules of %s %s: %w", ch.Table.Name, ch.Name, err)
			}
			for _, r := range rules {
				marksInRule(c, ch.Table, r.Exprs, found)
			}
		}
		return nil
	})
}

// marksInRule follows the registers that hold a mark through one rule.
func marksInRule(c *nftables.Conn, table *nftables.Table, exprs []expr.Any, found map[uint32]bool) {
	add := func(b []byte) {
		if len(b) == 4 {
			found[binaryutil.NativeEndian.Uint32(b)] = true
		}
	}
	holdsMark := map[uint32]bool{}
	loaded := map[uint32][]byte{} // register → immediate data
	for _, e := range exprs {
		switch e := e.(type) {
		case *expr.Meta:
			if e.Key != expr.MetaKeyMARK {
				continue
			}
			if e.SourceRegister {
				add(loaded[e.Register]) // meta mark set
			} else {
				holdsMark[e.Register] = true
			}
		case *expr.Ct:
			if e.Key != expr.CtKeyMARK {
				continue
			}
			if e.SourceRegister {
				add(loaded[e.Register])
			} else {
				holdsMark[e.Register] = true
			}
		case *expr.Immediate:
			loaded[e.Register] = e.Data
		case *expr.Bitwise:
			if holdsMark[e.SourceRegister] {
				add(e.Mask)
				add(e.Xor)
				holdsMark[e.DestRegister] = true
			}
		case *expr.Cmp:
			if holdsMark[e.Register] {
				add(e.Data)
			}
		case *expr.Range:
			if holdsMark[e.Register] {
				add(e.FromData)
				add(e.ToData)
			}
		case *expr.Lookup:
			if !holdsMark[e.SourceRegister] {
				continue
			}
			if set, err := c.GetSetByName(table, e.SetName); err == nil {
				if elems, err := c.GetSetElements(set); err == nil {
					for _, el := range elems {
						add(el.Key)
					}
				}
			}
		case *expr.Match:
			if e.Name == "mark" || e.Name == "connmark" {
				addXtMarkInfo(e.Info, add)
			}
		case *expr.Target:
			if e.Name == "MARK" || e.Name == "CONNMARK" {
				addXtMarkInfo(e.Info, add)
			}
		}
	}
}

// addXtMarkInfo reads the mark and mask at the start of an xtables mark
// info (xt_mark_mtinfo1, xt_mark_tginfo2, xt_connmark_*: two u32 first).
func addXtMarkInfo(info xt.InfoAny, add func([]byte)) {
	u, ok := info.(*xt.Unknown)
	if !ok || len(*u) < 8 {
		return
	}
	add((*u)[0:4])
	add((*u)[4:8])
}
