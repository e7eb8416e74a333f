package decisionlog

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"time"
)

// Decision is one decision line: what the proxy did with one connection,
// or what its DNS filter did with one query (Kind says which). Addresses
// are kept as written, since a connection whose original destination
// could not be read logs one that does not parse.
type Decision struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Kind    string    `json:"kind"` // KindConnection or KindDNS: the line's msg
	Sandbox string    `json:"sandbox"`
	PodUID  string    `json:"pod_uid,omitempty"` // the sandbox's Kubernetes pod, if it is one
	Client  string    `json:"client"`
	Dst     string    `json:"dst"`   // original destination, addr:port; "" for DNS
	Proto   string    `json:"proto"` // tls, http, h2c, unknown; for DNS udp or tcp
	Name    string    `json:"name"`  // SNI or Host, or the name queried; "" if none
	Rule    string    `json:"rule"`  // the entry that admitted it
	Verdict string    `json:"verdict"`
	Reason  string    `json:"reason"`
	// Upstream is the address dialed, or for DNS the resolver that
	// answered or was tried last.
	Upstream   string  `json:"upstream,omitempty"`
	BytesUp    int64   `json:"bytes_up"`
	BytesDown  int64   `json:"bytes_down"`
	DurationMS float64 `json:"duration_ms"`

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

	// Raw is the line as read, without its newline.
	Raw []byte `json:"-"`
}

// IsDNS reports whether d is a DNS filter's decision on a query.
func (d Decision) IsDNS() bool { return d.Kind == KindDNS }

// IsRequest reports whether d is a decision on one request of an
// inspected host.
func (d Decision) IsRequest() bool { return d.Kind == KindRequest }

// kindTags: every decision line has one of them; lines without any are
// skipped before any JSON is decoded.
var kindTags = [][]byte{[]byte(`"msg":"` + KindConnection + `"`), []byte(`"msg":"` + KindDNS + `"`), []byte(`"msg":"` + KindRequest + `"`)}

// Parse reads one log line. ok is false for lines that are not decision
// lines (policy events, proxy errors, anything malformed).
func Parse(b []byte) (d Decision, ok bool) {
	if !bytes.Contains(b, kindTags[0]) && !bytes.Contains(b, kindTags[1]) && !bytes.Contains(b, kindTags[2]) {
		return Decision{}, false
	}
	var l struct {
		Msg string `json:"msg"`
		Decision
	}
	if json.Unmarshal(b, &l) != nil || (l.Msg != KindConnection && l.Msg != KindDNS && l.Msg != KindRequest) || l.Verdict == "" {
		return Decision{}, false
	}
	d = l.Decision
	d.Kind = l.Msg
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
}

// DNSCounts counts the DNS filter's queries by verdict.
type DNSCounts struct {
	Allowed int `json:"allowed"`
	Denied  int `json:"denied"`
	Errors  int `json:"errors"` // allowed, but no resolver answered
}

// Add counts d.
func (c *Counts) Add(d Decision) {
	allowed, denied, errs := &c.Allowed, &c.Denied, &c.Errors
	if d.IsDNS() {
		allowed, denied, errs = &c.DNS.Allowed, &c.DNS.Denied, &c.DNS.Errors
	}
	if d.IsRequest() {
		allowed, denied, errs = &c.Requests.Allowed, &c.Requests.Denied, &c.Requests.Errors
	}
	switch d.Verdict {
	case Allow:
		*allowed++
	case Deny:
		*denied++
	default:
		*errs++
	}
}
