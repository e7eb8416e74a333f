package hostlayer

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// This file is the redirect on the host side of the link: what a sandbox
// sends through its host interface past its own ruleset goes to its
// proxy's listeners in the runtime's namespace, so that the same policy
// holds whatever network stack the workload runs. gVisor (runsc) writes
// its frames to the sandbox's veth through a packet socket, and a
// microVM's frames come from its tap through a tc redirect: neither
// passes the IP hooks of the sandbox's namespace, where the sandbox's own
// redirect lives. See doc.go, "Redirect".

// Redirect says where the layer sends what a sandbox sends past its own
// ruleset: its proxy's TCP listeners and DNS filter sockets in the
// runtime's namespace, bound to the wildcard address on these ports. A
// zero port sends nothing there: that family's TCP (or DNS to
// DNSResolvers) is dropped, as without the redirect.
type Redirect struct {
	// TCP4 and TCP6 are the proxy's TCP listeners. All TCP the sandbox
	// opens goes there (NAT redirect: to the address of the interface
	// it came in on, keeping its original destination for
	// SO_ORIGINAL_DST), but to the allowDirect destinations and TCP DNS
	// to the resolvers.
	TCP4, TCP6 uint16
	// DNS4 and DNS6 are the DNS filter's sockets (UDP and TCP), where
	// DNS to DNSResolvers goes.
	DNS4, DNS6 uint16
	// DNSResolvers are the resolvers whose DNS (UDP and TCP port 53) goes
	// to the DNS filter. Loopback ones are skipped.
	DNSResolvers []netip.Addr
}

