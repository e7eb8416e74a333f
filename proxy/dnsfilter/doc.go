// Package dnsfilter is doorman's DNS filter: a small forwarder that answers
// a sandbox's DNS queries by its policy.
//
// The sandbox's ruleset redirects its DNS (UDP and TCP port 53) to the
// filter's listeners, which, like the TCP proxy's, are created inside the
// sandbox's network namespace and held by the proxy process outside it. The
// filter forwards to the real resolvers, from the proxy's own namespace,
// only the queries for names the policy could admit, and answers every
// other query itself without forwarding it.
//
// # Why DNS is filtered
//
// DNS left open to the resolver is a tunnel. A workload that may send any
// query to a recursive resolver can write data into the names it asks for
// ("aGVsbG8.0001.t.attacker.example", TXT), and the resolver carries the
// query to the attacker's authoritative server and the answer back, though
// the workload never opened a connection to anything but the resolver.
// Dropping DNS altogether breaks every allowed name. The filter keeps DNS
// working for exactly the names the policy could admit: an exact name entry
// admits that name, a wildcard entry the names below it (not its apex), in
// both cases whatever the entry's ports, since a query carries no port. A
// query for any other name is answered REFUSED (see Config.DenyRcode) and
// never reaches a resolver, so the attacker's server never sees it. One
// kind of name not admitted is answered NXDOMAIN instead, equally without
// forwarding it: an admitted name with more labels after it
// ("api.example.com.svc.cluster.local"), which is what stub resolvers ask
// first when resolv.conf has a search list. musl ignores a REFUSED answer
// and waits out its timeout, and glibc stops walking the search list at
// one, where after NXDOMAIN both go on at once. Names
// are normalized as policy entries are (conf.NormalizeName): case, one
// trailing dot, IDNA; a name that does not normalize is never admitted.
//
// # Why ECH is removed
//
// Encrypted Client Hello (ECH) encrypts the real TLS server name; the
// ClientHello then shows only the ECH provider's public name. The TCP
// proxy decides by the server name, so a client with ECH could reach any
// host behind a shared front whose public name is allowed, and the log
// would not say which. Clients get ECH configurations from the "ech"
// SvcParam (key 5) of HTTPS and SVCB records (RFC 9460 and the TLS
// working group's ECH service-binding specification), so the
// filter removes that parameter from every HTTPS and SVCB record in every
// section of an answer (and drops "ech" from the record's "mandatory" list
// if it is there), and clears the AD bit of such an answer, since it is no
// longer the data that was authenticated. Other parameters (alpn, port,
// address hints) pass, the hints without their private addresses (below).
// Without a configuration clients send the real server name in the clear.
//
// # Why private answers are removed
//
// The owner of an allowed name decides its addresses, by an A record or a
// CNAME to any other name, and may point it at the host's LAN, another
// sandbox on the bridge or a metadata service (DNS rebinding). The proxy
// never dials such an address for a name (see package guard), and the
// sandbox should not learn it either, as dnsmasq's stop-dns-rebind keeps
// private answers from its clients. So the filter removes, in every mode,
// every address of an answer that the same guard refuses under the
// policy in force: A and AAAA records in every section, and the values of
// the ipv4hint and ipv6hint parameters of HTTPS and SVCB records (a hint
// left without values goes, and from the record's mandatory list with it).
// An address entry inside the private range (10.0.0.0/8, 10.1.2.3:6379)
// lets its addresses through, as it lets the proxy dial them. An answer
// that lost anything has its AD bit cleared, as for ECH. When the question
// is A or AAAA and the upstream answered records of that type but none is
// left, the query is answered as one not admitted (DenyRcode, REFUSED by
// default, with an Extended DNS Error "Prohibited" saying that every
// record was a private address, without naming it) and logged as a
// denial whose reason names the addresses ("private answer 10.0.0.5: RFC
// 1918 (10.0.0.0/8)"). CNAMEs are followed as the resolver followed them:
// what counts are the addresses at the end. Everything else in an answer
// is passed through whole: CNAME chains, other records, the rcode, the TC
// bit.
//
// # Rules
//
//   - Modes: none refuses every query; allowlist forwards the queries for
//     admitted names, of class IN, and refuses the rest; open forwards
//     every query. In both, private addresses are removed from the
//     answers. Every query, in every mode, is one log record.
//   - A query must have exactly one question and opcode QUERY: other
//     opcodes get NOTIMP, other question counts and unparsable messages
//     FORMERR. Packets shorter than a DNS header, and responses (QR set),
//     get no reply at all, as a reply could be used to reflect traffic.
//   - Zone transfers (AXFR, IXFR) are answered NOTIMP in every mode: they
//     are not lookups and take more than one message.
//   - Reverse lookups (PTR, or any type, under in-addr.arpa and ip6.arpa)
//     are admitted when the name is the full reverse name of an address
//     that an IP or CIDR entry admits (on any port), or when a name entry
//     admits the reverse name itself. Others are refused: whoever runs a
//     reverse zone (an IPv6 /48 delegation is free from tunnel brokers)
//     can read data written into the names below it just as with forward
//     names. The owner of an allowed address block is already reachable.
//   - The query sent upstream is built afresh: a new random ID, the
//     question as the client wrote it (case included, for 0x20), the RD,
//     CD and AD bits, and, if the client sent EDNS, an OPT record with its
//     UDP size and DO bit but none of its options (client subnet, cookies,
//     padding), so that nothing but the question leaves the sandbox.
//   - The answer must be a response to that query: same ID, opcode QUERY,
//     one question equal to the one sent (names compared ignoring case).
//     Over UDP, replies with another ID are ignored while the filter waits
//     for the right one; anything else that does not match counts as a
//     failed attempt, and the next resolver is tried. So is a SERVFAIL,
//     REFUSED or NOTIMP answer; if every resolver gives one, the last is
//     passed on. If none answers at all, the client gets SERVFAIL and the
//     log an error record.
//   - The transport upstream follows the client's: a UDP query is
//     forwarded over UDP and a truncated answer (TC) is passed back, so
//     that the client retries over TCP, which is forwarded over TCP. An
//     answer that does not fit the client's UDP size (512 bytes, or its
//     EDNS size) is truncated and TC set.
//   - At most Config.MaxInFlight queries are handled at once (default
//     256); the UDP reader then waits, and the kernel drops what overflows
//     its socket buffer. At most 64 TCP connections are served at once,
//     each closed after 10 s idle.
//
// # Log records
//
// Each query is one line of the decision log, written as
// decisionlog.DNSQuery (package decisionlog defines the schema): message
// "dns" and the fields sandbox, proto (udp, tcp), client, name
// (normalized when it could be), qtype, verdict (allow, deny, error), rule
// (the entry that admitted the name), reason, rcode ("NOERROR",
// "REFUSED", ...; "none" when no reply was sent), upstream (the resolver
// that answered or was tried last, "" if none), ech_removed,
// private_removed (how many private addresses were removed from the
// answer: records and hint values) and duration_ms. Allowed queries log at
// INFO, denied ones at WARN, errors at ERROR.
//
// # Wiring
//
// ServeUDP and ServeTCP serve listeners made anywhere; for the sandbox they
// are created inside its network namespace. UDP replies are sent from the
// address each query was sent to (IP_PKTINFO), so that conntrack can undo
// the redirect even when the socket is bound to a wildcard address.
// Upstream queries use a plain net.Dialer in the proxy process's namespace.
package dnsfilter
