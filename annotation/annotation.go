package annotation

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/spec"
)

// The annotations (and, on Docker, container labels) that carry a policy.
const (
	// Mode is the policy's mode: none, allowlist or open.
	Mode = "doorman.io/mode"
	// AllowedHosts are the policy's entries, comma-separated.
	AllowedHosts = "doorman.io/allowed-hosts"
	// AllowDirect are IP/CIDR entries (comma-separated, with an optional
	// port) reached without the proxy.
	AllowDirect = "doorman.io/allow-direct"
	// RuleSets are the shipped rule sets in force, comma-separated, each
	// NAME or NAME:ACTION ("closed-book:strip", see
	// conf.ParseRuleSetRef). They replace the rule sets of the policy the
	// other annotations, or the default policy, give.
	RuleSets = "doorman.io/rulesets"
)

// Keys are the annotations this package reads.
var Keys = []string{Mode, AllowedHosts, AllowDirect, RuleSets}

// Prefix starts every doorman annotation.
const Prefix = "doorman.io/"

// CheckKnown refuses an annotation under Prefix that is neither one of
// Keys nor one of others (those a front door reads besides): a misspelt
// doorman.io/allowed-host must not leave a container with a policy it
// did not ask for.
func CheckKnown(annotations map[string]string, others ...string) error {
	known := append(slices.Clone(Keys), others...)
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		if strings.HasPrefix(k, Prefix) && !slices.Contains(known, k) {
			return fmt.Errorf("annotation %s: unknown; the doorman annotations here are %s", k, strings.Join(known, ", "))
		}
	}
	return nil
}

// Policy returns the policy that annotations ask for, and whether they ask
// for one at all: they do when either Mode or AllowedHosts is present. A
// mode alone has no entries; entries alone are an allowlist. The error
// names the annotation and its value ("annotation doorman.io/mode:
// invalid mode \"permissive\": ...").
func Policy(annotations map[string]string) (p *conf.Policy, ok bool, err error) {
	mode, hasMode := annotations[Mode]
	hosts, hasHosts := annotations[AllowedHosts]
	if !hasMode && !hasHosts {
		return nil, false, nil
	}
	m := conf.ModeAllowlist
	if hasMode {
		if m, err = conf.ParseMode(mode); err != nil {
			return nil, true, fmt.Errorf("annotation %s: %w", Mode, err)
		}
	}
	p, err = conf.NewPolicy(m, split(hosts))
	if err != nil {
		return nil, true, fmt.Errorf("annotation %s: %w", AllowedHosts, err)
	}
	return p, true, nil
}

// WithRuleSets returns p with the rule sets the RuleSets annotation names
// instead of its own, or p if there is no such annotation. The error
// names the annotation and the value ("annotation doorman.io/rulesets:
// \"closed-bok\": ruleset: no rule set ...").
func WithRuleSets(p *conf.Policy, annotations map[string]string) (*conf.Policy, error) {
	v, ok := annotations[RuleSets]
	if !ok {
		return p, nil
	}
	uses, err := conf.ParseRuleSetList(v)
	if err == nil {
		p, err = p.WithRuleSets(uses)
	}
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", RuleSets, err)
	}
	return p, nil
}

// Direct parses the AllowDirect annotation: address entries only, none if
// it is absent. The error is a *spec.FieldError whose key is
// "annotation doorman.io/allow-direct".
func Direct(annotations map[string]string) ([]conf.Direct, error) {
	return spec.ParseAllowDirect("annotation "+AllowDirect, split(annotations[AllowDirect]))
}

// split returns the comma-separated values of s, trimmed, without blank
// ones.
func split(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
