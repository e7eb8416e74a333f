package hostlayer

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce/nft"
)

// TableName is the name of the layer's two tables (families inet and
// bridge) in the runtime's namespace. It is not "doorman": that name marks
// a sandbox's own namespace (see package enforce).
const TableName = "doorman-host"

// Names of the tables of the redirect (see redirect.go): their own, so
// that each keeps one chain per sandbox, named as in the other two.
const (
	// RedirectTableName is table inet doorman-host-nat: the redirect of
	// what a sandbox sends past its own ruleset to its proxy's host-side
	// listeners.
	RedirectTableName = "doorman-host-nat"
	// ListenTableName is table inet doorman-host-listen: those
	// listeners' guard, which drops what reaches them unredirected.
	ListenTableName = "doorman-host-listen"
)

const (
	// chainPrefix starts the name of every sandbox chain.
	chainPrefix = "sbx-"
	// dnsPort is the port resolvers are queried on, over UDP and TCP.
	dnsPort = 53
)

// Names of the sets and maps.
const (
	setIfaces      = "sandboxes"         // iface_index : verdict (both tables)
	setMACs        = "sandbox-macs"      // iface_index . ether_addr : verdict (inet)
	setUnfiltered4 = "unfiltered-ip"     // iface_index (bridge)
	setUnfiltered6 = "unfiltered-ip6"    // iface_index (bridge)
	setAddrs4      = "sandbox-ip"        // iface_index . ipv4_addr (both tables)
	setAddrs6      = "sandbox-ip6"       // iface_index . ipv6_addr (both tables)
	setPorts       = "sandbox-ports"     // iface_index (bridge)
	setPortMACs    = "sandbox-port-macs" // iface_index . ether_addr (bridge)
	setIsolated    = "isolated-ports"    // iface_index (bridge): ports whose isolation the layer turned on
	setPortLogs    = "port-logs"         // iface_index : verdict (bridge): sandbox port -> jump log-<key>
)

// Base chain priorities. inet: after conntrack (-200) has attached its
// entry and before destination NAT (-100) rewrites the address, as nft's
// "mangle". bridge: nft's "filter", before br_netfilter (0) hands IP frames
// to the inet hooks.
var (
	inetPriority   = nftables.ChainPriorityMangle
	bridgePriority = nftables.ChainPriorityRef(-200)
)

// typeIfaceMAC is the key of the MAC map: the bridge's interface index and
// the sandbox's MAC address, as `meta iif . ether saddr` loads them.
// typeIfaceAddr4 and typeIfaceAddr6 are the keys of the address sets: the
// index of the interface a sandbox's packets come in on and one of its
// addresses there.
var (
	typeIfaceMAC   = nftables.MustConcatSetType(nftables.TypeIFIndex, nftables.TypeEtherAddr)
	typeIfaceAddr4 = nftables.MustConcatSetType(nftables.TypeIFIndex, nftables.TypeIPAddr)
	typeIfaceAddr6 = nftables.MustConcatSetType(nftables.TypeIFIndex, nftables.TypeIP6Addr)
)

// setSpec is a set or map of a table.
type setSpec struct {
	name    string
	keyType nftables.SetDatatype
	// verdicts makes it a verdict map, whose elements jump to sandbox
	// chains; otherwise it is a plain set of interface indexes.
	verdicts bool
}

// baseSpec is a chain of a table and its rules, shared by all sandboxes:
// a base chain, or a regular chain that sandbox chains jump to (hook nil).
type baseSpec struct {
	name     string
	ctype    nftables.ChainType  // "": filter
	hook     *nftables.ChainHook // nil: a regular chain
	priority *nftables.ChainPriority
	rules    []nft.RuleSpec
}

// element is one element of a set or map: its key and, in a verdict map,
// the chain it jumps to ("" if its verdict is anything else).
type element struct {
	key   []byte
	chain string
}

