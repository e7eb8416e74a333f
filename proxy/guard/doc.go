// Package guard says which upstream addresses doorman's proxy may dial,
// and why not.
//
// The proxy lives in the runtime's (the host's) network namespace and dials
// from there. For a name entry it dials whatever addresses the name
// resolves to, and the owner of an allowed name decides those: a wildcard
// zone whose owner points "x.example.com" at 10.0.0.5, by an A record or a
// CNAME to another name, would otherwise turn the proxy into a way from
// the sandbox into the host, its LAN, the containers on the same bridge and
// the cloud's metadata service, on any port the client asked for. So every
// address the proxy dials, whatever admitted the connection and in every
// mode (open included: open means the internet, not the host's LAN), and
// every address the DNS filter passes to the sandbox, is checked here
// first.
//
// # What is refused
//
// An address is refused when it lies in one of these ranges:
//
//   - loopback (127.0.0.0/8, ::1), unspecified (0.0.0.0/8, ::), link-local
//     (169.254.0.0/16, fe80::/10), multicast (224.0.0.0/4, ff00::/8),
//     broadcast (255.255.255.255);
//   - private and shared space: RFC 1918 (10.0.0.0/8, 172.16.0.0/12,
//     192.168.0.0/16), RFC 6598 shared address space, CGNAT (100.64.0.0/10),
//     unique local IPv6 (fc00::/7), deprecated site-local IPv6 (fec0::/10);
//   - special-purpose space that is no destination on the internet:
//     benchmarking (198.18.0.0/15, used as internal fake-IP space),
//     reserved (240.0.0.0/4), IETF protocol assignments (192.0.0.0/24);
//   - cloud metadata services, listed one by one: 169.254.169.254 and
//     169.254.170.2 (link-local anyway), 100.100.100.200, fd00:ec2::254 and
//     168.63.129.16 (a public address);
//   - the proxy host's own addresses (every interface of its namespace);
//   - the proxy host's connected subnets: every unicast route of the main
//     routing table of its namespace, of either family, that has no gateway
//     (for IPv4 these are the routes of scope link; IPv6 routes all have
//     scope global, so the gateway is what tells). That covers the host's
//     LAN, CNI and Docker bridges (the other containers on the same
//     bridge), and the host routes of routed (ptp) sandboxes. Default
//     routes are not subnets, and connected routes inside link-local space
//     or inside the IPv6 forms that embed IPv4 (below) are left to those
//     rules.
//
// The host's addresses and routes are read through netlink in the calling
// thread's namespace and reused for a second.
//
// IPv4-mapped IPv6 (::ffff:a.b.c.d) is judged as the IPv4 address it is.
// An IPv6 address that carries an IPv4 address to a translator or a
// tunnel is refused when an IPv4 address it carries is, in every mode: a
// NAT64, a relay or a tunnel on the host's network would deliver it
// there. The forms, and what is read of them:
//
//   - NAT64 (RFC 6052): the well-known prefix 64:ff9b::/96, in its one
//     layout; the local-use prefix 64:ff9b:1::/48 (RFC 8215), which a
//     network may take whole or as a /56, /64 or /96 inside it, in each
//     of the layouts /48, /56, /64 and /96, skipping the u octet (bits 64
//     to 71): the guard cannot know which one a NAT64 on the path uses,
//     and the attacker picks the one that delivers, so the address is
//     refused if any of those readings is. A reading in 0.0.0.0/8 does
//     not count (no translator delivers there, and some layout reads
//     every address of the prefix so) unless every reading is; a network
//     whose /56 or /64 inside the prefix reads as private space in
//     another layout names it in Config.NAT64Prefixes, which reads it in
//     its own layout only. The u octet and the suffix, which RFC 6052
//     reserves and translators ignore, are ignored here too.
//   - A configured NAT64 prefix (Config.NAT64Prefixes: /32, /40, /48,
//     /56, /64 or /96): the layout of its length, the longest prefix
//     holding the address deciding. Its addresses are not refused as
//     private space or a connected subnet themselves (a ULA prefix is
//     the translator's), only for what they carry.
//   - 6to4 (2002::/16): bits 16 to 47.
//   - Teredo (2001::/32, RFC 4380): the server's address (bits 32 to
//     63) and the client's (the last 32 bits, inverted), both: a relay
//     sends the packets to the client's mapped address and port, and
//     the server is the other host the address names.
//   - IPv4-translated (::ffff:0:0:0/96) and IPv4-compatible (::/96): the
//     last 32 bits.
//   - ISATAP (RFC 5214): an interface identifier 0000:5efe:a.b.c.d or
//     0200:5efe:a.b.c.d (the u and g bits free) in any prefix, since an
//     ISATAP router tunnels to the IPv4 address it names; a prefix's own
//     form (6to4, say) is read too.
//
// Not decoded: 6rd and other operator-chosen mappings whose prefix
// nothing names (a NAT64 of such a prefix goes in Config.NAT64Prefixes),
// and the rest of 64:ff9b::/32, which IANA assigns to no translator.
//
// Documentation addresses (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
// 2001:db8::/32) are not special: they count as public unless the host is
// connected to them. doorman's tests use them as their fake internet.
//
// # What admits a refused address
//
// Only an IP or CIDR entry of the policy that lies inside the narrowest
// refused range holding the address, and that admits the address (on the
// port, for a connection). "10.0.0.0/8" or "10.1.2.3:6379" opens those
// addresses of RFC 1918 space; "0.0.0.0/0" or "::/0" open nothing of it,
// since they are wider than the range. Ranges nest, and the narrowest one
// must be named: a connected subnet 10.88.0.0/16 (a bridge) is opened by
// "10.88.0.0/16" or an address in it, not by "10.0.0.0/8"; one of the
// host's own addresses only by an entry naming exactly it; a metadata
// service only by its own address. For an embedded IPv4 address, the entry
// must admit the IPv4 address. An address entry also admits connections
// to those addresses by address, with or without a name: that is how a
// private service is reached through the proxy. A name entry alone never
// reaches a refused address, whatever its DNS says, with one exception:
//
// # The names of a cluster
//
// A Kubernetes cluster's services and pods live on private addresses,
// which its pods reach by the names its DNS gives them under the cluster
// domain (api.default.svc.cluster.local). A Scope (Config.Scopes) opens
// the cluster's service and pod CIDRs to those names, and to no other:
// CheckName and CheckNameAnyPort, which the proxy calls for the addresses
// of a name a name entry admitted (it resolved them itself) and the DNS
// filter for the addresses of an answer to such a name, admit an address
// inside a Scope's prefix for a name under its domain when what refuses
// it is private space or a connected subnet. The host's own addresses,
// loopback, link-local, multicast and the metadata services stay refused
// whatever the prefixes hold, and so do addresses the client chose (mode
// open dials those) and names outside the domain, which therefore never
// reach the cluster's ranges, however their DNS points there.
package guard
