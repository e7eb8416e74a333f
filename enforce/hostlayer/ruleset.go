package hostlayer

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/conf"
)

// TableName is the name of the layer's two tables (families inet and
// bridge) in the runtime's namespace. It is not "doorman": that name marks
// a sandbox's own namespace (see package enforce).
const TableName = "doorman-host"

const (
	// chainPrefix starts the name of every sandbox chain.
	chainPrefix = "sbx-"
	// dnsPort is the port resolvers are queried on, over UDP and TCP.
	dnsPort = 53
)

// Names of the sets and maps.
const (
	setIfaces      = "sandboxes"      // iface_index : verdict (both tables)
	setMACs        = "sandbox-macs"   // iface_index . ether_addr : verdict (inet)
	setUnfiltered4 = "unfiltered-ip"  // iface_index (bridge)
	setUnfiltered6 = "unfiltered-ip6" // iface_index (bridge)
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
var typeIfaceMAC = nftables.MustConcatSetType(nftables.TypeIFIndex, nftables.TypeEtherAddr)

// setSpec is a set or map of a table.
type setSpec struct {
	name    string
	keyType nftables.SetDatatype
	// verdicts makes it a verdict map, whose elements jump to sandbox
	// chains; otherwise it is a plain set of interface indexes.
	verdicts bool
}

// baseSpec is a base chain of a table and its rules, shared by all
// sandboxes.
type baseSpec struct {
	name     string
	hook     *nftables.ChainHook
	priority *nftables.ChainPriority
	rules    []ruleSpec
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
	rules func(s Spec, ifaces []hostIface) []ruleSpec
	// elements builds the sandbox's elements, by set name.
	elements func(chain string, ifaces []hostIface) map[string][]element
}

func layouts() []layout { return []layout{inetLayout(), bridgeLayout()} }

func (l layout) String() string {
	if l.table.Family == nftables.TableFamilyBridge {
		return "table bridge " + TableName
	}
	return "table inet " + TableName
}

func (l layout) set(s setSpec) *nftables.Set {
	set := &nftables.Set{Table: l.table, Name: s.name, KeyType: s.keyType, KeyByteOrder: binaryutil.NativeEndian}
	if s.verdicts {
		set.IsMap, set.DataType = true, nftables.TypeVerdict
	}
	return set
}

func (l layout) baseChain(b baseSpec) *nftables.Chain {
	return &nftables.Chain{Name: b.name, Table: l.table, Type: nftables.ChainTypeFilter,
		Hooknum: b.hook, Priority: b.priority, Policy: ptr(nftables.ChainPolicyAccept)}
}

func (l layout) sandboxChain(key string) *nftables.Chain {
	return &nftables.Chain{Name: chainName(key), Table: l.table}
}

func ptr[T any](v T) *T { return &v }

// ruleSpec is one rule: its expressions and a comment that names it in
// `nft list ruleset` and in the errors of Check.
type ruleSpec struct {
	comment string
	exprs   []expr.Any
}

func rule(comment string, parts ...[]expr.Any) ruleSpec {
	return ruleSpec{comment: comment, exprs: slices.Concat(parts...)}
}

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
		},
		bases: []baseSpec{{name: "prerouting", hook: nftables.ChainHookPrerouting, priority: inetPriority, rules: []ruleSpec{
			rule("routed sandbox interfaces go to their chains", dispatchIface(setIfaces)),
			rule("bridged sandboxes go to their chains by bridge and source mac", dispatchIfaceMAC(setMACs)),
		}}},
		rules: func(s Spec, _ []hostIface) []ruleSpec { return inetRules(s) },
		elements: func(chain string, ifaces []hostIface) map[string][]element {
			els := map[string][]element{}
			for _, i := range ifaces {
				if i.bridge == "" {
					els[setIfaces] = append(els[setIfaces], element{key: ifIndexKey(i.index), chain: chain})
				} else {
					els[setMACs] = append(els[setMACs], element{key: ifaceMACKey(i.bridgeIndex, i.mac), chain: chain})
				}
			}
			return els
		},
	}
}