// layout is one of the two tables: its shared skeleton and what each
// sandbox adds to it.
type layout struct {
	table *nftables.Table
	sets  []setSpec
	bases []baseSpec
	// rules builds the sandbox chain of a normalized spec.
	rules func(s Spec, ifaces []hostIface) []nft.RuleSpec
	// elements builds the sandbox's elements of a normalized spec, by
	// set name.
	elements func(chain string, s Spec, ifaces []hostIface) map[string][]element
	// setIDs numbers the table's sets in a batch (see stageApply): unique
	// per table, as two tables of a family change in one batch.
	setIDs uint32
}

func layouts() []layout {
	return []layout{inetLayout(), bridgeLayout(), redirectLayout(), listenLayout()}
}

// sandboxRules is the sandbox chain of l for s, every drop counting what
// it drops (see counted).
func (l layout) sandboxRules(s Spec, ifaces []hostIface) []nft.RuleSpec {
	return counted(l.rules(s, ifaces), s.Key)
}

// logs reports whether l's sandbox chains drop anything, and so whether
// it has log chains.
func (l layout) logs(s Spec, ifaces []hostIface) bool {
	return hasDrops(l.rules(s, ifaces))
}

func (l layout) logChain(key string) *nftables.Chain {
	return &nftables.Chain{Name: logChainName(key), Table: l.table}
}

func (l layout) String() string {
	if l.table.Family == nftables.TableFamilyBridge {
		return "table bridge " + l.table.Name
	}
	return "table inet " + l.table.Name
}

func (l layout) set(s setSpec) *nftables.Set {
	set := &nftables.Set{Table: l.table, Name: s.name, KeyType: s.keyType, KeyByteOrder: binaryutil.NativeEndian}
	if s.verdicts {
		set.IsMap, set.DataType = true, nftables.TypeVerdict
	}
	return set
}

func (l layout) baseChain(b baseSpec) *nftables.Chain {
	if b.hook == nil {
		return &nftables.Chain{Name: b.name, Table: l.table}
	}
	ctype := b.ctype
	if ctype == "" {
		ctype = nftables.ChainTypeFilter
	}
	return &nftables.Chain{Name: b.name, Table: l.table, Type: ctype,
		Hooknum: b.hook, Priority: b.priority, Policy: ptr(nftables.ChainPolicyAccept)}
}

// compareShared returns nil if got, an installed chain, is shared chain b
// as Apply installs it: a base chain of its type, hook, priority and
// policy, or a regular chain.
func (l layout) compareShared(b baseSpec, got *nftables.Chain) error {
	if b.hook == nil {
		if got.Hooknum != nil {
			return fmt.Errorf("chain %q is a base chain, want a regular one", b.name)
		}
		return nil
	}
	return nft.CompareBaseChain(l.baseChain(b), got)
}

func (l layout) sandboxChain(key string) *nftables.Chain {
	return &nftables.Chain{Name: chainName(key), Table: l.table}
}

func ptr[T any](v T) *T { return &v }

// inetLayout is table inet doorman-host, which judges every IP packet from
// a sandbox, statefully. A routed interface is recognized by its index;
// a bridge port's packets reach the IP layer with the bridge as input
// interface (with or without br_netfilter), so they are recognized by the
// bridge and their source MAC, which table bridge doorman-host pins to
// the sandbox's on the port.
func inetLayout() layout {
	return layout{
		table: &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet},
		sets: []setSpec{
			{name: setIfaces, keyType: nftables.TypeIFIndex, verdicts: true},
			{name: setMACs, keyType: typeIfaceMAC, verdicts: true},
			{name: setAddrs4, keyType: typeIfaceAddr4},
			{name: setAddrs6, keyType: typeIfaceAddr6},
			{name: setLogGroups, keyType: nftables.TypeInetService, verdicts: true},
		},
		bases: []baseSpec{{name: "prerouting", hook: nftables.ChainHookPrerouting, priority: inetPriority, rules: []nft.RuleSpec{
			nft.Rule("routed sandbox interfaces go to their chains", dispatchIface(setIfaces)),
			nft.Rule("bridged sandboxes go to their chains by bridge and source mac", dispatchIfaceMAC(setMACs)),
		}}},
		rules: inetRules,
		elements: func(chain string, s Spec, ifaces []hostIface) map[string][]element {
			els := dispatchElements(chain, ifaces)
			for _, i := range ifaces {
				if i.bridge == "" {
					addAddrElements(els, i)
				}
			}
			els[setLogGroups] = []element{{key: logGroupKey(s.logGroup), chain: chain}}
			return els
		},
		setIDs: 1 << 8,
	}
}

