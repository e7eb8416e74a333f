package learn

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// Options say how From turns decisions into entries.
type Options struct {
	// Wildcards collapses two or more names below a common parent into
	// "*.parent", taking the narrowest parent that covers at least two
	// and never one above the registrable domain (no "*.com", no
	// "*.co.uk"). Without it every name is listed as seen.
	Wildcards bool
	// AnyPort writes entries without ports. Without it each entry names
	// the port it was seen on.
	AnyPort bool
	// Denied learns from denials only: the entries that would have to be
	// added for what was refused to get through.
	Denied bool
}

// Result is an allowlist that admits what a sandbox was seen doing, and
// what it was learned from.
type Result struct {
	Entries []conf.Entry
	Used    int // connections the entries come from
	Skipped int // connections that say nothing an entry could admit
	// UsedDNS counts the refused DNS lookups of the names the entries
	// admit, and QueriedOnly those names never seen in a connection (each
	// an entry without a port). DNS queries not learned from are not
	// counted: most are admitted lookups, or expansions by a search list.
	UsedDNS     int
	QueriedOnly int
	// Private counts the connections refused because their upstream was
	// private (reason "private upstream ...", also after a policy change)
	// and the DNS answers refused because they were (reason "private
	// answer ..."). Only an address entry inside the private range admits
	// those, and opening the host's LAN or a neighbour is the operator's
	// call, never a guess: they are not learned, and not counted in
	// Skipped either.
	Private int
}

// Policy is the learned allowlist as a policy in mode allowlist.
func (l Result) Policy() *conf.Policy {
	return &conf.Policy{Mode: conf.ModeAllowlist, Entries: slices.Clone(l.Entries)}
}

// From returns the smallest allowlist that admits the connections ds
// record: each named connection by its name (SNI or Host) and port, each
// connection without a name by its destination address and port, since
// only address entries can admit those.
//
// It learns from what the policy let through (in mode open, everything)
// and from what it refused because no entry admitted it. Decisions that
// no entry could change are skipped: refusals of malformed requests,
// connections made while the policy was in mode none, and lines without a
// readable destination. Refusals of private upstreams and private DNS
// answers are not learned either, only counted (see Result.Private): a
// name entry would not admit them, and an address entry for the host's
// LAN is not something to propose unasked.
//
// It learns from the DNS filter's refusals too: with the filter on, a name
// the policy does not admit never resolves, so the workload never connects
// to it and only the query tells what it tried (see learnableQuery). A
// query carries no port: such a name is an entry without a port, unless
// it was also seen in a connection, whose entry then admits it. A name
// that is another name seen with labels added at the end is taken for a
// search-list expansion and left out.
func From(ds []decisionlog.Decision, opts Options) Result {
	var l Result
	type key struct {
		host string
		port uint16
	}
	names := map[uint16]map[string]bool{} // port -> names
	addrs := map[key]bool{}
	queried := map[string]int{} // names of refused queries -> how many
	for _, d := range ds {
		if opts.Denied && d.Verdict != decisionlog.Deny {
			continue
		}
		if d.Kind == decisionlog.KindLimit {
			continue // a cap's refusals, which no entry changes
		}
		if private(d) {
			l.Private += d.Times()
			continue
		}
		if d.IsDNS() {
			if n, ok := learnableQuery(d); ok {
				queried[n] += d.Times()
			}
			continue
		}
		dst, ok := d.DstAddrPort()
		if !ok || !learnable(d) {
			l.Skipped += d.Times()
			continue
		}
		port := dst.Port()
		if opts.AnyPort {
			port = 0
		}
		if d.Name != "" {
			n, err := conf.NormalizeName(d.Name)
			if err != nil {
				l.Skipped++
				continue
			}
			if names[port] == nil {
				names[port] = map[string]bool{}
			}
			names[port][n] = true
		} else {
			addrs[key{dst.Addr().String(), port}] = true
		}
		l.Used += d.Times()
	}
	seen := func(n string) bool {
		for _, set := range names {
			if set[n] {
				return true
			}
		}
		return false
	}
	// A name with labels added at the end of another name seen is what a
	// stub resolver asks first when resolv.conf has a search list
	// ("github.com.svc.cluster.local" before "github.com"); the filter
	// names the suffix only for names the policy admits.
	expansion := func(n string) bool {
		for i := strings.LastIndexByte(n, '.'); i > 0; i = strings.LastIndexByte(n[:i], '.') {
			if p := n[:i]; queried[p] > 0 || seen(p) {
				return true
			}
		}
		return false
	}
	var queriedOnly []string
	for n, count := range queried {
		switch {
		case expansion(n):
			continue
		case !seen(n):
			queriedOnly = append(queriedOnly, n)
		}
		l.UsedDNS += count
	}
	for _, n := range queriedOnly {
		if names[0] == nil {
			names[0] = map[string]bool{}
		}
		names[0][n] = true
	}
	l.QueriedOnly = len(queriedOnly)

	var out []conf.Entry
	add := func(host string, port uint16) {
		s := host
		if port != 0 {
			if strings.Contains(host, ":") {
				s = "[" + host + "]"
			}
			s = fmt.Sprintf("%s:%d", s, port)
		}
		e, err := conf.ParseEntry(s)
		if err != nil {
			// Every name here went through NormalizeName and every
			// address through netip: only a name that entries read as an
			// address (an all-numeric one) can land here.
			l.Skipped++
			return
		}
		out = append(out, e)
	}
	for port, set := range names {
		exact, wild := slices.Collect(maps.Keys(set)), []string(nil)
		if opts.Wildcards {
			exact, wild = collapse(exact)
		}
		for _, w := range wild {
			add("*."+w, port)
		}
		for _, n := range exact {
			add(n, port)
		}
	}
	for k := range addrs {
		add(k.host, k.port)
	}
	slices.SortFunc(out, compareEntries)
	l.Entries = out
	return l
}

