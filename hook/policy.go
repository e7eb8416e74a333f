package hook

import (
	"errors"
	"fmt"
	"os"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/annotation"
	"github.com/doorman-net/doorman/conf"
)

// The annotations (and, on Docker, container labels) that carry a policy
// (see package annotation, which parses them for the hook and the CNI
// plugin alike).
const (
	AnnotationMode         = annotation.Mode
	AnnotationAllowedHosts = annotation.AllowedHosts
	// AnnotationAllowDirect lists IP/CIDR entries (comma-separated, with
	// an optional port) the container reaches without the proxy.
	AnnotationAllowDirect = annotation.AllowDirect
	// AnnotationRuleSets names the shipped rule sets in force
	// ("closed-book:strip", comma-separated).
	AnnotationRuleSets = annotation.RuleSets
)

// DefaultPolicyFile is the policy for containers that carry no doorman
// annotation, in the plain allowlist form.
const DefaultPolicyFile = "/etc/doorman/default.policy"

// errNoPolicy means a container has neither annotations nor a default.
var errNoPolicy = errors.New("no doorman policy")

// policyFor returns the policy a container's annotations give it, or else
// the default policy file's. It never falls back to "allow everything".
func policyFor(annotations map[string]string, defaultFile string) (*conf.Policy, string, error) {
	if p, ok, err := annotation.Policy(annotations); ok {
		return p, "annotations", err
	}
	if defaultFile == "" {
		defaultFile = DefaultPolicyFile
	}
	p, err := conf.LoadFile(defaultFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("%w: default policy (--default-policy, runtime.json's defaultPolicy) %s: no such file; set the %s (and %s) annotation or label, or write a default policy there",
			errNoPolicy, defaultFile, AnnotationMode, AnnotationAllowedHosts)
	}
	if err != nil {
		return nil, "", fmt.Errorf("default policy (--default-policy, runtime.json's defaultPolicy): %w", err)
	}
	return p, defaultFile, nil
}

// Label says what doorman's enforcement covers for a container with spec,
// under policy mode m. Rules inside the sandbox do not hold against a
// workload that can rewrite them (CAP_NET_ADMIN) or send frames past them
// (CAP_NET_RAW: AF_PACKET, SO_MARK), until a layer outside exists.
func Label(spec *specs.Spec, m conf.Mode) string {
	if m == conf.ModeOpen {
		return "n/a"
	}
	return Coverage(spec)
}

// Coverage is what enforcement covers for a container with spec whenever
// it applies (the label recorded with the sandbox, whatever its mode).
func Coverage(spec *specs.Spec) string {
	switch {
	case hasCap(spec, "CAP_NET_ADMIN"):
		return "partial (container holds CAP_NET_ADMIN)"
	case hasCap(spec, "CAP_NET_RAW"):
		return "partial (container holds CAP_NET_RAW)"
	}
	return "full"
}

// hasCap reports whether the container's process can hold capability c:
// it is in its bounding set (or, without one, in any other set).
func hasCap(spec *specs.Spec, c string) bool {
	if spec == nil || spec.Process == nil || spec.Process.Capabilities == nil {
		return false
	}
	caps := spec.Process.Capabilities
	sets := [][]string{caps.Bounding}
	if len(caps.Bounding) == 0 {
		sets = [][]string{caps.Effective, caps.Permitted, caps.Inheritable, caps.Ambient}
	}
	for _, set := range sets {
		for _, have := range set {
			if strings.EqualFold(have, c) {
				return true
			}
		}
	}
	return false
}