// ports are the listeners' ports, each with the protocols it serves.
func (r Redirect) ports() []protoPort {
	var out []protoPort
	add := func(proto byte, port uint16) {
		p := protoPort{proto, port}
		if port != 0 && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	add(unix.IPPROTO_TCP, r.TCP4)
	add(unix.IPPROTO_TCP, r.TCP6)
	for _, p := range []uint16{r.DNS4, r.DNS6} {
		add(unix.IPPROTO_UDP, p)
		add(unix.IPPROTO_TCP, p)
	}
	return out
}

// dnsPort is the DNS filter's port for a's family.
func (r Redirect) dnsPort(a netip.Addr) uint16 {
	if a.Is4() {
		return r.DNS4
	}
	return r.DNS6
}

type protoPort struct {
	proto byte
	port  uint16
}

// normalized returns r with its resolvers unmapped, sorted and
// deduplicated, loopback ones dropped.
func (r Redirect) normalized() (Redirect, error) {
	out := r
	out.DNSResolvers = nil
	for i, a := range r.DNSResolvers {
		if err := nft.CheckResolver(a); err != nil {
			return Redirect{}, fmt.Errorf("redirected resolver #%d %q: %w", i+1, a, err)
		}
		if a.Unmap().IsLoopback() {
			continue
		}
		out.DNSResolvers = append(out.DNSResolvers, a.Unmap())
	}
	slices.SortFunc(out.DNSResolvers, netip.Addr.Compare)
	out.DNSResolvers = slices.Compact(out.DNSResolvers)
	return out, nil
}

// Names of the redirect's sets.
const setListeners = "listeners" // inet_proto . inet_service : verdict (listen)

// Priorities of the redirect's base chains. The NAT core runs every nat
// chain of a hook at destination NAT's priority (-100), in the order of
// their own priorities: this one's comes before any other's (Docker's,
// kube-proxy's), so the sandbox's connection to a service address is the
// proxy's, not DNATed to the service's endpoint. The guard is an ordinary
// input filter.
var (
	redirectPriority = nftables.ChainPriorityRef(-150)
	listenPriority   = nftables.ChainPriorityFilter
)

// redirectLayout is table inet doorman-host-nat: for each sandbox, its
// chain of redirects, reached as in table inet doorman-host (routed
// interfaces by index, bridge ports by the bridge and the sandbox's MAC).
// A nat chain sees only the first packet of each connection; conntrack
// does the rest.
func redirectLayout() layout {
	return layout{
		table: &nftables.Table{Name: RedirectTableName, Family: nftables.TableFamilyINet},
		sets: []setSpec{
			{name: setIfaces, keyType: nftables.TypeIFIndex, verdicts: true},
			{name: setMACs, keyType: typeIfaceMAC, verdicts: true},
		},
		bases: []baseSpec{{name: "prerouting", ctype: nftables.ChainTypeNAT, hook: nftables.ChainHookPrerouting, priority: redirectPriority, rules: []nft.RuleSpec{
			nft.Rule("routed sandbox interfaces go to their chains", dispatchIface(setIfaces)),
			nft.Rule("bridged sandboxes go to their chains by bridge and source mac", dispatchIfaceMAC(setMACs)),
		}}},
		rules: func(s Spec, _ []hostIface) []nft.RuleSpec { return redirectRules(s) },
		elements: func(chain string, _ Spec, ifaces []hostIface) map[string][]element {
			return dispatchElements(chain, ifaces)
		},
		setIDs: 3 << 8,
	}
}

// redirectRules is the sandbox chain of table inet doorman-host-nat.
func redirectRules(s Spec) []nft.RuleSpec {
	var rules []nft.RuleSpec
	r := s.Redirect
	for _, a := range r.DNSResolvers {
		port := r.dnsPort(a)
		if port == 0 {
			continue
		}
		rules = append(rules,
			nft.Rule(fmt.Sprintf("dns udp to resolver %s goes to the dns filter", a),
				nft.Daddr(a), nft.UDP(), nft.Dport(dnsPort), redirectTo(port)),
			nft.Rule(fmt.Sprintf("dns tcp to resolver %s goes to the dns filter", a),
				nft.Daddr(a), nft.TCP(), nft.Dport(dnsPort), redirectTo(port)))
	}
	for _, a := range s.Resolvers {
		rules = append(rules, nft.Rule(fmt.Sprintf("dns tcp to resolver %s is not proxied", a),
			nft.Daddr(a), nft.TCP(), nft.Dport(dnsPort), nft.Return()))
	}
	for _, e := range s.AllowDirect {
		m := []expr.Any{}
		m = append(m, nft.DaddrPrefix(e.Prefix)...)
		m = append(m, nft.TCP()...)
		if !e.Ports.Any() {
			m = append(m, nft.DportRange(e.Ports.Lo, e.Ports.Hi)...)
		}
		rules = append(rules, nft.Rule(fmt.Sprintf("direct %s tcp is not proxied", e), m, nft.Return()))
	}
	if r.TCP4 != 0 {
		rules = append(rules, nft.Rule("ipv4 tcp goes to the proxy", nft.NFProtoIPv4(), nft.TCP(), redirectTo(r.TCP4)))
	}
	if r.TCP6 != 0 {
		rules = append(rules, nft.Rule("ipv6 tcp goes to the proxy", nft.NFProtoIPv6(), nft.TCP(), redirectTo(r.TCP6)))
	}
	return rules
}

// redirectedRules are the rules of the sandbox chain of table inet
// doorman-host that let through what table inet doorman-host-nat
// redirects. That chain runs before the NAT core (see inetPriority and
// redirectPriority), so a connection's first packet still has its
// original destination there: it is accepted as new, and redirected
// after; every later packet of it must belong to a connection that was
// redirected (ct status dnat: the layer's nat chain comes before any
// other's, so a sandbox's connection that was NATed at all was NATed
// there). (The listener's port is not compared: google/nftables v0.3.0
// sends `ct reply proto-src`'s direction as 4 bytes where the kernel
// reads one, so it would match the original direction.)
func redirectedRules(s Spec) []nft.RuleSpec {
	var rules []nft.RuleSpec
	r := s.Redirect
	for _, f := range []struct {
		name  string
		proto []expr.Any
		port  uint16
	}{{"ipv4", nft.NFProtoIPv4(), r.TCP4}, {"ipv6", nft.NFProtoIPv6(), r.TCP6}} {
		if f.port == 0 {
			continue
		}
		rules = append(rules,
			nft.Rule(f.name+" tcp the layer redirects to the proxy is accepted", f.proto, nft.TCP(), nft.CtState(expr.CtStateBitNEW), nft.Accept()),
			nft.Rule(f.name+" tcp redirected to the proxy is accepted",
				f.proto, nft.TCP(), ctOriginal(), nft.CtStatus(ipsDstNAT), nft.Accept()))
	}
	for _, a := range r.DNSResolvers {
		if r.dnsPort(a) == 0 {
			continue
		}
		rules = append(rules,
			nft.Rule(fmt.Sprintf("dns udp to resolver %s the layer redirects to the dns filter is accepted", a),
				nft.Daddr(a), nft.UDP(), nft.Dport(dnsPort), nft.CtState(expr.CtStateBitNEW), nft.Accept()),
			nft.Rule(fmt.Sprintf("dns tcp to resolver %s the layer redirects to the dns filter is accepted", a),
				nft.Daddr(a), nft.TCP(), nft.Dport(dnsPort), nft.CtState(expr.CtStateBitNEW), nft.Accept()))
	}
	for _, f := range []struct {
		name  string
		proto []expr.Any
		port  uint16
	}{{"ipv4", nft.NFProtoIPv4(), r.DNS4}, {"ipv6", nft.NFProtoIPv6(), r.DNS6}} {
		if f.port == 0 {
			continue
		}
		for _, l4 := range []struct {
			name  string
			match []expr.Any
		}{{"udp", nft.UDP()}, {"tcp", nft.TCP()}} {
			rules = append(rules, nft.Rule(fmt.Sprintf("%s dns %s redirected to the dns filter is accepted", f.name, l4.name),
				f.proto, l4.match, ctOriginal(), nft.CtStatus(ipsDstNAT), nft.Accept()))
		}
	}
	return rules
}

// listenLayout is table inet doorman-host-listen, the guard of the
// proxies' host-side listeners: they are bound to the runtime
// namespace's wildcard address (the redirect takes each connection to the
// address of the interface it came in on), so without it anyone who
// reaches the runtime's namespace (its LAN, its own processes, other
// sandboxes) could connect to them. Each listener's protocol and port
// sends what reaches it to its sandbox's chain, which accepts only what
// the redirect brought there.
func listenLayout() layout {
	return layout{
		table: &nftables.Table{Name: ListenTableName, Family: nftables.TableFamilyINet},
		sets: []setSpec{
			{name: setListeners, keyType: typeProtoPort, verdicts: true},
		},
		bases: []baseSpec{{name: "input", hook: nftables.ChainHookInput, priority: listenPriority, rules: []nft.RuleSpec{
			nft.Rule("what reaches a proxy's listener goes to its sandbox's chain", dispatchProtoPort(setListeners)),
		}}},
		rules: func(Spec, []hostIface) []nft.RuleSpec {
			return []nft.RuleSpec{
				nft.Rule("what the layer redirected to the sandbox's proxy is accepted", nft.CtStatus(ipsDstNAT), nft.Accept()),
				nft.Rule("everything else to the sandbox's proxy is dropped", nft.Drop()),
			}
		},
		elements: func(chain string, s Spec, _ []hostIface) map[string][]element {
			els := map[string][]element{}
			for _, p := range s.Redirect.ports() {
				els[setListeners] = append(els[setListeners], element{key: protoPortKey(p), chain: chain})
			}
			return els
		},
		setIDs: 4 << 8,
	}
}

// typeProtoPort is the key of the listeners map: a protocol and a port,
// as `meta l4proto . th dport` loads them.
var typeProtoPort = nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)

