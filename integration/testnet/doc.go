// Package testnet builds a throwaway, self-contained network for doorman's
// end-to-end tests: a fake internet with HTTPS, HTTP, raw TCP, UDP and DNS
// servers, a namespace that plays the container runtime's ("host")
// namespace, and sandboxes that play containers.
//
// It exists because doorman's promises (a sandbox reaches only the names its
// policy allows, a spoofed SNI still reaches the real host, DNS to a
// non-resolver never arrives) can only be proved against real namespaces,
// real routes and real servers, and because such tests must never send a
// packet off the machine nor touch the root namespace's routes. Everything
// here lives in network namespaces the package creates and deletes itself;
// the root namespace is only used to run `ip netns add` (named namespaces
// make `ip netns exec`, curl and debugging work).
//
// It is a normal package (not a _test.go file) so that the proxy, CNI plugin,
// OCI hook and escape-suite tests can share it. Every constructor takes a
// testing.TB and registers its teardown with t.Cleanup, so namespaces are
// deleted and servers closed even when a test fails. Tests need root.
//
// # Topology
//
//	 sandbox netns "dm-sbxN-<id>"      host netns "dm-host-<id>"            inet netns "dm-inet-<id>"
//	┌──────────────────────────┐     ┌───────────────────────────────┐     ┌───────────────────────────┐
//	│ eth0 198.51.100.4N+2/30  │veth │ dmv<hex> 198.51.100.4N+1/30   │     │ lo: servers               │
//	│      2001:db8:2:N::2/64  ├─────┤          2001:db8:2:N::1/64   │veth │   203.0.113.53, .54 (DNS) │
//	│ default via host side    │     │ eth0 198.51.100.2/30          ├─────┤   2001:db8:100::53, ::54  │
//	└──────────────────────────┘     │      2001:db8:1::2/64         │     │   AddHost addresses       │
//	                                 │ default via inet; forwarding  │     │ uplink 198.51.100.1/30    │
//	                                 └───────────────────────────────┘     │        2001:db8:1::1/64   │
//	                                                                       └───────────────────────────┘
//
// # Address plan
//
// Host side (all of it routed from inet to host):
//
//	198.51.100.0/30        inet ↔ host uplink: inet .1, host .2 (Net.InetAddr4, Net.HostAddr4)
//	2001:db8:1::/64        inet ↔ host uplink: inet ::1, host ::2 (Net.InetAddr6, Net.HostAddr6)
//	198.51.100.4N/30       sandbox N (N = 1..31): host side .4N+1, sandbox .4N+2
//	2001:db8:2:N::/64      sandbox N: host side ::1, sandbox ::2
//	198.51.100.128/25      free for the caller (e.g. a CNI bridge inside host)
//	2001:db8:3::/64        free for the caller (e.g. a CNI bridge inside host)
//
// inet routes 198.51.100.0/24 and 2001:db8::/40 to host, so a range the
// caller sets up inside host (a CNI bridge) is reachable from the servers
// without further routes. host holds unreachable routes for the same two
// ranges, so an address nobody holds fails fast instead of looping.
//
// Fake internet (addresses on inet's loopback device):
//
//	203.0.113.53, 2001:db8:100::53   the resolver (Net.DNS, Net.DNS6), UDP+TCP 53
//	203.0.113.54, 2001:db8:100::54   a "rogue" DNS server (Net.RogueDNS, Net.RogueDNS6)
//	203.0.113.0/24, 2001:db8:100::/64  the rest: addresses given to AddHost
//
// Addresses in those two ranges that no server holds are unreachable: inet
// answers with an ICMP error, so a TCP connect fails at once over IPv4 and
// within about a second over IPv6 (the first ICMPv6 error can race the
// connect call). inet has no default route, so a packet to any other address
// (the machine's real uplink in 192.0.2.0/24 included) dies in inet.
//
// A sandbox's index N is free again once its test's cleanup has run, so
// subtests can make sandboxes one after another without running out.
//
// # Servers
//
// Every virtual host made by AddHost listens on each of its addresses:
//
//	TCP 80, 8080     HTTP/1.1 and h2c (prior knowledge, and Upgrade: h2c)
//	TCP 443, 8443    HTTPS (HTTP/1.1 and h2); certificate chosen by SNI among all
//	                 names of the Net, the host's own certificate otherwise
//	TCP 22, 5432, 9000, 6379  recorders: count connections and bytes, never answer
//	UDP 443, 9999    echo every datagram back, and count it
//
// Each HTTP response body is "<host name> <local addr:port> <method> <path>\n",
// naming the server that really answered, and the headers in HeaderHost,
// HeaderSNI, HeaderRemote and HeaderProto echo what the server saw. The
// servers count requests by the virtual host they ask for (RequestsFor).
// Fake101Path answers with a body holding a 101 status line, sent only once
// the next request on the connection has arrived.
//
// # Around the host
//
// AddLANHost puts hosts with the same servers on private addresses (RFC
// 1918, CGNAT, ULA: the host's LAN and a cloud's metadata service) in a
// namespace "dm-lan-<id>" that host routes to through a link of
// link-local addresses (169.254.77.0/30, fe80::1 and fe80::2); inet does
// not route there. ServeHost starts the servers in a namespace the caller
// made or opened (OpenNetns: a container's), and RecordICMP counts the ICMP
// and ICMPv6 messages that reach a namespace, by type.
//
// Both DNS servers answer A and AAAA (TTL 5 s) for every AddHost and AddRecord name
// (unless AnswerOnlyAt leaves a name to some of them: the others answer NXDOMAIN),
// NXDOMAIN for anything else, and NXDOMAIN for every name under "tunnel.test",
// which they count separately (TunnelQueries) for DNS-tunnelling tests.
// Commands started with Command or HostCommand resolve through Net.DNS
// (an /etc/netns/<name>/resolv.conf that `ip netns exec` mounts).
package testnet