// dispatchElements are the elements of maps setIfaces and setMACs that
// send the packets of a sandbox's interfaces to its chain: a routed
// interface by its index, a bridge port by the bridge and the sandbox's
// MAC.
func dispatchElements(chain string, ifaces []hostIface) map[string][]element {
	els := map[string][]element{}
	for _, i := range ifaces {
		if i.bridge == "" {
			els[setIfaces] = append(els[setIfaces], element{key: ifIndexKey(i.index), chain: chain})
		} else {
			els[setMACs] = append(els[setMACs], element{key: ifaceMACKey(i.bridgeIndex, i.mac), chain: chain})
		}
	}
	return els
}

// bridgeLayout is table bridge doorman-host, on the bridge ports: it pins
// the source MAC and lets only ARP and untagged IP through to the inet
// table, ARP and neighbour discovery in the shapes of shape.go only; it
// drops every frame from one sandbox's port to another's, and bridged IP
// whose family br_netfilter does not pass through the inet hooks (which
// alone could judge it).
func bridgeLayout() layout {
	return layout{
		table: &nftables.Table{Name: TableName, Family: nftables.TableFamilyBridge},
		sets: []setSpec{
			{name: setIfaces, keyType: nftables.TypeIFIndex, verdicts: true},
			{name: setUnfiltered4, keyType: nftables.TypeIFIndex},
			{name: setUnfiltered6, keyType: nftables.TypeIFIndex},
			{name: setAddrs4, keyType: typeIfaceAddr4},
			{name: setAddrs6, keyType: typeIfaceAddr6},
			{name: setPorts, keyType: nftables.TypeIFIndex},
			{name: setPortMACs, keyType: typeIfaceMAC},
			{name: setIsolated, keyType: nftables.TypeIFIndex},
			{name: setPortLogs, keyType: nftables.TypeIFIndex, verdicts: true},
		},
		bases: []baseSpec{
			{name: chainARPShape, rules: arpShapeRules()},
			{name: chainNDShape, rules: ndShapeRules()},
			{name: "prerouting", hook: nftables.ChainHookPrerouting, priority: bridgePriority, rules: []nft.RuleSpec{
				nft.Rule("sandbox ports go to their chains", dispatchIface(setIfaces)),
			}},
			{name: "forward", hook: nftables.ChainHookForward, priority: bridgePriority,
				rules: append(sharedPortDrops(), floodedToSandbox())},
			{name: "output", hook: nftables.ChainHookOutput, priority: bridgePriority, rules: []nft.RuleSpec{
				floodedToSandbox(),
			}},
		},
		rules:  func(_ Spec, ifaces []hostIface) []nft.RuleSpec { return bridgeRules(ifaces) },
		setIDs: 2 << 8,
		elements: func(chain string, s Spec, ifaces []hostIface) map[string][]element {
			els := map[string][]element{}
			for _, i := range ifaces {
				if i.bridge == "" {
					continue
				}
				els[setIfaces] = append(els[setIfaces], element{key: ifIndexKey(i.index), chain: chain})
				addAddrElements(els, i)
				els[setPorts] = append(els[setPorts], element{key: ifIndexKey(i.index)})
				els[setPortMACs] = append(els[setPortMACs], element{key: ifaceMACKey(i.index, i.mac)})
				if !i.brnf4 {
					els[setUnfiltered4] = append(els[setUnfiltered4], element{key: ifIndexKey(i.index)})
				}
				if !i.brnf6 {
					els[setUnfiltered6] = append(els[setUnfiltered6], element{key: ifIndexKey(i.index)})
				}
				if i.isolationOwned {
					els[setIsolated] = append(els[setIsolated], element{key: ifIndexKey(i.index)})
				}
				els[setPortLogs] = append(els[setPortLogs], element{key: ifIndexKey(i.index), chain: logChainName(s.Key)})
			}
			return els
		},
	}
}