// protoPortKey is a key of the listeners map: each part padded to a whole
// 32-bit register, as concatenations are.
func protoPortKey(p protoPort) []byte {
	k := make([]byte, 8)
	k[0] = p.proto
	copy(k[4:], binaryutil.BigEndian.PutUint16(p.port))
	return k
}

// dispatchProtoPort is `meta l4proto . th dport vmap @SET`.
func dispatchProtoPort(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: nft.Reg},
		&expr.Payload{OperationType: expr.PayloadLoad, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2, DestRegister: unix.NFT_REG32_01},
		&expr.Lookup{SourceRegister: nft.Reg, DestRegister: unix.NFT_REG_VERDICT, IsDestRegSet: true, SetName: set},
	}
}

// ipsDstNAT is IPS_DST_NAT of linux/netfilter/nf_conntrack_common.h, set
// on a conntrack entry by redirect and dnat.
const ipsDstNAT = 1 << 5

// redirectTo is `redirect to :PORT`, as package enforce writes it (the
// proto-max register and the PROTO_SPECIFIED flag spelled out, so that
// the rule reads back as written).
func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: nft.Reg, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: nft.Reg, RegisterProtoMax: nft.Reg, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}

// ctOriginal is `ct direction original`.
func ctOriginal() []expr.Any {
	return nft.Load(&expr.Ct{Key: expr.CtKeyDIRECTION, Register: nft.Reg}, nft.Eq([]byte{0}))
}
