package decisionlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Decision is one decision line: what the proxy did with one connection,
// or what its DNS filter did with one query (Kind says which). Addresses
// are kept as written, since a connection whose original destination
// could not be read logs one that does not parse.
//
// Two kinds of lines read as decisions too. A denials line (see
// Aggregator) is Count denials of its Kind that were not logged one by
// one, from First to Last (IsSummary). A limit line is Count refusals by
// the cap Limit (of value Max): Kind KindLimit, verdict deny, and a
// reason that says which cap.
type Decision struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Kind    string    `json:"kind"` // KindConnection, KindDNS (the line's msg, or a denials line's kind) or KindLimit
	Sandbox string    `json:"sandbox"`
	PodUID  string    `json:"pod_uid,omitempty"` // the sandbox's Kubernetes pod, if it is one
	Client  string    `json:"client"`
	Dst     string    `json:"dst"`           // original destination, addr:port; "" for DNS
	Proto   string    `json:"proto"`         // tls, http, h2c, unknown; for DNS udp or tcp
	Name    string    `json:"name"`          // SNI or Host, or the name queried; "" if none
	ECH     bool      `json:"ech,omitempty"` // the ClientHello carried encrypted_client_hello: Name is only an ECH front's public name
	Rule    string    `json:"rule"`          // the entry that admitted it
	Verdict string    `json:"verdict"`
	Reason  string    `json:"reason"`
	// Upstream is the address dialed, or for DNS the resolver that
	// answered or was tried last.
	Upstream   string  `json:"upstream,omitempty"`
	BytesUp    int64   `json:"bytes_up"`
	BytesDown  int64   `json:"bytes_down"`
	DurationMS float64 `json:"duration_ms"`

	// Packets the host-side layer dropped (HostDrop) only: the ICMP type
	// and code, nil for other protocols.
	ICMPType *int `json:"icmp_type,omitempty"`
	ICMPCode *int `json:"icmp_code,omitempty"`

	// DNS queries only.
	QType      string `json:"qtype,omitempty"`       // A, AAAA, HTTPS, ...
	Rcode      string `json:"rcode,omitempty"`       // NOERROR, REFUSED, ...; "none": no reply sent
	ECHRemoved bool   `json:"ech_removed,omitempty"` // ECH configurations were stripped from the answer
	// PrivateRemoved counts the private addresses removed from the
	// answer (A and AAAA records, address hints).
	PrivateRemoved int `json:"private_removed,omitempty"`

	// Requests inside an inspected host's session only (KindRequest).
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Status int    `json:"status,omitempty"`
	// What rule sets found in a request and its response (see
	// Request).
	RuleSet  string   `json:"ruleset,omitempty"`
	Tools    []string `json:"tools,omitempty"`
	Removed  []string `json:"removed,omitempty"`
	Evidence []string `json:"evidence,omitempty"`
	Declared []string `json:"declared,omitempty"`

	// Denials and limit lines only.
	Count int       `json:"count,omitempty"` // how many denials or refusals the line stands for
	First time.Time `json:"first,omitzero"`
	Last  time.Time `json:"last,omitzero"`
	Limit string    `json:"limit,omitempty"` // the cap that refused (a Limit* name)
	Max   int64     `json:"max,omitempty"`   // its value

	// Raw is the line as read, without its newline.
	Raw []byte `json:"-"`
}

// IsDNS reports whether d is a DNS filter's decision on a query.
func (d Decision) IsDNS() bool { return d.Kind == KindDNS }

// IsRequest reports whether d is a decision on one request of an
// inspected host.
func (d Decision) IsRequest() bool { return d.Kind == KindRequest }

// IsSummary reports whether d is a denials line: Count denials that were
// not logged one by one.
func (d Decision) IsSummary() bool { return d.Kind != KindLimit && d.Count > 0 }

// Times is how many decisions d stands for: Count for a denials or limit
// line, else 1.
func (d Decision) Times() int { return max(d.Count, 1) }

