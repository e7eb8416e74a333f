package hook

import (
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
)

// Rule sets reach a container by the inspect annotation's "rulesets" key
// or by the rulesets annotation (one of the two); each replaces the
// policy's sets, and without either the policy's stay.
func TestInspectAnnotationRuleSets(t *testing.T) {
	p, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"api.anthropic.com"})
	withSet, _ := p.WithRuleSets([]conf.RuleSetUse{{Name: "closed-book", Action: conf.SetStrip}})
	for _, c := range []struct {
		name string
		base *conf.Policy
		ann  map[string]string
		want []conf.RuleSetUse
		err  string
	}{
		{"inspect key", p, map[string]string{AnnotationInspect: `{"rulesets":["closed-book"]}`}, []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetDeny}}, ""},
		{"inspect key, strip", p, map[string]string{AnnotationInspect: `{"rulesets":[{"name":"closed-book","action":"strip"}],"api.anthropic.com":{"deny":[{"method":"DELETE"}]}}`}, []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetStrip}}, ""},
		{"inspect key, none", withSet, map[string]string{AnnotationInspect: `{"rulesets":[]}`}, nil, ""},
		{"rulesets annotation", p, map[string]string{AnnotationRuleSets: "closed-book:probe"}, []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetProbe}}, ""},
		{"rulesets annotation beside host rules", p, map[string]string{AnnotationRuleSets: "closed-book", AnnotationInspect: `{"api.anthropic.com":{"deny":[{"method":"DELETE"}]}}`}, []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetDeny}}, ""},
		{"policy's sets survive host rules", withSet, map[string]string{AnnotationInspect: `{"api.anthropic.com":{"deny":[{"method":"DELETE"}]}}`}, []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetStrip}}, ""},
		{"both", p, map[string]string{AnnotationRuleSets: "closed-book", AnnotationInspect: `{"rulesets":["closed-book"]}`}, nil, "annotation doorman.io/inspect: rulesets: the doorman.io/rulesets annotation names rule sets too"},
		{"unknown set", p, map[string]string{AnnotationRuleSets: "closed-bok"}, nil, `annotation doorman.io/rulesets: "closed-bok": ruleset: no rule set "closed-bok"`},
		{"bad action", p, map[string]string{AnnotationRuleSets: "closed-book:block"}, nil, `annotation doorman.io/rulesets: "closed-book:block": ruleset closed-book: action "block": want deny, strip or probe`},
		{"unknown set in inspect", p, map[string]string{AnnotationInspect: `{"rulesets":["open-book"]}`}, nil, `annotation doorman.io/inspect: inspect.rulesets: ruleset: no rule set "open-book"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, err := withInspectAnnotation(c.base, c.ann)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(q.RuleSets) != len(c.want) {
				t.Fatalf("rule sets %v, want %v", q.RuleSets, c.want)
			}
			for i := range c.want {
				if q.RuleSets[i] != c.want[i] {
					t.Fatalf("rule sets %v, want %v", q.RuleSets, c.want)
				}
			}
		})
	}
}
