package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/doorman-net/doorman/internal/strictjson"

	"golang.org/x/net/publicsuffix"
)

// RuleSetUse is a policy's use of a shipped rule set: its name and what
// to do with what it finds (SetDeny, SetStrip or SetProbe).
//
// In the policy file: "ruleset closed-book" (deny), "ruleset
// closed-book strip", "ruleset closed-book probe". In the JSON form of
// request rules, the reserved key "rulesets" of the inspect object:
// {"rulesets": ["closed-book"]} or [{"name": "closed-book", "action":
// "strip"}].
//
// A set inspects the hosts it covers wherever the policy admits them
// (its providers' hosts and front ends), and judges their requests
// beside the host's own rules: a request is refused if either refuses
// it.
type RuleSetUse struct {
	Name   string
	Action string
}

// String is the use as the policy file writes it, after "ruleset ".
func (u RuleSetUse) String() string {
	if u.Action == SetDeny || u.Action == "" {
		return u.Name
	}
	return u.Name + " " + u.Action
}

// ruleSetWord starts a rule set line of the policy file.
const ruleSetWord = "ruleset"

// isRuleSetLine reports whether a trimmed line is a rule set line.
func isRuleSetLine(line string) bool {
	w, _, _ := strings.Cut(line, " ")
	w, _, _ = strings.Cut(w, "\t")
	return strings.EqualFold(w, ruleSetWord)
}

// parseRuleSetLine parses "ruleset NAME [deny|strip|probe]".
func parseRuleSetLine(line string) (RuleSetUse, error) {
	words, err := splitInspectLine(line)
	if err != nil {
		return RuleSetUse{}, err
	}
	if len(words) < 2 || len(words) > 3 {
		return RuleSetUse{}, errors.New("ruleset: want \"ruleset NAME [deny|strip|probe]\"")
	}
	u := RuleSetUse{Name: words[1], Action: SetDeny}
	if len(words) == 3 {
		u.Action = strings.ToLower(words[2])
	}
	return u, u.check()
}

// ParseRuleSetRef parses one use as a flag, an annotation or a label
// writes it: "NAME" (deny) or "NAME:ACTION" ("closed-book:strip"). The
// error names the value and says why.
func ParseRuleSetRef(s string) (RuleSetUse, error) {
	name, action, has := strings.Cut(strings.TrimSpace(s), ":")
	u := RuleSetUse{Name: strings.TrimSpace(name), Action: SetDeny}
	if has {
		u.Action = strings.ToLower(strings.TrimSpace(action))
	}
	if u.Name == "" {
		return RuleSetUse{}, fmt.Errorf("%q: want NAME or NAME:ACTION (deny, strip or probe), such as closed-book:strip", s)
	}
	if err := u.check(); err != nil {
		return RuleSetUse{}, fmt.Errorf("%q: %w", s, err)
	}
	return u, nil
}