// kindTags: every decision line has one of them; lines without any are
// skipped before any JSON is decoded.
var kindTags = [][]byte{
	[]byte(`"msg":"` + KindConnection + `"`), []byte(`"msg":"` + KindDNS + `"`),
	[]byte(`"msg":"` + KindRequest + `"`), []byte(`"msg":"` + KindDenials + `"`),
	[]byte(`"msg":"` + KindLimit + `"`),
}

// Parse reads one log line. ok is false for lines that are not decision,
// denials or limit lines (policy events, proxy errors, anything
// malformed).
func Parse(b []byte) (d Decision, ok bool) {
	if !slices.ContainsFunc(kindTags, func(tag []byte) bool { return bytes.Contains(b, tag) }) {
		return Decision{}, false
	}
	var l struct {
		Msg string `json:"msg"`
		Decision
	}
	if json.Unmarshal(b, &l) != nil {
		return Decision{}, false
	}
	d = l.Decision
	switch l.Msg {
	case KindConnection, KindDNS, KindRequest:
		if d.Verdict == "" {
			return Decision{}, false
		}
		d.Kind = l.Msg
	case KindDenials:
		if (d.Kind != KindConnection && d.Kind != KindDNS) || d.Verdict != Deny || d.Count <= 0 {
			return Decision{}, false
		}
	case KindLimit:
		if d.Limit == "" {
			return Decision{}, false
		}
		d.Kind, d.Verdict = KindLimit, Deny
		d.Count = max(d.Count, 1)
		d.Reason = fmt.Sprintf("over the %s cap of %d", d.Limit, d.Max)
	default:
		return Decision{}, false
	}
	d.Raw = append([]byte(nil), b...)
	return d, true
}

// DstAddrPort returns the original destination, if it was read (DNS
// decisions have none).
func (d Decision) DstAddrPort() (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(d.Dst)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// Filter selects decisions. The zero value selects all.
type Filter struct {
	Since  time.Time // only decisions logged at or after Since
	Denied bool      // only denials, of connections and of DNS queries
}

// Match reports whether f selects d.
func (f Filter) Match(d Decision) bool {
	if !f.Since.IsZero() && d.Time.Before(f.Since) {
		return false
	}
	if f.Denied && d.Verdict != Deny {
		return false
	}
	return true
}

// Counts counts decisions by verdict: connections, and DNS queries apart
// from them. A query is not a connection (a client asks for A and AAAA,
// and its resolver may walk a search list, before it connects once), so
// adding the two would say nothing about either.
type Counts struct {
	Allowed int `json:"allowed"` // connections
	Denied  int `json:"denied"`
	Errors  int `json:"errors"` // allowed, but the upstream failed
	// DNS counts the DNS filter's queries; all zero without the filter.
	DNS DNSCounts `json:"dnsQueries"`
	// Requests counts the requests judged on inspected hosts, apart
	// from the connections that carried them.
	Requests DNSCounts `json:"requests"`
	// Limited counts the connections and queries a cap refused (limit
	// lines); they are not in the counts above.
	Limited int `json:"limited"`
}

// DNSCounts counts the DNS filter's queries by verdict.
type DNSCounts struct {
	Allowed int `json:"allowed"`
	Denied  int `json:"denied"`
	Errors  int `json:"errors"` // allowed, but no resolver answered
}

// Add counts d: the decisions it stands for (see Times).
func (c *Counts) Add(d Decision) {
	if d.Kind == KindLimit {
		c.Limited += d.Times()
		return
	}
	allowed, denied, errs := &c.Allowed, &c.Denied, &c.Errors
	if d.IsDNS() {
		allowed, denied, errs = &c.DNS.Allowed, &c.DNS.Denied, &c.DNS.Errors
	}
	if d.IsRequest() {
		allowed, denied, errs = &c.Requests.Allowed, &c.Requests.Denied, &c.Requests.Errors
	}
	switch d.Verdict {
	case Allow:
		*allowed += d.Times()
	case Deny:
		*denied += d.Times()
	default:
		*errs += d.Times()
	}
}
