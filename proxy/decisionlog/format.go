package decisionlog

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// timeLayout is how Format writes a decision's time: in the zone the proxy
// logged it in (the host's), to the millisecond.
const timeLayout = "2006-01-02 15:04:05.000"

// Format renders d as one line for people: time, verdict, protocol, name,
// original destination, and why (the rule that admitted it, or the reason
// it was denied), then for relayed connections the bytes each way and how
// long it lasted; a name from a ClientHello that carried ECH is followed by
// "(ECH)":
//
//	2025-06-01 12:00:00.123 allow tls     api.example.com 203.0.113.10:443 rule api.example.com (up 517 B, down 4.1 kB, 120ms)
//	2025-06-01 12:00:01.456 deny  http    evil.example    203.0.113.20:80 name not allowed
//	2025-06-01 12:00:02.789 allow tls     front.example (ECH) 203.0.113.11:443 rule front.example (up 2.1 kB, down 9.8 kB, 80ms)
//
// A DNS query has "dns/" and its transport where a connection has its
// protocol, and its type and the rcode of the answer where a connection
// has its destination (see formatDNS).
//
// A denials line reads as the denial it repeats, then how many more there
// were and when; one that repeats no line (no protocol, name or
// destination: the host-side layer's drops) says how many were dropped,
// why and when; a limit line says which cap refused how many:
//
//	2025-06-01 12:00:10.000 deny  dns/udp evil.example A answered REFUSED, name not allowed (and 4211 more from 12:00:00.004 to 12:00:09.998)
//	2025-06-01 12:00:10.000 deny  3 dropped: host-layer: udp not to a resolver (from 12:00:08.000 to 12:00:10.000)
//	2025-06-01 12:00:10.000 limit connections: 57 refused over the cap of 4096 (from 12:00:00.120 to 12:00:09.870)
func Format(d Decision) string {
	switch {
	case d.Kind == KindLimit:
		return formatLimit(d)
	case d.IsSummary():
		return formatSummary(d)
	case d.IsDNS():
		return formatDNS(d)
	case d.IsRequest():
		return formatRequest(d)
	}
	return formatConnection(d)
}

// formatConnection renders a connection's decision (see Format).
func formatConnection(d Decision) string {
	name := orNoName(d.Name)
	if d.ECH {
		name += " (ECH)"
	}
	var why string
	switch {
	case d.Verdict == Allow && d.Rule != "":
		why = "rule " + d.Rule
	case d.Verdict == Error:
		why = "upstream failed: " + d.Reason
	default:
		why = d.Reason
	}
	s := fmt.Sprintf("%s %-5s %-7s %s %s %s", d.Time.Format(timeLayout), d.Verdict, d.Proto, name, d.Dst, why)
	if d.Verdict == Allow || d.BytesUp > 0 || d.BytesDown > 0 {
		s += fmt.Sprintf(" (up %s, down %s, %s)", size(d.BytesUp), size(d.BytesDown), duration(d.DurationMS))
	}
	return s
}

