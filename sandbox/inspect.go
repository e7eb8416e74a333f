package sandbox

import (
	"fmt"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
)

// prepareInspect readies what a policy with request rules needs before it
// is put in force: every secret file it names can be read, and the
// network's CA exists and vouches for every inspected host (created on
// first use, re-issued for a grown host set; see package ca). A policy
// without request rules needs nothing. On error the policy must not be
// put in force: the error says why, never a secret's content.
func prepareInspect(caDir string, p *conf.Policy) error {
	if !p.HasInspection() {
		return nil
	}
	if err := p.CheckSecrets(); err != nil {
		return fmt.Errorf("request rules: %w", err)
	}
	if caDir == "" {
		return fmt.Errorf("request rules for %v: this sandbox has no CA directory (it was enforced by a doorman without request rules; restart it)", p.InspectedHosts())
	}
	if _, err := ca.Ensure(caDir, p.InspectedHosts()); err != nil {
		return fmt.Errorf("request rules: the network's CA: %w", err)
	}
	return nil
}