// sharedPortDrop is a drop of the bridge table's forward chain of what a
// sandbox's port sends: the frame's input port names the sandbox.
type sharedPortDrop struct {
	comment string
	match   []expr.Any
	mark    uint32
}

// sharedMarkBase begins the marks of the shared drops, apart from the
// numbers of a sandbox chain's drops.
const sharedMarkBase = 0x10000

func sharedPortDropSpecs() []sharedPortDrop {
	return []sharedPortDrop{
		{"frames from a sandbox's port to another sandbox's port are dropped",
			slices.Concat(matchIfaceIn(setPorts), matchOifIn(setPorts)), sharedMarkBase + 1},
		{"bridged ipv4 that br_netfilter does not pass to the inet hooks is dropped",
			slices.Concat(matchEtherType(unix.ETH_P_IP), matchIfaceIn(setUnfiltered4)), sharedMarkBase + 2},
		{"bridged ipv6 that br_netfilter does not pass to the inet hooks is dropped",
			slices.Concat(matchEtherType(unix.ETH_P_IPV6), matchIfaceIn(setUnfiltered6)), sharedMarkBase + 3},
	}
}

// sharedPortDrops are the forward chain's drops of what sandbox ports
// send. Each goes first, marked, to the log chain of the sandbox whose
// port the frame came in on (map port-logs), which counts it under the
// drop's comment, logs it and drops it (see logRules); the plain drop
// after it holds should the map lack the port.
func sharedPortDrops() []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, d := range sharedPortDropSpecs() {
		rules = append(rules,
			nft.Rule(strings.TrimSuffix(d.comment, " are dropped")+" go to the log chain of the sandbox of the input port",
				d.match, markSet(d.mark), dispatchIface(setPortLogs)),
			nft.Rule(d.comment, d.match, nft.Drop()))
	}
	return rules
}

// floodedToSandbox keeps a sandbox from receiving frames meant for its
// neighbours: a bridge floods a unicast frame to every port while it has
// not learnt (or has forgotten) where its destination MAC is, and a
// workload holding CAP_NET_RAW reads whatever reaches its interface. So a
// unicast frame leaving by a sandbox's port must be for the sandbox's
// MAC. Bridged frames pass the forward hook, the host's own the output
// hook.
func floodedToSandbox() nft.RuleSpec {
	return nft.Rule("unicast frames to a sandbox's port for another mac are dropped",
		matchEtherDaddrUnicast(), matchOifIn(setPorts), matchOifMACNotIn(setPortMACs), nft.Drop())
}

func ifIndexKey(index int) []byte { return binaryutil.NativeEndian.PutUint32(uint32(index)) }

// addAddrElements adds the elements of the address sets that pin the
// sandbox's addresses on interface i.
func addAddrElements(els map[string][]element, i hostIface) {
	for _, a := range i.pin.Addrs {
		set := setAddrs4
		if a.Is6() {
			set = setAddrs6
		}
		els[set] = append(els[set], element{key: ifaceAddrKey(i.index, a)})
	}
}

// ifaceAddrKey is a key of an address set: the interface index and the
// address, as `meta iif . ip saddr` loads them.
func ifaceAddrKey(index int, a netip.Addr) []byte {
	return append(ifIndexKey(index), a.AsSlice()...)
}

// ifaceMACKey is a key of the MAC map: the interface index and the MAC,
// padded to whole 32-bit registers as concatenations are.
func ifaceMACKey(index int, mac net.HardwareAddr) []byte {
	k := make([]byte, typeIfaceMAC.Bytes)
	copy(k, ifIndexKey(index))
	copy(k[4:], mac)
	return k
}

