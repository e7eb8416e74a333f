// Package enforce installs, checks and removes the nftables ruleset that
// doorman puts into a sandbox's network namespace: table inet doorman,
// which sends all outbound TCP to the sandbox's transparent proxy and
// rejects everything else but DNS to the sandbox's resolvers, ICMP (by
// policy: small echo requests to allowDirect destinations), the ICMP errors
// of admitted flows, IPv6 neighbour discovery, loopback and replies. The CNI plugin
// and the OCI hook both call it, so the two entry points enforce the very
// same rules.
//
// The package talks netlink through google/nftables with
// nftables.WithNetNSFd: it needs neither the nft binary nor setns in the
// caller. Apply sends the whole table in one batch (add table, delete
// table, add table, chains, rules; or, where there is no table yet, create
// it exclusively, chains, rules), so a namespace holds the old ruleset or
// the new one, never a mix and never none, and re-applying is idempotent.
// Other tools' tables in the namespace (Docker's nat rules for its
// embedded DNS at 127.0.0.11, for example) are never touched.
//
// The matches, verdicts and commented rules the ruleset is built from, the
// comparison Check makes and the namespace handle are package enforce/nft's,
// shared with the host-side layer, so that the two layers' rules read the
// same and are checked the same way. This package keeps what no other
// layer needs: the ruleset's layout (ruleset.go), and the redirect, the
// rejects and the allowDirect match (match.go). Ranges and prefixes keep
// the encoding this ruleset has always had (two comparisons, an address
// masked whatever the prefix length; see package nft), so that Check of a
// sandbox an earlier release enforced still passes.
//
// # Chain layout
//
//	table inet doorman
//	chain nat-output      type nat hook output priority -100, policy accept
//	    oifname "lo" return                               loopback stays local
//	    ip[6] daddr RESOLVER tcp dport 53 return          TCP DNS is not proxied
//	    meta nfproto ipv4 meta l4proto tcp redirect to :Port4
//	    meta nfproto ipv6 meta l4proto tcp redirect to :Port6
//	chain nat-prerouting  type nat hook prerouting priority -100, policy accept
//	    ip[6] daddr RESOLVER tcp dport 53 return
//	    meta nfproto ipv4 meta l4proto tcp fib daddr type != local redirect to :Port4
//	    meta nfproto ipv6 meta l4proto tcp fib daddr type != local redirect to :Port6
//	chain filter-input    type filter hook input priority 0, policy accept
//	    tcp dport PORT ct status dnat accept              redirected: to the proxy
//	    tcp dport PORT reject with tcp reset              direct: refused
//	chain filter-output   type filter hook output priority 0, policy drop
//	    ct state invalid drop
//	    meta l4proto != {icmp, ipv6-icmp} ct state established,related accept
//	    meta l4proto icmp|ipv6-icmp ct state established ct direction reply accept
//	                                                      replies to queries sent to the sandbox
//	    icmp type {destination-unreachable, time-exceeded, parameter-problem} ct state related accept
//	    icmpv6 type {destination-unreachable, packet-too-big, time-exceeded, parameter-problem}
//	        ct state related accept
//	    oifname "lo" accept
//	    ip daddr 127.0.0.1 tcp dport Port4 ct status dnat accept
//	    ip6 daddr ::1 tcp dport Port6 ct status dnat accept
//	    icmpv6 type {nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert} ip6 hoplimit 255 accept
//	    icmpv6 type {mld-listener-report, mld-listener-done, mld2-listener-report} ip6 hoplimit 1 accept
//	    ip[6] daddr RESOLVER udp|tcp dport 53 accept
//	    ip[6] daddr DIRECT tcp|udp [th dport PORTS] accept one per allowDirect entry
//	    ip daddr DIRECT icmp type echo-request ip hdrlength 5 ip length 28-92 accept
//	                                                      only if AllowICMP, one per IPv4 allowDirect prefix
//	    ip6 daddr DIRECT icmpv6 type echo-request ip6 length 8-72 accept
//	                                                      only if AllowICMP, one per IPv6 allowDirect prefix
//	    meta l4proto tcp reject with tcp reset
//	    reject with icmpx admin-prohibited
//	chain filter-forward  type filter hook forward priority 0, policy drop
//	    as filter-output, without the loopback, redirect and neighbour rules
//
// (With the DNS filter, the resolvers' DNS is redirected to the filter's
// ports in both nat chains, and filter-output accepts it there as it does
// the redirected TCP.)
//
// A family whose port is 0 gets no redirect and no input or accept rule:
// its TCP is reset. nat-prerouting catches TCP that a daemon inside the
// sandbox forwards for its own containers, so they go through the proxy
// too; `fib daddr type != local` leaves connections to the sandbox itself
// (published ports, the nested daemon's own traffic) alone. A kernel
// without fib rejects the whole batch; Apply then probes for the fib
// expression in a scratch table and fails with "kernel lacks nft fib"
// rather than install weaker rules.
//
// The redirected connections need their own accept rule in filter-output:
// the redirect reroutes them to lo, but the output hook keeps reporting
// the interface the packet started with, so `oifname "lo"` does not match
// them. The rule names exactly what the redirect writes: the loopback
// address, the listener port, and ct status dnat.
//
// Mode none (Spec.DenyAll) has only filter-output and filter-forward, with
// no DNS, allowDirect, echo or redirect rules: loopback, neighbour
// discovery, replies to inbound connections and the ICMP errors about them
// pass; everything else is rejected.
//
// # ICMP
//
// ICMP queries carry data: echo, timestamp, information and address mask
// requests reach any address with a payload of the sender's choosing, and
// echo replies bring it back (ptunnel-ng, icmptunnel and hans carry TCP so).
// Where the runtime opens net.ipv4.ping_group_range (Docker does), a ping
// socket needs no capability at all. So no ICMP query leaves but, with
// AllowICMP, echo requests to the allowDirect prefixes with at most 64
// bytes of data (IPv4: no options and a total length of at most
// 20+8+64; IPv6: a payload length of at most 8+64). Conntrack reassembles
// fragments before these hooks, so the lengths are those of whole packets.
//
// What else leaves is what admitted traffic needs: the errors that
// conntrack relates to a known flow, of the types that keep it working
// (unreachable, fragmentation needed and packet too big, time exceeded,
// parameter problem), and replies to queries sent to the sandbox.
// Conntrack relates an error only if its outer destination is the flow's
// peer. ICMP does not pass on the strength of conntrack's state alone:
// it relates source quench and redirects to a flow as it does errors, and
// it calls a second echo request established once the first one with
// that identifier was answered, which would let large echoes follow a
// small one. Router advertisements and redirects never leave: the
// neighbour discovery rules name only solicitations and neighbour
// advertisements (conntrack does not track them; an ICMPv6 redirect is
// invalid to it and dropped).
//
// # No exemption inside the sandbox
//
// Nothing in the ruleset says "but let this one through". The proxy's
// listening sockets are created in the sandbox netns, but the proxy
// process lives outside it and its upstream connections leave from its own
// namespace, so the sandbox never has to pass proxy traffic. Exemptions by
// packet mark or socket uid, as gost sidecars and istio-cni use, would be
// forgeable here: the workload is root in its container and holds
// CAP_NET_RAW, which is enough to set SO_MARK on Linux >= 5.17, and it can
// run as any uid.
//
// # Reject, not drop
//
// Everything the ruleset refuses is rejected, so that clients fail at once
// with a clear error instead of hanging until their timeouts: TCP gets a
// reset (ECONNREFUSED), other packets ICMP or ICMPv6 admin-prohibited
// (EHOSTUNREACH or EACCES on a forwarded flow; a local sender already gets
// EPERM from its send). Dropping would hide nothing, since the workload is
// assumed to know the ruleset. Only ct state invalid is dropped (there is
// no one to answer), and the drop policy of the filter chains is a
// fail-closed backstop that the final reject rule keeps from being used.
//
// # Limits
//
// Rules inside the sandbox cannot hold against a workload with
// CAP_NET_ADMIN in it (it can flush them), nor against AF_PACKET frames,
// which bypass the namespace's IP hooks; only a layer outside the sandbox
// covers those (package hostlayer, which also pins the sandbox's MAC and
// addresses: this ruleset cannot know which addresses are the sandbox's).
// Neighbour discovery, always allowed, could carry a few bytes to any IPv6
// address as well; the host-side layer keeps it on the link. Applying a narrower ruleset does not
// cut flows already established (conntrack keeps them).
package enforce
