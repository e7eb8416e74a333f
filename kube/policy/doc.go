// Package policy computes a Kubernetes pod's effective doorman policy
// from what the cluster says about it: the ClusterNetworkPolicies of the
// Kubernetes network policy API (sigs.k8s.io/network-policy-api, both
// tiers), doorman's own EgressPolicy objects (package kube/api/v1alpha1),
// the installer's node defaults, and the pod's doorman.io/* annotations.
// It is pure: the node agent (package kube/agent) hands it the objects its
// informers hold, and it returns the policy with notes on what doorman
// could not express. Nothing here talks to an API server.
//
// # ClusterNetworkPolicy, as doorman enforces it
//
// The egress rules of the policies whose subject selects the pod are
// evaluated as the API defines: the Admin tier by priority (lower first;
// equal priorities by name), each policy's rules in order, the first
// match deciding: Accept admits, Deny refuses, Pass skips the rest of the
// tier. doorman does not implement NetworkPolicy (the primary CNI does,
// and a connection must pass both): traffic an Admin rule passes goes on
// to the Baseline tier, and what no tier decides goes to the installer's
// policy (mode and allowedHosts of install-cni.json), which is the last
// tier. Kubernetes admits what no policy decides; doorman admits it only
// if the installer's policy does (by default it admits nothing). A pod no
// ClusterNetworkPolicy selects therefore gets the installer's policy, as
// before.
//
// Peers become doorman's entries: domainNames name and wildcard entries
// (the API's "*.example.com" is doorman's: one or more whole labels, not
// the apex), networks address entries, pods and namespaces the addresses
// of the pods they select, nodes the InternalIP and ExternalIP addresses
// of the nodes they select. TCP ports and ranges become entry ports;
// named ports the matching container ports of each selected pod. UDP and
// SCTP are not granted (doorman relays TCP; DNS to the pod's resolvers is
// always allowed), nor is ICMP (the installer's allowICMP decides).
//
// A Deny or Pass before an Accept takes its traffic out of what the Accept
// admits. doorman subtracts exactly where its entries can say the result
// (an address range minus another, a name minus a wildcard that holds
// it, a name minus a private network the proxy refuses to dial anyway);
// where they cannot (a name minus a public network, which it would learn
// only by resolving the name; a wildcard minus one name below it; an
// address range minus a name) it errs closed: the Accept's traffic on
// the overlapping ports is not admitted, and a Note says so. Rules that
// do not parse fail closed as the API asks: an Accept matches nothing, a
// Deny or Pass everything.
//
// # EgressPolicy and annotations
//
// What the tiers grant is the ceiling. An EgressPolicy selecting the pod
// narrows the allowlist (allowedHosts, intersected), adds request rules of
// inspected hosts (rules only refine what may be asked of a host the
// policy admits), names rule sets and turns ICMP off. The pod's
// annotations doorman.io/mode, doorman.io/allowed-hosts and
// doorman.io/allow-direct then narrow it too (AnnotationsNarrow, see
// annotation.Narrow: mode open means everything granted) or, on a single-tenant
// cluster's choice, replace it as they did before the agent
// (AnnotationsReplace).
package policy