// bridgeLayout is table bridge doorman-host, on the bridge ports: it pins
// the source MAC and lets only ARP and untagged IP through to the inet
// table, and it drops bridged IP whose family br_netfilter does not pass
// through the inet hooks (which alone could judge it).
func bridgeLayout() layout {
	return layout{
		table: &nftables.Table{Name: TableName, Family: nftables.TableFamilyBridge},
		sets: []setSpec{
			{name: setIfaces, keyType: nftables.TypeIFIndex, verdicts: true},
			{name: setUnfiltered4, keyType: nftables.TypeIFIndex},
			{name: setUnfiltered6, keyType: nftables.TypeIFIndex},
		},
		bases: []baseSpec{
			{name: "prerouting", hook: nftables.ChainHookPrerouting, priority: bridgePriority, rules: []ruleSpec{
				rule("sandbox ports go to their chains", dispatchIface(setIfaces)),
			}},
			{name: "forward", hook: nftables.ChainHookForward, priority: bridgePriority, rules: []ruleSpec{
				rule("bridged ipv4 that br_netfilter does not pass to the inet hooks is dropped",
					matchEtherType(unix.ETH_P_IP), matchIfaceIn(setUnfiltered4), drop()),
				rule("bridged ipv6 that br_netfilter does not pass to the inet hooks is dropped",
					matchEtherType(unix.ETH_P_IPV6), matchIfaceIn(setUnfiltered6), drop()),
			}},
		},
		rules: func(_ Spec, ifaces []hostIface) []ruleSpec { return bridgeRules(ifaces) },
		elements: func(chain string, ifaces []hostIface) map[string][]element {
			els := map[string][]element{}
			for _, i := range ifaces {
				if i.bridge == "" {
					continue
				}
				els[setIfaces] = append(els[setIfaces], element{key: ifIndexKey(i.index), chain: chain})
				if !i.brnf4 {
					els[setUnfiltered4] = append(els[setUnfiltered4], element{key: ifIndexKey(i.index)})
				}
				if !i.brnf6 {
					els[setUnfiltered6] = append(els[setUnfiltered6], element{key: ifIndexKey(i.index)})
				}
			}
			return els
		},
	}
}

func ifIndexKey(index int) []byte { return binaryutil.NativeEndian.PutUint32(uint32(index)) }

// ifaceMACKey is a key of the MAC map: the interface index and the MAC,
// padded to whole 32-bit registers as concatenations are.
func ifaceMACKey(index int, mac net.HardwareAddr) []byte {
	k := make([]byte, typeIfaceMAC.Bytes)
	copy(k, ifIndexKey(index))
	copy(k[4:], mac)
	return k
}

