// Package conf is doorman's policy model: what one sandbox may reach, how
// that is written (in a CNI conflist as JSON, or in a plain policy file
// that live edits rewrite), and how a connection is matched against it.
//
// It exists so that the CNI plugin, the OCI hook, the proxy and the CLI
// read and judge a policy the same way: one parser, one matcher, one
// canonical form.
//
// # Modes
//
//   - none: nothing leaves the sandbox.
//   - allowlist: a connection leaves only if an entry admits it.
//   - open: everything leaves, and every connection is still logged (the
//     audit/learning mode).
//
// A policy keeps its entries in every mode, so that switching from
// allowlist to none or open and back does not lose the list.
//
// # Entries
//
// Entries are case-insensitive; internationalized names are turned to
// their ASCII (xn--) form with the IDNA lookup profile; one trailing dot
// is dropped.
//
//	example.com          that name only
//	*.example.com        any name below example.com, at any depth, not example.com itself
//	203.0.113.7          an IPv4 or IPv6 address
//	10.0.0.0/8           a CIDR prefix; 2001:db8::/32 for IPv6
//	example.com:443      any entry may end in :port ...
//	*.example.com:8000-8999   ... or :lo-hi (inclusive); without a port, every port
//	[2001:db8::1]:443    IPv6 with a port goes in brackets, also [2001:db8::/32]:443
//
// Names are matched against the name a connection carries (TLS SNI, HTTP
// Host); IP and CIDR entries against its original destination address, and
// they are the only entries that can admit a connection that carries no
// name. Every entry also checks the original destination port.
//
// Choices the grammar makes, and why:
//
//   - A bare "*" is an error that points to "mode: open". A wildcard that
//     admits everything would hide, in a list that looks restrictive, the
//     one decision that matters; "mode: open" says it plainly and keeps
//     logging.
//   - "*.example.com" does not admit example.com: the apex is often a
//     different service, and listing it is one more line.
//   - A wildcard is allowed only as the whole first label ("*.x.com"), not
//     "a*.x.com" or "*.*.x.com": partial-label patterns are easy to get
//     wrong and "*." already covers every depth.
//   - '_' is allowed in names (_acme-challenge, _dmarc and some cloud
//     hosts use it); hyphens are not checked beyond being allowed, since
//     names like "r3---sn-abc.googlevideo.com" and labels ending in '-'
//     exist. Other characters than letters, digits, '-', '_' and the dots
//     are errors.
//   - A name whose last label is numeric ("1.2.3", "010.0.0.1", "0x7f.1")
//     is read as an IPv4 address, and is an error if it is not a valid one:
//     no top-level domain is numeric, and some resolvers read such names
//     as addresses.
//   - A CIDR prefix with host bits set ("10.1.2.3/8") is an error that
//     suggests the masked prefix: masking silently would widen the
//     allowlist on a guess about what the writer meant.
//   - An IPv4-mapped IPv6 address or prefix (::ffff:10.0.0.0/104) is
//     stored as IPv4 (10.0.0.0/8), and addresses are unmapped before
//     matching, so one rule covers both spellings. An IPv6 prefix that only
//     partly covers the mapped range (::/0) does not match IPv4.
//   - A bare IPv6 address has no port: "2001:db8::1:443" is the address
//     2001:db8::1:443. A port needs brackets.
//   - Addresses with a zone (fe80::1%eth0), URLs ("https://x.com/"),
//     whitespace inside an entry and empty entries are errors.
//
// An invalid entry is an error that names the entry and says why (see
// EntryError). A policy with any invalid entry is not loaded at all
// (NewPolicy, ParseJSON and ParseFile return nil and every error), and the
// caller falls back to DenyAll: doorman fails closed.
//
// # Destinations outside the proxy
//
// A sandbox's allowDirect destinations (Direct) are written in the same
// grammar, but only IP addresses and CIDR prefixes qualify: a name can only
// be judged by the proxy, which reads it from the connection and resolves
// it itself. ParseDirect is the one place that rule is checked, and a
// Direct is its canonical string in JSON.
//
// # Empty means deny
//
// An empty allowlist in allowlist mode admits nothing. The opposite reading
// ("no list means no restriction") turns a missing key, a typo or a failed
// template into full access; one version of gost, the proxy Harbor uses,
// shipped exactly that bug.
//
// # Forms
//
// The JSON form is part of a CNI conflist entry:
//
//	{"type": "doorman", "mode": "allowlist", "allowedHosts": ["api.example.com", "*.github.com"]}
//
// Other keys are ignored; a missing mode means allowlist.
//
// The file form holds one entry per line, '#' comments (at the start of a
// line or after whitespace), blank lines, and at most one "mode: X" line
// (default allowlist):
//
//	# phase 2: the task itself
//	mode: allowlist
//	api.example.com
//	*.github.com:443   # git over https only
//
// # Request rules
//
// A policy may also hold request-level rules for chosen hosts
// (InspectHost): the proxy then terminates those hosts' TLS with a
// certificate of the network's CA, judges every request by the rules, and
// may put a credential in; every other host is relayed as before. One
// model, two forms: in JSON the "inspect" key (ParseInspectJSON), in the
// file form lines that start with "inspect":
//
//	inspect api.example.com deny POST /v1/messages json:tools[].type=web_search*
//	inspect github.com allow GET|HEAD
//	inspect github.com allow /myorg/*
//	inspect github.com default deny
//	inspect api.example.com inject x-api-key sha256:<hex of the placeholder> /etc/doorman/secrets/x
//
// A rule holds if all its conditions do: a method (or several joined by
// '|'), a path (exact, or a glob in which '*' is any run of characters,
// '/' included, so "/myorg/*" is a prefix), query:KEY[=GLOB],
// header:NAME[=GLOB], json:PATH[=GLOB] (see JSONPath); "*" alone holds for
// every request. Deny rules are tried first, then allow rules, then the
// default (deny if there are allow rules, else allow). A deny rule whose
// body condition cannot be read (the body is not JSON, or repeats a key)
// refuses the request. Deny rules match every spelling of a request an
// origin may route to the same handler, allow rules only its canonical
// spelling, and a target no rule can be trusted to judge is refused
// (ParseTarget; see spelling.go, "One request, many spellings"). Rules do
// not admit a host; an entry must.
//
// # Rule sets
//
// A policy may also name rule sets shipped with doorman (RuleSetUse;
// conf/rulesets/*.rules, compiled by ParseRuleSet): "ruleset closed-book
// [deny|strip|probe]" in the file form, {"rulesets": [...]} in the
// inspect JSON (ParseInspectRules). A set inspects the hosts it covers
// (InspectFor, InspectedHosts) and judges their requests beside the
// hosts' own rules (ActiveRuleSet.Judge), matching JSON keys loosely and
// rewriting the body's exact bytes to strip a tool; its evidence lines
// (EvidenceMatcher) are what the proxy's response tripwire looks for.
//
// MarshalFile renders it with canonical entries and WriteFileAtomic
// replaces a file with it atomically; the canonical form of every entry
// (Entry.String) parses back to an equal entry.
package conf