// inetRules is the sandbox chain of table inet doorman-host. See doc.go.
func inetRules(s Spec, ifaces []hostIface) []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, i := range ifaces {
		if i.bridge == "" {
			rules = append(rules, routedPins(i)...)
		}
	}
	rules = append(rules,
		nft.Rule("replies to connections the sandbox accepted are accepted",
			nft.CtState(expr.CtStateBitESTABLISHED), nft.CtReply(), nft.Accept()))
	// The ICMP errors conntrack relates to a flow that keep it working,
	// in either direction (conntrack relates an error only if its outer
	// destination is the flow's peer); nothing conntrack merely calls
	// established: only replies pass that way.
	rules = append(rules, nft.ICMPErrorRules()...)
	rules = append(rules, neighbourDiscovery()...)
	for _, r := range s.Resolvers {
		rules = append(rules,
			nft.Rule(fmt.Sprintf("dns udp to resolver %s is accepted", r),
				nft.Daddr(r), nft.UDP(), nft.Dport(dnsPort), nft.Accept()),
			nft.Rule(fmt.Sprintf("dns tcp to resolver %s is accepted", r),
				nft.Daddr(r), nft.TCP(), nft.Dport(dnsPort), nft.Accept()))
	}
	if s.AllowICMP {
		rules = append(rules, echoRules(s)...)
	}
	for _, e := range s.AllowDirect {
		rules = append(rules, directRules(e)...)
	}
	rules = append(rules, redirectedRules(s)...)
	return append(rules,
		nft.Rule("udp not to a resolver is dropped", nft.UDP(), nft.Drop()),
		nft.Rule("everything else from the sandbox is dropped", nft.Drop()))
}

// routedPins pins the sandbox's addresses on a routed interface: the
// source of its IPv4 and IPv6 packets, the target of its neighbour
// advertisements, and the unspecified source to duplicate address
// detection of its own addresses, router solicitations and MLD reports
// (RFC 4862 5.4.2, 4861 6.3.7, 3810 5.2.13). They come first, so that a packet forged with a neighbour's
// address is never taken for a reply. They only drop: whatever they let
// pass is judged by the rules after them, and an unspecified source never
// matches those but neighbour discovery's.
func routedPins(i hostIface) []nft.RuleSpec {
	iif := matchIif(i.index)
	from := fmt.Sprintf("%s (index %d)", i.name, i.index)
	v4, v6 := nft.NFProtoIPv4(), nft.NFProtoIPv6()
	icmpv6 := nft.L4Proto(unix.IPPROTO_ICMPV6)
	unspec, notUnspec := nft.IPv6Saddr().Eq(make([]byte, 16)), nft.IPv6Saddr().Neq(make([]byte, 16))
	return []nft.RuleSpec{
		nft.Rule(fmt.Sprintf("ipv4 from %s not from the sandbox's addresses %v is dropped", from, i.addrs4()),
			iif, v4, matchIifField(setAddrs4, nft.IPv4Saddr(), false), nft.Drop()),
		nft.Rule(fmt.Sprintf("ipv6 from %s from :: but icmpv6 is dropped", from),
			iif, v6, unspec, nft.L4ProtoNot(unix.IPPROTO_ICMPV6), nft.Drop()),
		nft.Rule(fmt.Sprintf("icmpv6 from %s from :: but solicitations and mld reports is dropped", from),
			iif, v6, unspec, icmpv6, nft.ICMPTypeNot(nft.ICMPv6NeighSolicit, nft.ICMPv6RouterSolicit, nft.ICMPv6MLDReport, nft.ICMPv6MLDv2Report), nft.Drop()),
		nft.Rule(fmt.Sprintf("duplicate address detection from %s for others' addresses is dropped", from),
			iif, v6, unspec, icmpv6, nft.ICMPType(nft.ICMPv6NeighSolicit), matchIifField(setAddrs6, fieldNDTarget, false), nft.Drop()),
		nft.Rule(fmt.Sprintf("ipv6 from %s not from the sandbox's addresses %v is dropped", from, i.addrs6()),
			iif, v6, notUnspec, matchIifField(setAddrs6, nft.IPv6Saddr(), false), nft.Drop()),
		nft.Rule(fmt.Sprintf("neighbour advertisements from %s for others' addresses are dropped", from),
			iif, v6, icmpv6, nft.ICMPType(nft.ICMPv6NeighAdvert), matchIifField(setAddrs6, fieldNDTarget, false), nft.Drop()),
	}
}

