// Package hostlayer installs, checks and removes doorman's host-side
// layer: nftables rules in the runtime's network namespace (the host, or
// the outer container of Docker-in-Docker: where the proxy lives) that let
// nothing in from a sandbox's host-side interface but what the sandbox
// legitimately sends through it.
//
// # Why it exists
//
// The rules inside a sandbox (package enforce, table inet doorman) cannot
// hold against a workload that holds CAP_NET_ADMIN in its namespace (it
// can flush them) or that writes AF_PACKET frames (they bypass the IP
// hooks of its own namespace). This layer sits where the workload cannot
// reach: on the host side of the sandbox's veth. The sandbox needs very
// little of that interface, because the proxy takes every outbound TCP
// connection through a listener inside the sandbox and dials upstream from
// the runtime's namespace. So from the interface only these get through:
//
//   - replies to connections the sandbox accepted (conntrack: the packet
//     goes in the reply direction of a connection someone else opened),
//     ICMP errors about them included;
//   - DNS (UDP and TCP port 53) to the sandbox's resolvers;
//   - ICMP and ICMPv6, if the policy allows them;
//   - the allowDirect entries: IP or CIDR destinations, with or without a
//     port range, that bypass the proxy (for non-HTTP services);
//   - ARP, IPv6 neighbour discovery to destinations on the link (see
//     below) and MLD.
//
// Everything else is dropped. So a workload that flushes its own ruleset,
// adds routes, changes its addresses or sends hand-made frames gets nothing
// out: it only loses its own connectivity.
//
// # Tables
//
// The sandbox's own table is inet doorman, and the OCI hook decides whether
// it runs inside a doorman sandbox by looking for that table in its own
// namespace. This layer therefore never uses that name: it keeps two tables
// in the runtime's namespace, shared by every sandbox there.
//
//	table inet doorman-host
//	    map sandboxes     { type iface_index : verdict }              routed interface -> jump sbx-<key>
//	    map sandbox-macs  { type iface_index . ether_addr : verdict }  bridge, sandbox MAC -> jump sbx-<key>
//	    chain prerouting  type filter hook prerouting priority mangle (-150), policy accept
//	        meta iif vmap @sandboxes
//	        meta iif . ether saddr vmap @sandbox-macs
//	    chain sbx-<key>   one per sandbox
//	        ct direction reply accept                        replies to connections the sandbox accepted
//	        icmpv6 type {nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert} ip6 hoplimit 255
//	            and ip6 daddr ff02::/16 | ip6 daddr fe80::/10 | fib daddr type local | fib daddr . iif oif != 0: accept
//	        icmpv6 type {mld-listener-report, mld-listener-done, mld2-listener-report} ip6 hoplimit 1 accept
//	        ip[6] daddr RESOLVER udp|tcp dport 53 accept
//	        meta l4proto icmp|ipv6-icmp accept               only if AllowICMP
//	        ip[6] daddr PREFIX [tcp|udp dport PORTS] accept  one per allowDirect entry
//	        drop
//	table bridge doorman-host
//	    map sandboxes { type iface_index : verdict }         bridge port -> jump sbx-<key>
//	    set unfiltered-ip, unfiltered-ip6 { type iface_index } ports of bridges br_netfilter skips
//	    chain prerouting  type filter hook prerouting priority filter (-200), policy accept
//	        meta iif vmap @sandboxes
//	    chain forward     type filter hook forward priority filter (-200), policy accept
//	        ether type ip meta iif @unfiltered-ip drop
//	        ether type ip6 meta iif @unfiltered-ip6 drop
//	    chain sbx-<key>
//	        meta iif PORT ether saddr != SANDBOX-MAC drop      one per bridge port
//	        ether type arp accept
//	        ether type ip accept                             judged by table inet doorman-host
//	        ether type ip6 accept                            judged by table inet doorman-host
//	        drop                                             VLAN-tagged, PPPoE, any other type
//
// Map elements are keyed by interface index, not name: an index is not
// reused when the interface goes away (a new veth gets a new one), so a
// rule left behind by a sandbox that was never removed cannot hit an
// unrelated container that inherits the name, and a rename does not unhook
// the rules. Each sandbox has its own chain, reached through its elements,
// so Apply and Remove of one sandbox never touch another's rules. Both
// tables change in one netlink batch, and the read-modify-write around it
// is serialized across processes by an exclusive flock(2) on the network
// namespace file itself (every path to one namespace is the same nsfs
// inode), so concurrent CNI ADDs and hooks cannot lose each other's
// updates. The tables are deleted with the last sandbox.
//
// The inet chains hook prerouting, not input and forward: prerouting sees
// every packet that arrives, whether it is for the host itself or to be
// routed, and it sees it before NAT rewrites its destination, so the rules
// judge the address the workload wrote. They drop, never reject: a reject
// answers to the packet's source address, which the workload can forge,
// and the answer (a reset carrying the forged packet's acknowledgement
// number, or an ICMP error quoting its headers) would then carry the
// workload's bytes to the host it named. The friendly rejects are the job
// of the sandbox's own ruleset; this layer is the backstop.
//
// # Bridge ports
//
// Most runtimes plug the sandbox's veth into a Linux bridge. The IP layer
// of the runtime's namespace then sees the sandbox's packets arrive on the
// bridge, not on the veth: routed ones always, and bridged ones (between
// two containers on the bridge) when br_netfilter passes them through the
// inet hooks, which it does with the bridge as input interface too. So
// table inet doorman-host recognizes a bridged sandbox by the bridge and
// the frame's source MAC, and table bridge doorman-host makes that sound:
// on the sandbox's port it drops every frame whose source MAC is not the
// sandbox's (read from the sandbox's end of the veth when Apply runs), so
// the workload can neither pass for a neighbour nor shed its own rules by
// changing its MAC. The MAC pin also keeps a forged frame from teaching
// the bridge a neighbour's address on the sandbox's port. Apply refuses a
// MAC that is already pinned on the bridge for another sandbox whose port
// still exists (a workload that took a neighbour's MAC before its layer
// was applied), and replaces the element of one whose ports are gone.
//
// The bridge table also drops, on the port, every frame that is neither
// ARP nor untagged IP: br_netfilter passes VLAN-tagged and PPPoE frames on
// untouched (unless bridge-nf-filter-vlan-tagged or -pppoe-tagged are set)
// and never looks at other types. It reads the ethertype from the frame as
// it was sent, tag included.
//
// Frames bridged between two containers reach the inet hooks only through
// br_netfilter (net.bridge.bridge-nf-call-iptables and -ip6tables in the
// runtime's namespace, or the bridge's own nf_call_iptables and
// nf_call_ip6tables). Docker turns the sysctls on and Kubernetes requires
// them. Where br_netfilter is off for a family, Apply puts the sandbox's
// port in unfiltered-ip or unfiltered-ip6 and the bridge's forward hook
// drops that family's bridged traffic from it altogether: the sandbox then
// cannot answer its neighbours on the bridge either (its routed traffic is
// unaffected). The bridge family cannot judge statefully by itself on
// kernels without nf_conntrack_bridge (CONFIG_NF_CONNTRACK_BRIDGE).
// Check notices when br_netfilter is switched on or off after Apply.
//
// An interface enslaved to anything but a Linux bridge (an Open vSwitch
// port, a bond) is refused: its frames would bypass these hooks.
//
// # Neighbour discovery
//
// Neighbour and router solicitations and advertisements carry hop limit
// 255, but a router still forwards one addressed off the link, payload
// and all. So they are accepted only to link-local destinations, to the
// host's own addresses, and to addresses whose route leaves through the
// interface the packet came in on (the neighbours on the bridge, the
// host's end of a routed veth). MLD carries hop limit 1, which no router
// forwards.
//
// # Limits
//
//   - The host-side interface must exist, and be attached to its bridge,
//     when Apply runs; on the hook path with Docker >= 28 it appears only
//     after createRuntime (see WaitHostPeers). Check reports later changes.
//   - A connection the sandbox accepted is a channel by design: whoever
//     connects to it gets its replies.
//   - The workload can still forge its source address on what the layer
//     lets through (DNS to the resolvers, ICMP if allowed, allowDirect),
//     and ARP and neighbour discovery reach the other containers on the
//     bridge: protecting them from spoofed ARP is the bridge's business.
//   - Packet sockets in the runtime's namespace (tcpdump, a DHCP server)
//     see frames before netfilter does.
package hostlayer