// ParseRuleSetList parses comma-separated uses ("closed-book:strip",
// see ParseRuleSetRef), blank ones ignored; a set named twice is an
// error. Every error is reported.
func ParseRuleSetList(s string) ([]RuleSetUse, error) {
	var uses []RuleSetUse
	var errs []error
	for v := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(v) == "" {
			continue
		}
		u, err := ParseRuleSetRef(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uses = append(uses, u)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := checkRuleSets(uses); err != nil {
		return nil, err
	}
	return uses, nil
}

// check refuses an unknown set or action.
func (u RuleSetUse) check() error {
	switch u.Action {
	case SetDeny, SetStrip, SetProbe:
	default:
		return fmt.Errorf("ruleset %s: action %q: want deny, strip or probe", u.Name, u.Action)
	}
	if _, err := LookupRuleSet(u.Name); err != nil {
		return fmt.Errorf("ruleset: %w", err)
	}
	return nil
}

// checkRuleSets checks every use and refuses a set used twice.
func checkRuleSets(uses []RuleSetUse) error {
	var errs []error
	seen := map[string]bool{}
	for _, u := range uses {
		if seen[u.Name] {
			errs = append(errs, fmt.Errorf("ruleset %s: used twice", u.Name))
			continue
		}
		seen[u.Name] = true
		if err := u.check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// jsonRuleSetUse is a use in JSON: "NAME" (deny) or {"name": NAME,
// "action": ACTION}.
type jsonRuleSetUse RuleSetUse

func (u *jsonRuleSetUse) UnmarshalJSON(data []byte) error {
	var name string
	if err := json.Unmarshal(data, &name); err == nil {
		*u = jsonRuleSetUse{Name: name, Action: SetDeny}
		return nil
	}
	var obj struct {
		Name   string `json:"name"`
		Action string `json:"action"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("want \"NAME\" or {\"name\": NAME, \"action\": \"deny|strip|probe\"}: %v", err)
	}
	*u = jsonRuleSetUse{Name: obj.Name, Action: strings.ToLower(obj.Action)}
	if u.Action == "" {
		u.Action = SetDeny
	}
	return nil
}

func (u jsonRuleSetUse) MarshalJSON() ([]byte, error) {
	if u.Action == SetDeny {
		return json.Marshal(u.Name)
	}
	return json.Marshal(map[string]string{"name": u.Name, "action": u.Action})
}

// ruleSetsKey is the key of the inspect object that holds rule set uses
// instead of a host's rules.
const ruleSetsKey = "rulesets"

// InspectRules is the whole JSON form of request rules: the hosts' own
// rules and the rule sets in use.
type InspectRules struct {
	Hosts    []InspectHost
	RuleSets []RuleSetUse
	// HasRuleSets: the "rulesets" key is there (its list may be empty,
	// to use none).
	HasRuleSets bool
}

// ParseInspectRules parses the JSON form of request rules, rule sets
// included: {"rulesets": [...], "api.example.com": {...}}.
func ParseInspectRules(data []byte) (InspectRules, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		// Not an object: ParseInspectJSON says so, naming the value.
		_, err := ParseInspectJSON(data)
		return InspectRules{}, err
	}
	var out InspectRules
	var errs []error
	if sets, ok := raw[ruleSetsKey]; ok {
		out.HasRuleSets = true
		delete(raw, ruleSetsKey)
		var uses []jsonRuleSetUse
		if err := json.Unmarshal(sets, &uses); err != nil {
			errs = append(errs, fmt.Errorf("inspect.rulesets %s: want a list of rule set names, or of {\"name\": ..., \"action\": ...}", strictjson.Compact(sets)))
		}
		for _, u := range uses {
			out.RuleSets = append(out.RuleSets, RuleSetUse(u))
		}
		if err := checkRuleSets(out.RuleSets); err != nil {
			errs = append(errs, fmt.Errorf("inspect.rulesets: %w", err))
		}
	}
	// The hosts' rules, decoded once above.
	var err error
	if out.Hosts, err = parseInspectHosts(raw); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return InspectRules{}, errors.Join(errs...)
	}
	return out, nil
}

// marshalInspectRules renders hosts and rule set uses as the JSON form
// ParseInspectRules reads.
func marshalInspectRules(hosts []InspectHost, uses []RuleSetUse) ([]byte, error) {
	m := map[string]any{}
	for k, v := range inspectJSON(hosts) {
		m[k] = v
	}
	if len(uses) > 0 {
		js := make([]jsonRuleSetUse, len(uses))
		for i, u := range uses {
			js[i] = jsonRuleSetUse(u)
		}
		m[ruleSetsKey] = js
	}
	return json.Marshal(m)
}

// MarshalInspectRules renders the policy's request rules and rule sets
// in the JSON form of the inspect key (what ParseInspectRules reads);
// nil if it inspects nothing.
func (p *Policy) MarshalInspectRules() ([]byte, error) {
	if !p.HasInspection() {
		return nil, nil
	}
	return marshalInspectRules(p.Inspect, p.RuleSets)
}

// WithRuleSets returns a copy of p with uses as its rule sets, checked;
// an error names what is wrong and p is not changed.
func (p *Policy) WithRuleSets(uses []RuleSetUse) (*Policy, error) {
	if err := checkRuleSets(uses); err != nil {
		return nil, err
	}
	q := *p
	q.RuleSets = slices.Clone(uses)
	return &q, nil
}

// HasInspection reports whether the policy inspects any host: request
// rules of its own, or a rule set. Such a policy needs its network's CA.
func (p *Policy) HasInspection() bool {
	return p != nil && (len(p.Inspect) > 0 || len(p.RuleSets) > 0)
}

// activeSets returns the sets in use, looked up.
func (p *Policy) activeSets() []ActiveRuleSet {
	var out []ActiveRuleSet
	for _, u := range p.RuleSets {
		s, err := LookupRuleSet(u.Name)
		if err != nil {
			continue // checked when the policy was made
		}
		out = append(out, ActiveRuleSet{Set: s, Action: u.Action})
	}
	return out
}

// RuleSetsFor returns the rule sets in force for name (normalized), each
// with the providers whose rules hold for it; a set that only inspects
// name (a front) has none.
func (p *Policy) RuleSetsFor(name string) []ActiveRuleSet {
	if p == nil || len(p.RuleSets) == 0 {
		return nil
	}
	var out []ActiveRuleSet
	for _, a := range p.activeSets() {
		if a.Set.inspectHostFor(name) == nil {
			continue
		}
		for _, pr := range a.Set.Providers {
			if pr.covers(name) {
				a.Providers = append(a.Providers, pr)
			}
		}
		out = append(out, a)
	}
	return out
}

// RefAction is the set's reference and action as the log writes them:
// "closed-book@1 strip".
func (a *ActiveRuleSet) RefAction() string {
	switch a.Action {
	case SetDeny:
		return a.Set.refDeny
	case SetStrip:
		return a.Set.refStrip
	case SetProbe:
		return a.Set.refProbe
	}
	return a.Set.Ref() + " " + a.Action
}

// Matcher returns the evidence lines that hold on the set's providers a
// covers, compiled (nil if none).
func (a *ActiveRuleSet) Matcher() *EvidenceMatcher {
	switch len(a.Providers) {
	case 0:
		return nil
	case 1:
		return a.Providers[0].matcher
	}
	return NewEvidenceMatcher(a.Evidence())
}

// Evidence returns the evidence lines that hold on the set's providers
// a covers: the set's own and theirs.
func (a *ActiveRuleSet) Evidence() []SetEvidence {
	if len(a.Providers) == 0 {
		return nil
	}
	out := slices.Clone(a.Set.Evidence)
	for _, p := range a.Providers {
		out = append(out, p.Evidence...)
	}
	return out
}

// ruleSetHostFor returns the inspected host of a rule set in use that
// covers name, or nil.
func (p *Policy) ruleSetHostFor(name string) *InspectHost {
	for _, u := range p.RuleSets {
		s, err := LookupRuleSet(u.Name)
		if err != nil {
			continue
		}
		if h := s.inspectHostFor(name); h != nil {
			return h
		}
	}
	return nil
}

// ruleSetHosts returns the names the rule sets in use inspect.
func (p *Policy) ruleSetHosts() []string {
	var out []string
	for _, a := range p.activeSets() {
		for _, h := range a.Set.hosts {
			out = append(out, h.Host)
		}
	}
	return out
}

// ruleSetLines renders the rule set uses as policy file lines.
func (p *Policy) ruleSetLines() []string {
	var out []string
	for _, u := range p.RuleSets {
		out = append(out, ruleSetWord+" "+u.String())
	}
	return out
}

// SiblingWarnings returns, for every name an entry admits that no rule
// inspects but that shares its registrable domain (example.com for
// api.example.com) with an inspected host, a warning: a front end that
// serves both by the request's Host may carry requests for the inspected
// host inside the uninspected one's TLS session, unseen. Rule sets
// inspect their providers' shared front ends themselves.
func (p *Policy) SiblingWarnings() []string {
	if p == nil || !p.HasInspection() {
		return nil
	}
	inspected := map[string][]string{} // registrable domain -> inspected hosts
	for _, h := range p.InspectedHosts() {
		d := registrableDomain(strings.TrimPrefix(h, "*."))
		if d != "" && !slices.Contains(inspected[d], h) {
			inspected[d] = append(inspected[d], h)
		}
	}
	var out []string
	for _, e := range p.Entries {
		if e.Kind != KindName && e.Kind != KindWildcard {
			continue
		}
		name, probe := e.Name, e.Name
		if e.Kind == KindWildcard {
			// Some name below it: inspected if a rule covers it.
			name, probe = "*."+e.Name, "doorman-probe."+e.Name
		}
		if p.InspectFor(probe) != nil {
			continue
		}
		d := registrableDomain(e.Name)
		if hosts := inspected[d]; len(hosts) > 0 {
			out = append(out, fmt.Sprintf("%s is allowed but not inspected, and shares %s with the inspected %s: a front end serving both may carry requests for %s inside %s's TLS session unseen (inspect %s too: \"inspect %s\")",
				name, d, strings.Join(hosts, ", "), hosts[0], name, name, name))
		}
	}
	return out
}

// registrableDomain is name's public suffix plus one label
// ("example.co.uk"), or "" if it has none.
func registrableDomain(name string) string {
	d, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil {
		return ""
	}
	return d
}
