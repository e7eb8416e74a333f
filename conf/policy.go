package conf

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Policy is what one sandbox may reach: a mode and the allowlist entries.
// Entries are kept in every mode, so switching from allowlist to none or
// open and back does not lose the list; only ModeAllowlist consults them
// for names. A Policy is not changed after it is made: build a new one.
type Policy struct {
	Mode    Mode
	Entries []Entry
	// Inspect holds the request-level rules of the hosts whose TLS the
	// proxy terminates, one per host, ordered by host (see InspectHost).
	// A host without an InspectHost is relayed untouched.
	Inspect []InspectHost
	// RuleSets are the shipped rule sets in use (see RuleSetUse): they
	// inspect the hosts they cover beside Inspect's.
	RuleSets []RuleSetUse
}

// WithEntries returns a copy of p with entries instead of its own: what
// an edit of the allowlist makes, the mode and request rules kept.
func (p *Policy) WithEntries(entries []Entry) *Policy {
	return &Policy{Mode: p.Mode, Entries: entries, Inspect: p.Inspect, RuleSets: p.RuleSets}
}

// WithMode returns a copy of p in mode m.
func (p *Policy) WithMode(m Mode) *Policy {
	return &Policy{Mode: m, Entries: p.Entries, Inspect: p.Inspect, RuleSets: p.RuleSets}
}

// WithInspect returns a copy of p with the request rules hosts instead of
// its own, checked and in canonical order; an error names what is wrong
// and p is not changed.
func (p *Policy) WithInspect(hosts []InspectHost) (*Policy, error) {
	hosts, err := setInspect(slices.Clone(hosts))
	if err != nil {
		return nil, err
	}
	return &Policy{Mode: p.Mode, Entries: p.Entries, Inspect: hosts, RuleSets: p.RuleSets}, nil
}

// PolicyOf returns the policy of mode, entries and inspect as their
// parsers returned them (ParseMode, ParseEntry, ParseInspectRules), which
// checked each: a front door that reports each part's errors in its own
// words builds its policy with it, and nothing is parsed again.
func PolicyOf(mode Mode, entries []Entry, inspect InspectRules) *Policy {
	return &Policy{Mode: mode, Entries: entries, Inspect: inspect.Hosts, RuleSets: inspect.RuleSets}
}

// NewPolicy validates mode and every entry and returns the policy. On any
// error it returns nil and all the errors joined (errors.Join), each naming
// its entry, so that nothing is ever half loaded. An empty entry list is
// valid: in allowlist mode it denies everything.
func NewPolicy(mode Mode, entries []string) (*Policy, error) {
	return newPolicy(mode, entries, func(int) string { return "" })
}