// echoRules are AllowICMP: echo requests to the allowDirect prefixes, with
// at most nft.MaxEchoData bytes of data, in the layer's encoding (see
// package nft). The replies come back unjudged (the layer judges only
// what comes from the sandbox). Conntrack reassembles fragments before
// this hook, so the lengths are those of whole packets.
func echoRules(s Spec) []nft.RuleSpec {
	var rules []nft.RuleSpec
	var done []netip.Prefix
	for _, e := range s.AllowDirect {
		p := e.Prefix
		if slices.Contains(done, p) {
			continue
		}
		done = append(done, p)
		rules = append(rules, nft.EchoRule(p, nft.DaddrPrefix, nft.IPLengthRange))
	}
	return rules
}

// neighbourDiscovery keeps IPv6 working on the link, and only there.
// Router and neighbour solicitations and advertisements carry hop limit
// 255 (RFC 4861 7.1), but that does not keep the host from routing one
// that is addressed off the link, payload and all: so they are accepted
// only to link-local addresses (multicast ff02::/16, unicast fe80::/10),
// to the host's own addresses, and to addresses reached through the very
// interface they came in on (the sandbox's neighbours on the bridge, or
// the host's end of a routed veth). MLD reports carry hop limit 1 (RFC
// 3810 5), which no router forwards.
func neighbourDiscovery() []nft.RuleSpec {
	return append(nft.NDRules(
		nft.NDDest{Name: "to link-local multicast", Match: nft.DaddrPrefix(linkLocalMulticast)},
		nft.NDDest{Name: "to link-local unicast", Match: nft.DaddrPrefix(linkLocalUnicast)},
		nft.NDDest{Name: "to the host", Match: nft.FibDaddrLocal()},
		nft.NDDest{Name: "to the same link", Match: matchFibDaddrOnInputLink()},
	), nft.MLDRules()...)
}

// Link-local scopes, which no router forwards.
var (
	linkLocalMulticast = netip.MustParsePrefix("ff02::/16")
	linkLocalUnicast   = netip.MustParsePrefix("fe80::/10")
)

// directRules admits one allowDirect entry: TCP and UDP to its ports, or
// to every port if it has none (as the sandbox's own ruleset does).
func directRules(e conf.Entry) []nft.RuleSpec {
	if e.Ports.Any() {
		return []nft.RuleSpec{
			nft.Rule(fmt.Sprintf("direct %s tcp is accepted", e), nft.DaddrPrefix(e.Prefix), nft.TCP(), nft.Accept()),
			nft.Rule(fmt.Sprintf("direct %s udp is accepted", e), nft.DaddrPrefix(e.Prefix), nft.UDP(), nft.Accept()),
		}
	}
	return []nft.RuleSpec{
		nft.Rule(fmt.Sprintf("direct %s tcp is accepted", e),
			nft.DaddrPrefix(e.Prefix), nft.TCP(), nft.DportRange(e.Ports.Lo, e.Ports.Hi), nft.Accept()),
		nft.Rule(fmt.Sprintf("direct %s udp is accepted", e),
			nft.DaddrPrefix(e.Prefix), nft.UDP(), nft.DportRange(e.Ports.Lo, e.Ports.Hi), nft.Accept()),
	}
}

