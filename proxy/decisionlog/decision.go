package decisionlog

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"time"
)

// The verdicts a decision line carries (proxy.Allow, proxy.Deny and
// proxy.VerdictError).
const (
	Allow = "allow"
	Deny  = "deny"
	Error = "error" // the policy allowed it, the upstream failed
)

// msgConnection is the msg of decision lines.
const msgConnection = "connection"

// Decision is one decision line: what the proxy did with one connection.
// Addresses are kept as written, since a connection whose original
// destination could not be read logs one that does not parse.
type Decision struct {
	Time       time.Time `json:"time"`
	Level      string    `json:"level"`
	Sandbox    string    `json:"sandbox"`
	Client     string    `json:"client"`
	Dst        string    `json:"dst"`   // original destination, addr:port
	Proto      string    `json:"proto"` // tls, http, h2c, unknown
	Name       string    `json:"name"`  // SNI or Host, "" if none
	Rule       string    `json:"rule"`  // the entry that admitted it
	Verdict    string    `json:"verdict"`
	Reason     string    `json:"reason"`
	Upstream   string    `json:"upstream,omitempty"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS float64   `json:"duration_ms"`

	// Raw is the line as read, without its newline.
	Raw []byte `json:"-"`
}

// connectionTag is in every decision line; lines without it are skipped
// before any JSON is decoded.
var connectionTag = []byte(`"msg":"connection"`)

// Parse reads one log line. ok is false for lines that are not decision
// lines (policy events, proxy errors, anything malformed).
func Parse(b []byte) (d Decision, ok bool) {
	if !bytes.Contains(b, connectionTag) {
		return Decision{}, false
	}
	var l struct {
		Msg string `json:"msg"`
		Decision
	}
	if json.Unmarshal(b, &l) != nil || l.Msg != msgConnection || l.Verdict == "" {
		return Decision{}, false
	}
	d = l.Decision
	d.Raw = append([]byte(nil), b...)
	return d, true
}

// DstAddrPort returns the original destination, if it was read.
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
	Denied bool      // only denials
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

// Counts counts decisions by verdict.
type Counts struct {
	Allowed int `json:"allowed"`
	Denied  int `json:"denied"`
	Errors  int `json:"errors"` // allowed, but the upstream failed
}

// Add counts d.
func (c *Counts) Add(d Decision) {
	switch d.Verdict {
	case Allow:
		c.Allowed++
	case Deny:
		c.Denied++
	default:
		c.Errors++
	}
}
