// Package v1alpha1 is doorman's own Kubernetes resource, EgressPolicy
// (group doorman.io, version v1alpha1): what a namespace's admins may say
// about their pods' egress that the cluster's ClusterNetworkPolicies
// cannot — request rules of inspected hosts, credentials kept in a Secret
// and put into requests by the proxy, named rule sets, ICMP — and a list
// of hosts that narrows what the cluster grants. It never widens: the
// node agent (package kube/agent) intersects what it says with what the
// cluster grants the pod (package kube/policy).
//
// The CustomResourceDefinition is deploy/kubernetes/crd-egresspolicies.yaml;
// the Go types here are what the agent decodes its objects into (with
// runtime.DefaultUnstructuredConverter, from a dynamic informer), so no
// generated clientset is needed. DeepCopy methods are written by hand.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, Version and Resource name the API.
const (
	Group    = "doorman.io"
	Version  = "v1alpha1"
	Resource = "egresspolicies"
	Kind     = "EgressPolicy"
)

// GroupVersion is doorman.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// GroupVersionResource is the EgressPolicy resource, for dynamic clients.
var GroupVersionResource = GroupVersion.WithResource(Resource)

// AddToScheme registers EgressPolicy and EgressPolicyList in s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &EgressPolicy{}, &EgressPolicyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// EgressPolicy is a namespace's word on the egress of some of its pods:
// the pods its PodSelector selects in its own namespace.
type EgressPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              EgressPolicySpec `json:"spec"`
}

// EgressPolicyList is a list of EgressPolicy.
type EgressPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressPolicy `json:"items"`
}

// EgressPolicySpec is what an EgressPolicy says. Every field narrows or
// refines what the cluster grants the selected pods; none admits a host
// the cluster does not.
type EgressPolicySpec struct {
	// PodSelector selects pods of the policy's namespace; empty selects
	// every pod there.
	PodSelector metav1.LabelSelector `json:"podSelector"`
	// AllowedHosts, if set, narrows the pods' allowlist to what both it
	// and the cluster admit (entries in doorman's grammar:
	// "api.example.com", "*.example.com:443", "203.0.113.0/24"). An empty
	// list admits nothing; leaving it out keeps what the cluster grants.
	AllowedHosts []string `json:"allowedHosts,omitempty"`
	// Inspect are request rules of hosts whose TLS the proxy terminates
	// (docs/policy.md: "Request rules: inspected hosts"). They refine what may be
	// asked of a host the cluster admits; they admit no host.
	Inspect []InspectHost `json:"inspect,omitempty"`
	// RuleSets names rule sets (such as "closed-book") the pods' proxies
	// apply, carried through to the pod's policy.
	RuleSets []string `json:"ruleSets,omitempty"`
	// ICMP, if false, turns off the small echo requests the node's
	// allowICMP lets out; true keeps them where the node allows them (it
	// cannot turn them on).
	ICMP *bool `json:"icmp,omitempty"`
}

// InspectHost is the request rules of one host, in the shape of the
// "inspect" JSON form of a doorman policy, with credentials taken from
// Secrets.
type InspectHost struct {
	// Host is a name or a wildcard ("api.example.com", "*.example.com").
	Host string `json:"host"`
	// Deny rules are tried first, then Allow rules, then Default
	// ("allow" or "deny"; left out: deny if there are allow rules).
	Deny    []Rule `json:"deny,omitempty"`
	Allow   []Rule `json:"allow,omitempty"`
	Default string `json:"default,omitempty"`
	// Inject puts a Secret's value into requests carrying a placeholder.
	Inject []Inject `json:"inject,omitempty"`
	// MaxBody bounds the body read for a body rule, in bytes.
	MaxBody int64 `json:"maxBody,omitempty"`
}

// Rule matches requests: every condition given must hold.
type Rule struct {
	Method []string          `json:"method,omitempty"`
	Path   string            `json:"path,omitempty"`
	Query  map[string]string `json:"query,omitempty"`
	Header map[string]string `json:"header,omitempty"`
	JSON   map[string]string `json:"json,omitempty"`
}

// Inject replaces Placeholder in Header with the value of a key of a
// Secret in the policy's namespace. The node agent reads the Secret and
// writes the value to a file on the node (0600) that the pod's proxy
// reads; it never reaches the pod.
type Inject struct {
	Header      string `json:"header"`
	Placeholder string `json:"placeholder"`
	// SecretKeyRef names the Secret (in the policy's namespace) and key.
	SecretKeyRef SecretKeyRef `json:"secretKeyRef"`
}

// SecretKeyRef is a key of a Secret in the same namespace.
type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}
