package k8scluster

import (
	"fmt"
	"strings"
	"testing"
)

// DomainGrant is a ClusterNetworkPolicy (policy.networking.k8s.io/v1beta1)
// named name, in the Admin tier at priority, whose one egress rule,
// "granted", accepts TCP to port 443 of hosts (its domainNames) from the
// pods of namespace: for Apply or ApplyClusterPolicy. A test that wants
// more rules appends them to its egress list, which the manifest ends
// with.
func DomainGrant(name, namespace string, priority int, hosts ...string) string {
	return fmt.Sprintf(`
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: %s}
spec:
  tier: Admin
  priority: %d
  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: %s}}}
  egress:
  - {name: granted, action: Accept, to: [{domainNames: ["%s"]}], protocols: [{tcp: {destinationPort: {number: 443}}}]}
`, name, priority, namespace, strings.Join(hosts, `", "`))
}

// ApplyClusterPolicy applies manifest, the ClusterNetworkPolicy named
// name (such as DomainGrant's), and deletes it when tb ends.
func (c *Cluster) ApplyClusterPolicy(tb testing.TB, name, manifest string) {
	tb.Helper()
	c.Apply(tb, manifest)
	tb.Cleanup(func() { c.Kubectl(tb, "delete", "clusternetworkpolicy", name, "--ignore-not-found") })
}