// inetRules is the sandbox chain of table inet doorman-host. See doc.go.
func inetRules(s Spec) []ruleSpec {
	rules := []ruleSpec{
		rule("replies to connections the sandbox accepted are accepted", matchCtReply(), accept()),
	}
	rules = append(rules, neighbourDiscovery()...)
	for _, r := range s.Resolvers {
		rules = append(rules,
			rule(fmt.Sprintf("dns udp to resolver %s is accepted", r),
				matchDaddr(r), matchL4Proto(unix.IPPROTO_UDP), matchDport(dnsPort, dnsPort), accept()),
			rule(fmt.Sprintf("dns tcp to resolver %s is accepted", r),
				matchDaddr(r), matchL4Proto(unix.IPPROTO_TCP), matchDport(dnsPort, dnsPort), accept()))
	}
	if s.AllowICMP {
		rules = append(rules,
			rule("icmp is accepted", matchNFProto(false), matchL4Proto(unix.IPPROTO_ICMP), accept()),
			rule("icmpv6 is accepted", matchNFProto(true), matchL4Proto(unix.IPPROTO_ICMPV6), accept()))
	}
	for _, e := range s.AllowDirect {
		rules = append(rules, directRules(e)...)
	}
	return append(rules, rule("everything else from the sandbox is dropped", drop()))
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
func neighbourDiscovery() []ruleSpec {
	var rules []ruleSpec
	for _, m := range []struct {
		name string
		typ  byte
	}{
		{"router solicitation", icmpv6RouterSolicit},
		{"neighbour solicitation", icmpv6NeighSolicit},
		{"neighbour advertisement", icmpv6NeighAdvert},
	} {
		nd := slices.Concat(matchNFProto(true), matchL4Proto(unix.IPPROTO_ICMPV6), matchICMPv6Type(m.typ), matchHopLimit(255))
		rules = append(rules,
			rule("ipv6 "+m.name+" to link-local multicast is accepted", nd, matchDprefix(linkLocalMulticast), accept()),
			rule("ipv6 "+m.name+" to link-local unicast is accepted", nd, matchDprefix(linkLocalUnicast), accept()),
			rule("ipv6 "+m.name+" to the host is accepted", nd, matchFibDaddrLocal(), accept()),
			rule("ipv6 "+m.name+" to the same link is accepted", nd, matchFibDaddrOnInputLink(), accept()))
	}
	for _, m := range []struct {
		name string
		typ  byte
	}{
		{"mld report", icmpv6MLDReport},
		{"mld done", icmpv6MLDDone},
		{"mldv2 report", icmpv6MLDv2Report},
	} {
		rules = append(rules, rule("ipv6 "+m.name+" is accepted",
			matchNFProto(true), matchL4Proto(unix.IPPROTO_ICMPV6), matchICMPv6Type(m.typ), matchHopLimit(1), accept()))
	}
	return rules
}

// Link-local scopes, which no router forwards.
var (
	linkLocalMulticast = netip.MustParsePrefix("ff02::/16")
	linkLocalUnicast   = netip.MustParsePrefix("fe80::/10")
)

// directRules admits one allowDirect entry: TCP and UDP to its ports, or
// everything to its prefix if it has no port.
func directRules(e conf.Entry) []ruleSpec {
	if e.Ports.Any() {
		return []ruleSpec{rule(fmt.Sprintf("direct %s is accepted", e), matchDprefix(e.Prefix), accept())}
	}
	return []ruleSpec{
		rule(fmt.Sprintf("direct %s tcp is accepted", e),
			matchDprefix(e.Prefix), matchL4Proto(unix.IPPROTO_TCP), matchDport(e.Ports.Lo, e.Ports.Hi), accept()),
		rule(fmt.Sprintf("direct %s udp is accepted", e),
			matchDprefix(e.Prefix), matchL4Proto(unix.IPPROTO_UDP), matchDport(e.Ports.Lo, e.Ports.Hi), accept()),
	}
}

// bridgeRules is the sandbox chain of table bridge doorman-host: the
// source MAC pinned on each of the sandbox's bridge ports, then an
// ethertype gate in front of the inet table. See doc.go.
func bridgeRules(ifaces []hostIface) []ruleSpec {
	var rules []ruleSpec
	for _, i := range ifaces {
		if i.bridge == "" {
			continue
		}
		rules = append(rules, rule(fmt.Sprintf("frames from %s not from the sandbox's mac %s are dropped", i.name, i.mac),
			matchIif(i.index), matchEtherSaddrNot(i.mac), drop()))
	}
	return append(rules,
		rule("arp is accepted", matchEtherType(unix.ETH_P_ARP), accept()),
		rule("ipv4 is judged by table inet "+TableName, matchEtherType(unix.ETH_P_IP), accept()),
		rule("ipv6 is judged by table inet "+TableName, matchEtherType(unix.ETH_P_IPV6), accept()),
		rule("other frames (vlan-tagged, pppoe, other types) are dropped", drop()))
}