// bridgeRules is the sandbox chain of table bridge doorman-host: the
// sandbox's MAC pinned on each of its bridge ports, its addresses pinned
// through the address sets (keyed by port, so the rules serve every port),
// then an ethertype gate in front of the inet table. See doc.go. These
// rules hold without br_netfilter: the bridge's prerouting hook sees every
// frame that comes in on the port, bridged or for the host.
func bridgeRules(ifaces []hostIface) []nft.RuleSpec {
	var rules []nft.RuleSpec
	for _, i := range ifaces {
		if i.bridge == "" {
			continue
		}
		rules = append(rules,
			nft.Rule(fmt.Sprintf("frames from %s not from the sandbox's mac %s are dropped", i.name, i.mac),
				matchIif(i.index), fieldEtherSaddr.Neq(i.mac), nft.Drop()),
			nft.Rule(fmt.Sprintf("arp from %s not from the sandbox's mac %s is dropped", i.name, i.mac),
				matchIif(i.index), matchEtherType(unix.ETH_P_ARP), fieldARPSha.Neq(i.mac), nft.Drop()))
	}
	arp, ip4, ip6 := matchEtherType(unix.ETH_P_ARP), matchEtherType(unix.ETH_P_IP), matchEtherType(unix.ETH_P_IPV6)
	icmpv6 := nft.L4Proto(unix.IPPROTO_ICMPV6)
	arpShape, ndShape := shapeJumps()
	unspec := nft.IPv6Saddr().Eq(make([]byte, 16))
	return append(rules,
		nft.Rule("arp for other hardware than ethernet is dropped", arp, fieldARPHType.Neq([]byte{0, 1}), nft.Drop()),
		nft.Rule("arp for other protocols than ipv4 is dropped", arp, fieldARPPType.Neq([]byte{8, 0}), nft.Drop()),
		nft.Rule("arp with other hardware address lengths than 6 is dropped", arp, fieldARPHLen.Neq([]byte{6}), nft.Drop()),
		nft.Rule("arp with other protocol address lengths than 4 is dropped", arp, fieldARPPLen.Neq([]byte{4}), nft.Drop()),
		nft.Rule("arp not from the sandbox's ipv4 addresses (nor a probe from 0.0.0.0) is dropped",
			arp, fieldARPSpa.Neq(make([]byte, 4)), matchIifField(setAddrs4, fieldARPSpa, false), nft.Drop()),
		arpShape,
		nft.Rule("arp is accepted", arp, nft.Accept()),
		nft.Rule("ipv4 not from the sandbox's addresses is dropped", ip4, matchIifField(setAddrs4, nft.IPv4Saddr(), false), nft.Drop()),
		nft.Rule("ipv4 is judged by table inet "+TableName, ip4, nft.Accept()),
		ndShape,
		nft.Rule("duplicate address detection of the sandbox's addresses is accepted",
			ip6, unspec, icmpv6, nft.ICMPType(nft.ICMPv6NeighSolicit), matchIifField(setAddrs6, fieldNDTarget, true), nft.Accept()),
		nft.Rule("router solicitation from :: is accepted", ip6, unspec, icmpv6, nft.ICMPType(nft.ICMPv6RouterSolicit), nft.Accept()),
		nft.Rule("mld report from :: is accepted", ip6, unspec, icmpv6, nft.ICMPType(nft.ICMPv6MLDReport), nft.Accept()),
		nft.Rule("mldv2 report from :: is accepted", ip6, unspec, icmpv6, nft.ICMPType(nft.ICMPv6MLDv2Report), nft.Accept()),
		nft.Rule("other ipv6 from :: is dropped", ip6, unspec, nft.Drop()),
		nft.Rule("ipv6 not from the sandbox's addresses is dropped", ip6, matchIifField(setAddrs6, nft.IPv6Saddr(), false), nft.Drop()),
		nft.Rule("neighbour advertisements for others' addresses are dropped",
			ip6, icmpv6, nft.ICMPType(nft.ICMPv6NeighAdvert), matchIifField(setAddrs6, fieldNDTarget, false), nft.Drop()),
		nft.Rule("router advertisements are dropped", ip6, icmpv6, nft.ICMPType(icmpv6RouterAdvert), nft.Drop()),
		nft.Rule("redirects are dropped", ip6, icmpv6, nft.ICMPType(icmpv6Redirect), nft.Drop()),
		nft.Rule("ipv6 is judged by table inet "+TableName, ip6, nft.Accept()),
		nft.Rule("other frames (vlan-tagged, pppoe, other types) are dropped", nft.Drop()))
}