// newPolicy is NewPolicy with a prefix for each entry's error, saying
// where the entry came from ("line 4: ", "allowedHosts[2]: ").
func newPolicy(mode Mode, entries []string, where func(i int) string) (*Policy, error) {
	var errs []error
	if !mode.valid() {
		errs = append(errs, fmt.Errorf("invalid mode %q: want one of %s", string(mode), validModes))
	}
	parsed, entryErrs := parseEntries(entries, where)
	if errs = append(errs, entryErrs...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Policy{Mode: mode, Entries: parsed}, nil
}

// parseEntries parses every entry, returning all the errors, each with
// the prefix where(i) gives for the entry's index.
func parseEntries(entries []string, where func(i int) string) ([]Entry, []error) {
	var errs []error
	parsed := make([]Entry, 0, len(entries))
	for i, s := range entries {
		e, err := ParseEntry(s)
		if err != nil {
			errs = append(errs, prefixError(where(i), err))
			continue
		}
		parsed = append(parsed, e)
	}
	return parsed, errs
}

// prefixError puts prefix before err's text, keeping err for errors.As.
func prefixError(prefix string, err error) error {
	if prefix == "" {
		return err
	}
	return fmt.Errorf("%s%w", prefix, err)
}

// DenyAll returns a policy that admits nothing: mode none, no entries. It
// is what a sandbox gets when its policy cannot be read or is invalid.
func DenyAll() *Policy { return &Policy{Mode: ModeNone} }

// MatchName returns the first name or wildcard entry that admits a
// connection to name (already normalized, see NormalizeName) on port. It
// does not look at the mode: callers decide by mode first.
func (p *Policy) MatchName(name string, port uint16) (Entry, bool) {
	if p == nil {
		return Entry{}, false
	}
	for _, e := range p.Entries {
		if e.MatchName(name, port) {
			return e, true
		}
	}
	return Entry{}, false
}

// MatchAddr returns the first IP/CIDR entry that admits a connection to
// the original destination a on port. It does not look at the mode.
func (p *Policy) MatchAddr(a netip.Addr, port uint16) (Entry, bool) {
	if p == nil {
		return Entry{}, false
	}
	for _, e := range p.Entries {
		if e.MatchAddr(a, port) {
			return e, true
		}
	}
	return Entry{}, false
}

// Equal reports whether p and q have the same mode and equal entries in
// the same order (see Entry.Equal; how entries were written is not
// compared). Two nil policies are equal; nil never equals a non-nil one.
func (p *Policy) Equal(q *Policy) bool {
	if p == nil || q == nil {
		return p == q
	}
	if p.Mode != q.Mode || len(p.Entries) != len(q.Entries) || !equalInspect(p.Inspect, q.Inspect) || !slices.Equal(p.RuleSets, q.RuleSets) {
		return false
	}
	for i := range p.Entries {
		if !p.Entries[i].Equal(q.Entries[i]) {
			return false
		}
	}
	return true
}

// Hosts returns the canonical form of every entry, in order.
func (p *Policy) Hosts() []string {
	if p == nil {
		return nil
	}
	hosts := make([]string, 0, len(p.Entries))
	for _, e := range p.Entries {
		hosts = append(hosts, e.String())
	}
	return hosts
}

// String summarizes p for logs: `allowlist [api.example.com *.github.com]`.
func (p *Policy) String() string {
	if p == nil {
		return "<nil policy>"
	}
	s := string(p.Mode) + " [" + strings.Join(p.Hosts(), " ") + "]"
	if len(p.Inspect) > 0 {
		s += " inspect [" + strings.Join(p.InspectedHosts(), " ") + "]"
	}
	for _, u := range p.RuleSets {
		s += " ruleset " + u.String()
	}
	return s
}

// jsonPolicy is the JSON form of a policy, as in a CNI conflist entry.
type jsonPolicy struct {
	Mode         *string         `json:"mode,omitempty"`
	AllowedHosts []string        `json:"allowedHosts"`
	Inspect      json.RawMessage `json:"inspect,omitempty"`
}

// ParseJSON parses the JSON form of a policy, as found in a CNI conflist
// entry: {"mode": "allowlist", "allowedHosts": ["api.example.com",
// "*.github.com"], "inspect": {...}} (inspect: see ParseInspectJSON). Other keys are ignored, since the conflist entry
// carries the plugin's other settings; as with encoding/json generally,
// key names match case-insensitively. A missing (or null) mode means
// allowlist; an empty mode string is an error. A missing allowedHosts is
// an empty list, which in allowlist mode denies everything. Entry errors
// name their index and entry, and all of them are reported.
func ParseJSON(data []byte) (*Policy, error) {
	var jp jsonPolicy
	if err := json.Unmarshal(data, &jp); err != nil {
		return nil, fmt.Errorf("policy JSON: %w", err)
	}
	mode := ModeAllowlist
	var errs []error
	if jp.Mode != nil {
		m, err := ParseMode(*jp.Mode)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy JSON: mode: %w", err))
		}
		mode = m
	}
	entries, entryErrs := parseEntries(jp.AllowedHosts, func(i int) string {
		return fmt.Sprintf("policy JSON: allowedHosts[%d]: ", i)
	})
	errs = append(errs, entryErrs...)
	var inspect InspectRules
	if len(jp.Inspect) > 0 && string(jp.Inspect) != "null" {
		var err error
		if inspect, err = ParseInspectRules(jp.Inspect); err != nil {
			errs = append(errs, fmt.Errorf("policy JSON: %w", err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Policy{Mode: mode, Entries: entries, Inspect: inspect.Hosts, RuleSets: inspect.RuleSets}, nil
}

// MarshalJSON renders p in the form ParseJSON reads, with canonical
// entries: {"mode":"allowlist","allowedHosts":["api.example.com"]}.
func (p *Policy) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	mode := string(p.Mode)
	jp := jsonPolicy{Mode: &mode, AllowedHosts: p.Hosts()}
	if p.HasInspection() {
		raw, err := marshalInspectRules(p.Inspect, p.RuleSets)
		if err != nil {
			return nil, err
		}
		jp.Inspect = raw
	}
	return json.Marshal(jp)
}

// UnmarshalJSON parses data as ParseJSON does, so that a Policy can be a
// field of a larger configuration. On error p is left unchanged.
func (p *Policy) UnmarshalJSON(data []byte) error {
	q, err := ParseJSON(data)
	if err != nil {
		return err
	}
	*p = *q
	return nil
}