// private reports whether d was refused because its upstream, or every
// address of its DNS answer, was private (see package guard): "private
// upstream ..." (as it was once written, "no permissible upstream: ..."),
// possibly after a policy change, and "private answer ...".
func private(d decisionlog.Decision) bool {
	if d.Verdict != decisionlog.Deny {
		return false
	}
	r := strings.TrimPrefix(d.Reason, decisionlog.ReasonPolicyChanged)
	if d.IsDNS() {
		return strings.HasPrefix(r, decisionlog.ReasonPrivateAnswer)
	}
	return strings.HasPrefix(r, decisionlog.ReasonPrivateUpstream) || strings.HasPrefix(r, "no permissible upstream")
}

// learnable reports whether d is a connection an entry could admit.
func learnable(d decisionlog.Decision) bool {
	if d.Reason == decisionlog.ReasonAllowDirect {
		// Flows that bypassed the proxy (logged from conntrack): an
		// allowDirect entry admitted them, not the allowlist.
		return false
	}
	switch d.Verdict {
	case decisionlog.Allow, decisionlog.Error:
		return true
	case decisionlog.Deny:
		r := d.Reason
		return strings.Contains(r, decisionlog.ReasonNameNotAllowed) ||
			strings.Contains(r, decisionlog.ReasonNoRule) ||
			// Admitted once, closed later: it was seen.
			(strings.HasPrefix(r, decisionlog.ReasonPolicyChanged) && !strings.Contains(r, decisionlog.ReasonModeNone)) ||
			r == decisionlog.ReasonShutdown
	}
	return false
}

// learnableQuery returns the name of a DNS query an entry could admit: one
// the filter refused for want of an entry ("name not allowed"), of a type a
// client asks before it connects (A, AAAA, HTTPS, SVCB). Not learned from:
// names an entry admits but for a search-list suffix the resolver added
// ("api.example.com.svc.cluster.local", whose reason names the suffix),
// reverse names (PTR lookups, and anything under in-addr.arpa and
// ip6.arpa: an address entry, not a name one, admits those), other types
// (TXT, MX, ...: not a lookup before a connection, and the usual carrier
// of data written into names), and refusals in mode none.
func learnableQuery(d decisionlog.Decision) (string, bool) {
	if d.Verdict != decisionlog.Deny || d.Reason != decisionlog.ReasonNameNotAllowed {
		return "", false
	}
	switch strings.ToUpper(d.QType) {
	case "A", "AAAA", "HTTPS", "SVCB":
	default:
		return "", false
	}
	n, err := conf.NormalizeName(d.Name)
	if err != nil || strings.HasSuffix(n, ".in-addr.arpa") || strings.HasSuffix(n, ".ip6.arpa") {
		return "", false
	}
	if e, err := conf.ParseEntry(n); err != nil || e.Kind != conf.KindName {
		return "", false // an all-numeric name, which entries read as an address
	}
	return n, true
}

// collapse picks wildcards for names (see Options.Wildcards): deepest
// parents first, a parent taking the names below it that no deeper
// wildcard took, if there are at least two. It returns the names left
// exact and the wildcard suffixes.
func collapse(names []string) (exact, wild []string) {
	below := map[string][]string{} // parent -> names strictly below it
	for _, n := range names {
		top, err := publicsuffix.EffectiveTLDPlusOne(n)
		if err != nil {
			continue // n is itself a public suffix: no parent to take
		}
		for p := n; p != top; {
			_, p, _ = strings.Cut(p, ".")
			below[p] = append(below[p], n)
		}
	}
	parents := slices.Collect(maps.Keys(below))
	slices.SortFunc(parents, func(a, b string) int {
		if c := cmp.Compare(strings.Count(b, "."), strings.Count(a, ".")); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	taken := map[string]bool{}
	for _, p := range parents {
		var free []string
		for _, n := range below[p] {
			if !taken[n] {
				free = append(free, n)
			}
		}
		if len(free) < 2 {
			continue
		}
		wild = append(wild, p)
		for _, n := range free {
			taken[n] = true
		}
	}
	for _, n := range names {
		if !taken[n] {
			exact = append(exact, n)
		}
	}
	return exact, wild
}

// compareEntries orders names and wildcards by domain (com.example.api),
// the apex before its wildcard, then addresses, each by port.
func compareEntries(a, b conf.Entry) int {
	if c := cmpBool(a.Kind == conf.KindPrefix, b.Kind == conf.KindPrefix); c != 0 {
		return c
	}
	if a.Kind == conf.KindPrefix {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
	} else {
		if c := slices.Compare(domainKey(a), domainKey(b)); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.Ports.Lo, b.Ports.Lo)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// domainKey is an entry's labels from the top down; a wildcard sorts
// right after its apex.
func domainKey(e conf.Entry) []string {
	labels := strings.Split(e.Name, ".")
	slices.Reverse(labels)
	if e.Kind == conf.KindWildcard {
		labels = append(labels, "*")
	}
	return labels
}