// formatDNS renders a DNS query's decision: time, verdict, "dns/udp" or
// "dns/tcp", the name and type queried, "answered" and the rcode (or "not
// answered"), and why; for an admitted query, the resolver that answered
// and how long it took:
//
//	2025-06-01 12:00:02.000 allow dns/udp api.example.com AAAA answered NOERROR, rule *.example.com:443 (resolver 192.0.2.53:53, 1.2ms)
//	2025-06-01 12:00:02.789 deny  dns/tcp evil.example TXT answered REFUSED, name not allowed
func formatDNS(d Decision) string {
	q := orNoName(d.Name)
	if d.QType != "" {
		q += " " + d.QType
	}
	answered := "answered " + d.Rcode
	if d.Rcode == "" || d.Rcode == "none" {
		answered = "not answered"
	}
	// The reason may say the rcode again (a search-list expansion's
	// does): once is enough.
	why := strings.TrimSuffix(d.Reason, " (answered "+d.Rcode+")")
	if d.Verdict == Allow && d.Rule != "" {
		why = "rule " + d.Rule
		// What the forwarder adds after the policy's reason: resolvers
		// that failed before one answered (see dnsfilter.forward).
		if _, more, ok := strings.Cut(d.Reason, "; "); ok {
			why += "; " + more
		}
	}
	s := fmt.Sprintf("%s %-5s %-7s %s %s, %s", d.Time.Format(timeLayout), d.Verdict, "dns/"+d.Proto, q, answered, why)
	if d.Verdict == Allow {
		var extra []string
		if d.Upstream != "" {
			extra = append(extra, "resolver "+d.Upstream)
		}
		extra = append(extra, duration(d.DurationMS))
		if d.ECHRemoved {
			extra = append(extra, "ECH removed")
		}
		if d.PrivateRemoved > 0 {
			extra = append(extra, fmt.Sprintf("%d private %s removed", d.PrivateRemoved, plural(d.PrivateRemoved, "address", "addresses")))
		}
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// formatSummary renders a denials line: the denial it stands for, then
// the count and the times; the denials past the distinct ones an interval
// logs have no name to show.
func formatSummary(d Decision) string {
	span := fmt.Sprintf("from %s to %s", d.First.Format(timeOnly), d.Last.Format(timeOnly))
	if d.Reason == ReasonTooManyDenials {
		kind := "connections"
		if d.IsDNS() {
			kind = "DNS queries"
		}
		return fmt.Sprintf("%s %-5s %d %s denied, not logged one by one: %s (%s)",
			d.Time.Format(timeLayout), d.Verdict, d.Count, kind, d.Reason, span)
	}
	if !d.IsDNS() && d.Proto == "" && d.Name == "" && d.Dst == "" {
		// Denials no line stands for: packets dropped before any
		// listener (the host-side layer's, package proxy/droplog).
		return fmt.Sprintf("%s %-5s %d dropped: %s (%s)", d.Time.Format(timeLayout), d.Verdict, d.Count, d.Reason, span)
	}
	one := d
	one.Count = 0
	return fmt.Sprintf("%s (and %d more %s)", Format(one), d.Count, span)
}

// formatLimit renders a limit line.
func formatLimit(d Decision) string {
	s := fmt.Sprintf("%s %-5s %s: %d refused over the cap of %d", d.Time.Format(timeLayout), "limit", d.Limit, d.Times(), d.Max)
	if !d.First.IsZero() {
		s += fmt.Sprintf(" (from %s to %s)", d.First.Format(timeOnly), d.Last.Format(timeOnly))
	}
	return s
}

// timeOnly is how a summary writes the times it spans.
const timeOnly = "15:04:05.000"

// plural picks the word for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func orNoName(name string) string {
	if name == "" {
		return "(no name)"
	}
	return name
}

// size renders a byte count in decimal units: 517 B, 4.1 kB, 12.0 MB.
func size(n int64) string {
	if n < 1000 {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, units := float64(n), []string{"kB", "MB", "GB", "TB"}
	for i, u := range units {
		f /= 1000
		if f < 1000 || i == len(units)-1 {
			return strconv.FormatFloat(f, 'f', 1, 64) + " " + u
		}
	}
	panic("unreachable")
}

// duration renders milliseconds as a time.Duration, rounded for reading.
func duration(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// ParseSince reads a --since value: a duration before now ("90s", "15m",
// "2h"; "3d" for days) or a time (RFC 3339, or "2006-01-02 15:04:05" and
// "2006-01-02" in the local zone).
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseFloat(days, 64); err == nil && n >= 0 {
			return now.Add(-time.Duration(n * 24 * float64(time.Hour))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %q: a negative duration is in the future", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration such as 15m, 2h or 3d, or a time such as 2006-01-02T15:04:05Z", s)
}
