package hook

import (
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
)

// The inspect annotation does not read rule sets yet: one that names
// them refuses the container, never runs it without its set.
func TestInspectAnnotationRefusesRuleSets(t *testing.T) {
	p, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"api.anthropic.com"})
	_, err := withInspectAnnotation(p, map[string]string{AnnotationInspect: `{"rulesets":["closed-book"]}`})
	if err == nil || !strings.Contains(err.Error(), "rulesets") {
		t.Fatalf("err %v", err)
	}
	// Rule sets from the policy file survive the annotation's rules.
	withSet, _ := p.WithRuleSets([]conf.RuleSetUse{{Name: "closed-book", Action: conf.SetStrip}})
	q, err := withInspectAnnotation(withSet, map[string]string{AnnotationInspect: `{"api.anthropic.com":{"deny":[{"method":"DELETE"}]}}`})
	if err != nil || len(q.RuleSets) != 1 {
		t.Fatalf("%v %+v", err, q)
	}
}
