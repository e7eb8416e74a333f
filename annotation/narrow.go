package annotation

import (
	"slices"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
)

// Narrow returns what both granted and asked admit, and the entries of
// asked that granted does not admit in full (each kept where it is
// narrower than what granted admits, dropped where not at all).
//
//   - asked in mode none, or granted in mode none: mode none.
//   - asked in mode open: granted (open means "everything granted").
//   - granted in mode open: asked's entries, but an address entry inside
//     a range the proxy refuses (private, loopback, metadata...) opens
//     that range, which open does not: it is dropped.
//   - both allowlists: each entry of asked intersected with each of
//     granted (see IntersectEntry): a name with a wildcard that holds
//     it, a wildcard with a narrower one, a prefix with a prefix inside
//     or around it, their ports intersected. A name and an address entry
//     never intersect: doorman cannot know where the name resolves.
//
// Request rules and rule sets are granted's.
func Narrow(granted, asked *conf.Policy) (*conf.Policy, []string) {
	switch {
	case granted.Mode == conf.ModeNone || asked.Mode == conf.ModeNone:
		return &conf.Policy{Mode: conf.ModeNone, Inspect: granted.Inspect, RuleSets: granted.RuleSets}, nil
	case asked.Mode == conf.ModeOpen:
		return granted, nil
	}
	var out []conf.Entry
	var dropped []string
	for _, a := range asked.Entries {
		if granted.Mode == conf.ModeOpen {
			if a.Kind == conf.KindPrefix {
				if refused, _ := guard.RefusedRange(a.Prefix); refused {
					dropped = append(dropped, a.String())
					continue
				}
			}
			out = append(out, a)
			continue
		}
		full := false
		var got []conf.Entry
		for _, g := range granted.Entries {
			if x, ok := IntersectEntry(a, g); ok {
				got = append(got, x)
				full = full || x.Equal(a)
			}
		}
		if full {
			out = append(out, a)
			continue
		}
		out = append(out, got...)
		if len(got) > 0 {
			var parts []string
			for _, g := range got {
				parts = append(parts, g.String())
			}
			dropped = append(dropped, a.String()+" (only "+strings.Join(parts, ", ")+")")
		} else {
			dropped = append(dropped, a.String())
		}
	}
	return &conf.Policy{Mode: conf.ModeAllowlist, Entries: Tidy(out), Inspect: granted.Inspect, RuleSets: granted.RuleSets}, dropped
}

// IntersectEntry returns the entry admitting what both a and g admit, if
// one entry can say it.
func IntersectEntry(a, g conf.Entry) (conf.Entry, bool) {
	ports, ok := intersectPorts(a.Ports, g.Ports)
	if !ok {
		return conf.Entry{}, false
	}
	var x conf.Entry
	switch {
	case a.Kind == conf.KindPrefix && g.Kind == conf.KindPrefix:
		if a.Prefix.Addr().Is4() != g.Prefix.Addr().Is4() || !a.Prefix.Overlaps(g.Prefix) {
			return conf.Entry{}, false
		}
		x = conf.Entry{Kind: conf.KindPrefix, Prefix: a.Prefix}
		if g.Prefix.Bits() > a.Prefix.Bits() {
			x.Prefix = g.Prefix
		}
	case a.Kind == conf.KindPrefix || g.Kind == conf.KindPrefix:
		return conf.Entry{}, false
	default:
		switch {
		case nameCovers(g, a):
			x = conf.Entry{Kind: a.Kind, Name: a.Name}
		case nameCovers(a, g):
			x = conf.Entry{Kind: g.Kind, Name: g.Name}
		default:
			return conf.Entry{}, false
		}
	}
	x.Ports = ports
	x.Raw = x.String()
	return x, true
}

// intersectPorts returns the ports in both a and b (the zero value is
// every port), and false if there are none.
func intersectPorts(a, b conf.PortRange) (conf.PortRange, bool) {
	switch {
	case a.Any():
		return b, true
	case b.Any():
		return a, true
	}
	lo, hi := max(a.Lo, b.Lo), min(a.Hi, b.Hi)
	if lo > hi {
		return conf.PortRange{}, false
	}
	return conf.PortRange{Lo: lo, Hi: hi}, true
}

// NarrowDirect returns the parts of d inside the granted destinations,
// and false if there are none.
func NarrowDirect(d conf.Direct, granted []conf.Direct) ([]conf.Direct, bool) {
	var out []conf.Direct
	for _, g := range granted {
		if x, ok := IntersectEntry(d.Entry(), g.Entry()); ok {
			out = append(out, conf.Direct{Prefix: x.Prefix, Ports: x.Ports})
		}
	}
	return out, len(out) > 0
}

// nameCovers reports whether every name g (a name or wildcard entry)
// admits, ports aside, is one a admits.
func nameCovers(a, g conf.Entry) bool {
	switch {
	case a.Kind == conf.KindName:
		return g.Kind == conf.KindName && g.Name == a.Name
	case g.Kind == conf.KindName:
		return below(g.Name, a.Name)
	}
	return g.Name == a.Name || below(g.Name, a.Name)
}

// below reports whether name lies strictly below suffix, by whole labels.
func below(name, suffix string) bool {
	n := len(name) - len(suffix)
	return n >= 2 && name[n-1] == '.' && name[n:] == suffix
}

// Covers reports whether entry f admits everything e does.
func Covers(f, e conf.Entry) bool {
	x, ok := IntersectEntry(e, f)
	return ok && x.Equal(e)
}

// Tidy sorts entries and drops those another one admits entirely.
func Tidy(es []conf.Entry) []conf.Entry {
	var out []conf.Entry
	for i, e := range es {
		covered := false
		for j, f := range es {
			if i != j && Covers(f, e) && (!Covers(e, f) || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b conf.Entry) int { return strings.Compare(a.String(), b.String()) })
	return out
}
