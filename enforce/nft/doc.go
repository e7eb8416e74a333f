// Package nft is doorman's nftables toolkit: the matches, verdicts and
// commented rules that the sandbox's ruleset (package enforce), the
// host-side layer (package enforce/hostlayer) and the masquerading of
// `doorman run` (package runner) build their rules from; the
// comparison by which their Check functions tell whether an installed rule
// is the one they would install; and the network namespace handles they
// talk netlink through.
//
// It exists so that there is one vocabulary of matches. `ip daddr A`,
// `th dport P` or `ct state related` is spelled once, here, so the two
// layers' rules read the same, an encoding cannot drift between them, and
// CHECK compares both layers' rules the same way.
//
// # Expressions
//
// Each builder is named after the nft syntax it produces, which its doc
// comment gives. A match loads one value into register 1 (Reg) and
// compares it at once, as the nft command does, and returns its
// expressions as a slice: a rule is the concatenation of its parts,
// Rule(comment, parts...), and the comment names it in `nft list ruleset`
// and in the errors of Check. The builders are pure: nothing here holds
// state.
//
// What only one layer matches on (the host-side layer's set lookups and
// Ethernet and ARP fields, the sandbox's redirect and rejects) stays in
// that layer, built from the primitives here (Load, Eq, Neq, Field).
//
// Some rules both layers install alike, comments included: the ICMP
// errors of admitted flows (ICMPErrorRules), neighbour discovery
// (NDRules, to which the host-side layer adds destinations) and MLD
// (MLDRules), and allowICMP's small echo requests (EchoRule, in each
// layer's encoding).
//
// # Two encodings of one match
//
// The nft command encodes a port or length range as one range expression,
// and a prefix as the address alone when the prefix is full-length, masked
// when it is shorter, and not at all when it is /0 (the family match is
// all that is left). The host-side layer has always encoded them so:
// DportRange, IPLengthRange, DaddrPrefix. Table inet doorman has always
// encoded a range as two comparisons of one load (>= LO, <= HI) and a
// prefix as the address masked whatever its length; so has the
// masquerading of `doorman run`: DportBetween, IPLengthBetween,
// DaddrMasked, SaddrMasked. The kernel judges packets alike either way.
// But Check compares expressions, not what they mean: a sandbox enforced
// by an earlier release passes CHECK after an upgrade only if the rules
// are built again with the encoding they were installed with. So both
// encodings are here, named apart, and each layer keeps its own.
//
// # Comparing installed rules
//
// SameExprs compares a rule as the kernel hands it back with the one that
// would be installed, expression by expression as netlink attributes: each
// expression read back is marshalled again by google/nftables and
// compared with the marshalled expression that would be sent. Attributes
// the library does not model, and those it leaves out when it marshals,
// are thereby ignored on both sides; handles, positions and comments are
// not compared. Where the kernel fills in attributes itself (the proto-max
// register and the flags of a redirect), the layer spells them out in the
// rule, so that the two compare equal. RuleName names an installed rule by
// its comment in the errors.
//
// # Namespaces
//
// OpenNetNS opens a network namespace by path (/proc/PID/ns/net, a bind
// mount under /var/run/netns) and a lasting nftables connection into it
// with nftables.WithNetNSFd: no nft binary is needed, and the calling
// thread never changes namespace. A path that exists but holds no network
// namespace (a leftover mount point of a namespace already deleted) is an
// error matching ErrNotNetNS.
package nft
