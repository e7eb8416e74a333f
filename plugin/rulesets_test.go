package plugin

import (
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/spec"
)

// A pod's doorman.io/rulesets annotation puts its sets in force over the
// network's policy, or over the policy its other annotations give; a bad
// one refuses the ADD naming the annotation and the value.
func TestPodRuleSetsAnnotation(t *testing.T) {
	network, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"api.anthropic.com"})
	args := &skel.CmdArgs{ContainerID: "c1", Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod"}
	for _, c := range []struct {
		ann  map[string]string
		want string // the policy's sets, or the error
	}{
		{map[string]string{"doorman.io/rulesets": "closed-book:strip"}, "[{closed-book strip}]"},
		{map[string]string{"doorman.io/allowed-hosts": "api.openai.com", "doorman.io/rulesets": "closed-book"}, "[{closed-book deny}]"},
		{map[string]string{}, "[]"},
		{map[string]string{"doorman.io/rulesets": "closed-book:block"}, `annotation doorman.io/rulesets: "closed-book:block": ruleset closed-book: action "block"`},
	} {
		n := &NetConf{Settings: Settings{Spec: spec.Spec{Policy: network}}, RuntimeConfig: RuntimeConfig{PodAnnotations: c.ann}}
		p, err := n.policy(args)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = fmtUses(p.RuleSets)
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%v: %s, want %s", c.ann, got, c.want)
		}
	}
}

func fmtUses(uses []conf.RuleSetUse) string {
	var parts []string
	for _, u := range uses {
		parts = append(parts, "{"+u.Name+" "+u.Action+"}")
	}
	return "[" + strings.Join(parts, " ") + "]"
}
