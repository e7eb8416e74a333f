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
// the runtime's namespace. So from the interface only these get through,
// and only with the sandbox's own MAC and addresses (see Identity):
//
//   - replies to connections the sandbox accepted (conntrack: the packet
//     goes in the reply direction of a connection someone else opened,
//     which conntrack calls established);
//   - the ICMP errors conntrack relates to a flow that keep it working:
//     unreachable, time exceeded, parameter problem, packet too big;
//   - DNS (UDP and TCP port 53) to the sandbox's resolvers: straight to
//     them without the DNS filter, else redirected to the filter (see
//     Redirect);
//   - the TCP the sandbox opens, redirected to its proxy's listeners in
//     the runtime's namespace (see Redirect): what a workload on a network
//     stack of its own sends (gVisor, a microVM), or one that flushed its
//     rules, gets the same decisions as the rest;
//   - the allowDirect entries: TCP and UDP to IP or CIDR destinations,
//     with or without a port range, that bypass the proxy (for non-HTTP
//     services), and, if the policy allows ICMP, echo requests to them
//     with at most 64 bytes of data;
//   - ARP, IPv6 neighbour discovery to destinations on the link (see
//     below) and MLD, each held to the exact shape address resolution
//     needs (see Neighbours).
//
// Everything else is dropped: no other ICMP query (timestamp, information
// and address mask requests, larger echoes), which could carry a tunnel's
// payload, no router advertisement and no redirect. And nothing a sandbox
// sends on a bridge reaches another sandbox on it, frames included (see
// Neighbours). So a workload that flushes its own ruleset, adds routes,
// changes its MAC or addresses or sends hand-made frames gets nothing
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
//	    set sandbox-ip    { type iface_index . ipv4_addr }             routed interface, sandbox address
//	    set sandbox-ip6   { type iface_index . ipv6_addr }             routed interface, sandbox address
//	    chain prerouting  type filter hook prerouting priority mangle (-150), policy accept
//	        meta iif vmap @sandboxes
//	        meta iif . ether saddr vmap @sandbox-macs
//	    chain sbx-<key>   one per sandbox
//	        meta iif IFACE meta iif . ip saddr != @sandbox-ip drop    these six per routed interface
//	        meta iif IFACE ip6 saddr :: meta l4proto != ipv6-icmp drop
//	        meta iif IFACE ip6 saddr :: icmpv6 type != {nd-neighbor-solicit, nd-router-solicit,
//	            mld-listener-report, mld2-listener-report} drop
//	        meta iif IFACE ip6 saddr :: icmpv6 type nd-neighbor-solicit
//	            meta iif . icmpv6 target != @sandbox-ip6 drop       DAD of its own addresses only
//	        meta iif IFACE ip6 saddr != :: meta iif . ip6 saddr != @sandbox-ip6 drop
//	        meta iif IFACE icmpv6 type nd-neighbor-advert meta iif . icmpv6 target != @sandbox-ip6 drop
//	        ct state established ct direction reply accept    replies to connections the sandbox accepted
//	        icmp type {destination-unreachable, time-exceeded, parameter-problem} ct state related accept
//	        icmpv6 type {destination-unreachable, packet-too-big, time-exceeded, parameter-problem}
//	            ct state related accept
//	        icmpv6 type {nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert} ip6 hoplimit 255
//	            and ip6 daddr ff02::/16 | ip6 daddr fe80::/10 | fib daddr type local | fib daddr . iif oif != 0: accept
//	        icmpv6 type {mld-listener-report, mld-listener-done, mld2-listener-report} ip6 hoplimit 1 accept
//	        ip[6] daddr RESOLVER udp|tcp dport 53 accept
//	        ip daddr PREFIX icmp type echo-request ip hdrlength 5 ip length 28-92 accept
//	                                                         only if AllowICMP, one per IPv4 allowDirect prefix
//	        ip6 daddr PREFIX icmpv6 type echo-request ip6 length 8-72 accept
//	                                                         only if AllowICMP, one per IPv6 allowDirect prefix
//	        ip[6] daddr PREFIX tcp|udp [dport PORTS] accept  one pair per allowDirect entry
//	        meta l4proto udp drop                            udp not to a resolver
//	        drop
//	table bridge doorman-host
//	    map sandboxes { type iface_index : verdict }         bridge port -> jump sbx-<key>
//	    set unfiltered-ip, unfiltered-ip6 { type iface_index } ports of bridges br_netfilter skips
//	    set sandbox-ip  { type iface_index . ipv4_addr }     bridge port, sandbox address
//	    set sandbox-ip6 { type iface_index . ipv6_addr }     bridge port, sandbox address
//	    set sandbox-ports { type iface_index }               bridge ports of sandboxes
//	    set sandbox-port-macs { type iface_index . ether_addr } bridge port, sandbox MAC
//	    set isolated-ports { type iface_index }              ports whose isolation the layer turned on
//	    chain arp-shape                                      shared, reached by jump (see Neighbours)
//	        arp operation != {request, reply} drop
//	        meta len != {28, 46} drop                        no trailer; 46: padded to 60 bytes
//	        meta len 46 @nh,224,144 != 0 drop                the padding is zeros (in two rules)
//	    chain nd-shape                                       shared, reached by jump (see Neighbours)
//	        for router solicitation (L 8), neighbour solicitation (L 24), neighbour advertisement (L 24):
//	        icmpv6 type T ip6 nexthdr != ipv6-icmp drop      no extension header
//	        icmpv6 type T @th,8,56 & MASK != 0 drop          code, reserved bits (but an advert's flags)
//	        icmpv6 type T ip6 length . meta len != {L . 40+L, L+8 . 48+L} drop
//	        icmpv6 type T meta len 48+L @th,L*8,16 != {OPTIONS} drop   the one option: link-layer address (or nonce)
//	        icmpv6 type T meta len 48+L @th,L*8,16 LLADDR meta iif . @th,(L+2)*8,48 != @sandbox-port-macs drop
//	        for mld report, mld done, mldv2 report:
//	        icmpv6 type T ip6 nexthdr != hop-by-hop drop
//	        icmpv6 type T @nh,320,64 != 3a00050200000100 drop   the router alert, nothing else
//	        icmpv6 type {mld report, done} @th,8,56 & ff0000ffffffff != 0 drop
//	        icmpv6 type {mld report, done} ip6 length . meta len != 32 . 72 drop
//	        icmpv6 type mldv2 report @th,8,40 & ff0000ffff != 0 drop
//	        icmpv6 type mldv2 report @th,48,16 . ip6 length . meta len != {M . 16+20M . 56+20M, M 1-8} drop
//	        icmpv6 type mldv2 report @th,48,16 >= I+1 @th,(8+20I+1)*8,24 != 0 drop   I 0-7: no sources, no aux data
//	    chain prerouting  type filter hook prerouting priority filter (-200), policy accept
//	        meta iif vmap @sandboxes
//	    map port-logs { type iface_index : verdict }         sandbox port -> jump log-<key>
//	    chain forward     type filter hook forward priority filter (-200), policy accept
//	        meta iif @sandbox-ports meta oif @sandbox-ports drop   no frame from a sandbox to another
//	        ether type ip meta iif @unfiltered-ip drop
//	        ether type ip6 meta iif @unfiltered-ip6 drop
//	            (each of these three first as `MATCH meta mark set M meta iif vmap @port-logs`:
//	            counted and logged as the input port's sandbox's; the plain drop if the map lacks it)
//	        ether daddr & 01:00:00:00:00:00 == 0 meta oif @sandbox-ports
//	            meta oif . ether daddr != @sandbox-port-macs drop  flooded unicast for a neighbour
//	    chain output      type filter hook output priority filter (-200), policy accept
//	        ether daddr & 01:00:00:00:00:00 == 0 meta oif @sandbox-ports
//	            meta oif . ether daddr != @sandbox-port-macs drop  the same, from the host
//	    chain sbx-<key>
//	        meta iif PORT ether saddr != SANDBOX-MAC drop      one pair per bridge port
//	        meta iif PORT arp saddr ether != SANDBOX-MAC drop
//	        arp htype != 1 drop                              only ARP for IPv4 over Ethernet
//	        arp ptype != ip drop
//	        arp hlen != 6 drop
//	        arp plen != 4 drop
//	        arp saddr ip != 0.0.0.0 meta iif . arp saddr ip != @sandbox-ip drop
//	        ether type arp jump arp-shape
//	        ether type arp accept
//	        ether type ip meta iif . ip saddr != @sandbox-ip drop
//	        ether type ip accept                             judged by table inet doorman-host
//	        ether type ip6 meta l4proto ipv6-icmp jump nd-shape
//	        ip6 saddr :: icmpv6 type nd-neighbor-solicit meta iif . icmpv6 target @sandbox-ip6 accept
//	        ip6 saddr :: icmpv6 type {nd-router-solicit, mld-listener-report, mld2-listener-report} accept
//	        ip6 saddr :: drop
//	        ether type ip6 meta iif . ip6 saddr != @sandbox-ip6 drop
//	        icmpv6 type nd-neighbor-advert meta iif . icmpv6 target != @sandbox-ip6 drop
//	        icmpv6 type {nd-router-advert, nd-redirect} drop
//	        ether type ip6 accept                            judged by table inet doorman-host
//	        drop                                             VLAN-tagged, PPPoE, any other type
//
// Every drop in a sbx-<key> chain (the sketch shows `drop`) is in fact
// `counter meta mark set N goto log-<key>`: it counts what it drops, marks
// it with the rule's number among the chain's drops, and hands it to the
// sandbox's log chain in the same table, which logs it to the sandbox's
// NFLOG group at most LogRate a second after a burst of LogBurst, and
// drops it (see LogRate):
//
//	chain log-<key>   one per sandbox and table with drops
//	    limit rate 10/second burst 20 packets log prefix "TABLE" group G snaplen 128
//	    drop
//	map log-groups { type inet_service : verdict }  (table inet doorman-host) group G -> jump sbx-<key>
//
// Apply hands each sandbox its group, from LogGroupBase on, and records it
// in log-groups (no rule looks the map up: its elements say which groups
// are taken, and by whom). ReadDrops reads the counters and marks,
// ReadLogGroup the group, and the sandbox's proxy logs what they count
// (package proxy/droplog). Check ignores the counters' values. The log
// chain of table bridge doorman-host first counts, by their marks, the
// forward chain's drops of what the sandbox's ports send (`meta mark M
// counter`, one per drop, commented as the drop). The other drops of the
// shared chains (flooded unicast to a sandbox's port, the shape chains)
// are neither counted nor logged: see docs/runtimes.md.
//
// (One rule per type or address where the sketch shows a set: the rules
// name each type on its own. In the bridge table's accepts, accept ends
// the table's say only: the inet table still judges what they let pass.
// A concatenation `A . B != {...}` is one comparison of the registers A
// and B were loaded into, each taking whole 32-bit registers, compared
// unequal to each value in turn.)
//
// Besides its tables, the layer holds one setting of each bridge port:
// its isolation (see Neighbours).
//
// The matches, verdicts and commented rules both tables are built from,
// the comparison Check makes and the namespace handle are package
// enforce/nft's, shared with the sandbox's own ruleset, so that the two
// layers' rules read the same and are checked the same way. This package
// keeps what only the layer needs: its set lookups and its Ethernet, ARP
// and neighbour discovery fields (match.go). Ranges and prefixes are
// encoded as the nft command encodes them (see package nft).
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
// # Redirect
//
// Some workloads never pass the IP hooks of their own namespace: gVisor's
// runsc runs its own network stack and writes Ethernet frames to the
// sandbox's veth through a packet socket; a microVM (Kata Containers'
// tcfilter mode, Firecracker behind the tc-redirect-tap CNI plugin) has
// its frames moved between its tap and the veth by tc mirred redirects.
// The sandbox's ruleset (package enforce) sees none of them; only the
// host end of the veth does. So the layer redirects there what the
// sandbox sends past its ruleset, and every runtime gets the same policy:
//
//	table inet doorman-host-nat
//	    map sandboxes, sandbox-macs   as in table inet doorman-host, -> jump sbx-<key>
//	    chain prerouting  type nat hook prerouting priority -150
//	    chain sbx-<key>
//	        ip[6] daddr RESOLVER udp|tcp dport 53 redirect to :DNS4|DNS6   with the DNS filter
//	        ip[6] daddr RESOLVER tcp dport 53 return                      without it
//	        ip[6] daddr DIRECT tcp [dport PORTS] return                   allowDirect
//	        meta nfproto ipv4 meta l4proto tcp redirect to :TCP4
//	        meta nfproto ipv6 meta l4proto tcp redirect to :TCP6
//	table inet doorman-host-listen
//	    map listeners { type inet_proto . inet_service : verdict }    a listener's port -> jump sbx-<key>
//	    chain input  type filter hook input priority filter
//	        meta l4proto . th dport vmap @listeners
//	    chain sbx-<key>
//	        ct status dnat accept
//	        drop
//
// and table inet doorman-host's chain accepts, before its final drop, a
// family's TCP while it is new (the NAT core redirects it after the
// chain) and every later packet of a redirected connection (ct direction
// original, ct status dnat), and DNS to the resolvers the filter takes.
// The proxy's listeners and the DNS filter's sockets in the runtime's
// namespace (Spec.Redirect: their ports) are bound to its wildcard
// address: the redirect takes a connection to the address of the
// interface it came in on (the bridge's, on a bridge port), keeping its
// original destination for SO_ORIGINAL_DST, and the filter answers from
// the address a query came to, which conntrack turns back into the
// resolver's, as inside the sandbox. Table inet doorman-host-listen drops
// whatever reaches those ports without the redirect (the LAN, the
// runtime's own processes, another sandbox writing to them), and the
// proxy refuses a connection whose original destination is its own
// listener.
//
// The redirect is NAT, not TPROXY: with br_netfilter on (Docker and
// Kubernetes turn it on), the inet PREROUTING hooks of a frame that
// enters by a bridge port run inside br_netfilter's pass, and the socket
// TPROXY assigns there is dropped by ip_rcv_core when the frame reaches
// the IP layer (measured here: every SYN was reset). Its nat chain's
// priority, -150, puts it first among the chains the NAT core runs at
// destination NAT (Docker's and kube-proxy's are at -100): a sandbox's
// connection to a service address goes to the proxy, not to the service's
// endpoint. A nat chain that another tool puts before -150 and that NATs
// a sandbox's traffic would take a new connection's first packet past the
// proxy (the connection's later packets are dropped: they are not the
// layer's redirect); none of Docker, Podman, kube-proxy or the CNI
// reference plugins does. A routed host interface without an address of
// the family (Calico's veths) cannot take a redirect: the redirect drops
// what it cannot redirect.
//
// A runc sandbox's TCP keeps going to the proxy's listener inside its
// namespace (the in-namespace redirect, over loopback); the host-side
// redirect sees it only once the workload has flushed its own rules.
// Measured side by side (docs/benchmarks.md, BenchmarkRuntimeStacks),
// moving runc to the host-side path would cost it about the same on a
// plain HTTP connection and more on a TLS one, and would make the ruleset
// inside the namespace pass the sandbox's TCP out, leaving it no second
// layer: runc stays where it is, and the two paths lead to the same
// proxy, policy and log.
//
// # Identity
//
// A sandbox must not pass for a neighbour: answer ARP or neighbour
// discovery for its address and receive the host's traffic for it, or
// take its address and have its answers taken for the neighbour's
// replies. So on each host interface the layer pins the sandbox's
// identity (a Pin): the MAC of its end of the veth (bridge ports), and its
// addresses: IPv4, IPv6 global and link-local, and the EUI-64 link-local
// address of its MAC, which the kernel gives it when the link comes up.
// Frames from a bridge port must carry the MAC as their source and as the
// ARP sender's hardware address; ARP must be for IPv4 over Ethernet and
// name one of the addresses as its sender (or 0.0.0.0, a probe); IPv4 and
// IPv6 packets from a bridge port or a routed interface must come from
// one of them, and IPv6 may come from :: only for duplicate address
// detection of one of them, router solicitations and MLD reports;
// neighbour advertisements must name one of them as their target. These checks come before
// anything is accepted, so a packet forged with a neighbour's address is
// never taken for a reply. Router advertisements and redirects from a
// bridge port are dropped in the bridge table too, which holds without
// br_netfilter.
//
// The addresses are in sets keyed by interface index and address, one
// per family and table, whose elements come and go with the sandbox's
// other elements; the sandbox's chain looks its packets up there
// (`meta iif . ip saddr != @sandbox-ip drop`), so that the rules stay
// per sandbox and Check compares every pinned address. On a routed
// interface the inet chain pins them; ARP there has no neighbour to
// impersonate (the veth has two ends, and the other is the host's). On a
// bridge port the bridge table pins them, on every frame that enters the
// port, bridged or for the host.
//
// Nor may a sandbox receive what is meant for a neighbour. With its ARP
// and neighbour advertisements pinned, the host and the neighbours send
// it only what is addressed to it; but a bridge floods a unicast frame to
// every port while it has not learnt (or has forgotten, after the ageing
// time) which port its destination MAC is behind, and a workload holding
// CAP_NET_RAW reads everything that reaches its interface. So the bridge
// table's forward hook (frames bridged from another port) and output hook
// (the host's own frames) drop a unicast frame that would leave by a
// sandbox's port for any MAC but the sandbox's.
//
// Apply reads a pin from the sandbox's end of the veth when the spec has
// none for the interface (the CNI plugin gives the addresses its IPAM
// assigned instead, through Spec.IPAM), and returns the pins it
// installed. Its caller records them and passes them back in Spec.Pins
// ever after, so that a workload holding CAP_NET_ADMIN, which can change
// its MAC and addresses once it runs, never gets them pinned by a later
// Apply (a second CNI ADD, the hook's second run). Addresses the sandbox
// gains later (SLAAC from router advertisements, a DHCP lease, privacy
// addresses) are not pinned, and packets from them are dropped: the
// sandboxes doorman serves get theirs from IPAM.
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
// sandbox's (read from the sandbox's end of the veth, see Identity), so
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
// # Neighbours
//
// Sandboxes on one bridge must not reach each other at layer 2: every
// frame a neighbour receives is a channel, whatever the IP layer says of
// it. A sandbox's broadcasts and multicasts (ARP requests, neighbour
// solicitations, MLD reports) reach every port of the bridge, and a
// workload holding CAP_NET_RAW sends any frame it likes to a neighbour's
// MAC. So two things keep a sandbox's frames from every other sandbox,
// and either holds without the other:
//
//   - Apply turns on the isolation of each sandbox's bridge port
//     (IFLA_BRPORT_ISOLATED, `bridge link set dev PORT isolated on`,
//     Linux 4.18): the bridge forwards nothing from an isolated port to
//     another, while the bridge itself (the host, the gateway) still
//     receives everything and still sends to every port. Apply sets it
//     before it sends its batch and turns it off again if the batch fails;
//     it records the ports it isolated in set isolated-ports, and Remove
//     turns their isolation off again (isolation another tool had set
//     stays). Check fails on a port whose isolation is off.
//   - The bridge table's forward hook drops every frame from a sandbox's
//     port to another sandbox's port (`meta iif @sandbox-ports meta oif
//     @sandbox-ports drop`). It sees bridged frames only, not the host's
//     own, which go through the output hook.
//
// Both sit in the runtime's namespace, which the workload cannot reach:
// flushing its own rules changes neither. They hold on every Linux bridge
// the layer finds a sandbox's port on: the CNI bridge plugin's, Podman's
// cni-podman0, docker0 and Docker's user-defined bridges (in dockerd's
// namespace), the inner docker0 of Docker-in-Docker (in the outer
// container's namespace, where the inner daemon's hook applies the
// layer). A routed interface (a veth without a bridge, as the ptp plugin
// and kindnet make) has no neighbour to isolate: its other end is the
// host's.
//
// What reaches the host, and the bridge's ports that are not a sandbox's
// (the pods of an excluded namespace, a container started without
// doorman), is held to what address resolution needs. The sandbox
// chain sends ARP to chain arp-shape and ICMPv6 to chain nd-shape,
// shared by every sandbox, which drop anything but the exact layouts:
// ARP requests and replies of exactly 28 bytes (or 46 whose last 18 are
// zeros: padding to Ethernet's minimum frame), never a trailer; router
// and neighbour solicitations and neighbour advertisements with no
// extension header, code 0, reserved bits 0, at most one option (the
// link-layer address, which must be the sandbox's MAC, or a solicitation's
// nonce for duplicate address detection, RFC 7527) and no byte after the
// IPv6 payload; MLD reports and dones behind exactly the router alert
// header Linux sends, MLDv1 of 24 bytes, MLDv2 with 1 to 8 records of a
// group each, without sources or auxiliary data. `meta len` is the frame
// after its Ethernet header, so a frame with bytes after the packet (which
// the host's IP layer trims, but a packet socket on a port sees) does not
// match the lengths. What remains free is what the protocols leave free:
// an ARP request's target hardware and protocol addresses, a
// solicitation's target, its nonce, an MLD record's group: a few bytes a
// frame, to the host and the ports that are not sandboxes'. The IP layer
// (table inet doorman-host) judges the neighbour discovery and MLD that
// pass, as before.
//
// Sandboxes that the policy lets talk to each other still can, through
// the layers that judge it: the proxy dials a neighbour from the host
// (an address entry naming it, or a name that resolves to it), and the
// host's own frames reach every port. What no longer passes is direct
// traffic between two sandboxes on one bridge: an allowDirect entry
// naming a neighbour on the same bridge (its ARP and neighbour discovery
// never reach it), and, with br_netfilter, UDP to a service address that
// the host's DNAT sends to a sandbox on the same bridge (br_netfilter
// bridges the rewritten frame from port to port, which isolation stops;
// kube-proxy's ClusterIPs with a backend on the same node's bridge CNI)
// or back to the sender itself (hairpin). TCP is unaffected: the proxy
// takes it. The layer does not answer ARP for the neighbours in their
// stead (proxy_arp_pvlan, RFC 3069): that is a setting of the bridge,
// shared with every container on it, and IPv6 has no counterpart without
// a proxy entry per address.
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
//   - A workload on a stack of its own (gVisor, a microVM) resolves its
//     neighbours' addresses itself: the bridge's port isolation keeps a
//     neighbour sandbox's from it, so it cannot reach one even where its
//     policy names the address (a runc workload's proxy can, dialing from
//     the runtime's namespace). TCP it bridges to a port that is not a
//     sandbox's takes the redirect only where br_netfilter passes bridged
//     frames to the inet hooks; elsewhere the layer drops it. (Neither
//     case is covered by the tests.)
//   - ARP and neighbour discovery, in their shapes, still reach the host
//     and the ports of the bridge that are not sandboxes', with the
//     sandbox's own identity; the host's own broadcasts and multicasts
//     (its ARP requests, router advertisements) reach every port, the
//     sandbox's too. Direct traffic between sandboxes on one bridge does
//     not pass (see Neighbours).
//   - An MLDv2 report with sources (source-specific multicast) or more
//     than 8 records is dropped: the sandbox's joins of such groups go
//     unheard where the bridge snoops multicast with a querier.
//   - The pins hold the identity the sandbox had at the first Apply;
//     where a workload could change its own before that (a runtime that
//     starts it before the layer is applied), it would be pinned.
//   - Packet sockets in the runtime's namespace (tcpdump, a DHCP server)
//     see frames before netfilter does.
package hostlayer
