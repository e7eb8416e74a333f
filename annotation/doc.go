// Package annotation reads the policy a container or a pod asks for in
// its doorman.io/* annotations: the OCI hook reads them from a bundle's
// config.json (or, on Docker, from container labels), the CNI plugin from
// the pod annotations the CRI passes in runtimeConfig. Both front doors
// share this one parser, so the same annotations give the same policy, or
// the same error, whichever door a workload comes in by.
//
// The grammar is conf's: mode is none, allowlist or open; allowed-hosts
// and allow-direct are comma-separated entries (blank ones ignored);
// rulesets is comma-separated rule set uses, NAME or NAME:ACTION. A
// value that does not parse is an error naming the annotation and the
// value, never a policy that ignores it.
//
// Where a cluster grants a pod its policy (the Kubernetes node agent),
// the annotations narrow it: Narrow and NarrowDirect intersect what they
// ask for with what is granted, entry by entry, so that whoever may
// create a pod may ask for less, never for more.
package annotation
