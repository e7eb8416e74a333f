// Package plugin is doorman as a chained CNI plugin. Placed after an
// interface plugin (bridge, ptp, macvlan...) in a conflist, it enforces the
// network's policy on every container attached to it: ADD enforces the
// container's namespace through package sandbox and passes prevResult
// through unchanged, DEL undoes it, CHECK verifies the ruleset and the
// proxy, GC reaps attachments the runtime no longer knows, and STATUS says
// whether this host can enforce at all.
//
// The conflist entry is this front door's keys. A verb decodes its stdin
// once, into the entry's keys, and hands each key's value to its parser:
// the CNI's keys (types.PluginConf), doorman's (ParseEntry, reporting each
// bad value with its key and why, and refusing keys it does not know; each
// allowedHosts entry and inspect rule parsed once, the policy built from
// what they returned) and runtimeConfig (ParseRuntimeConfig). ParseEntry
// is the one parser of doorman's keys: the Kubernetes installer (package
// cniinstall) checks its --config with it, so that it never writes an
// entry the plugin refuses, and `doorman run` (package runner) writes its
// network's entry from a typed spec.Spec with Settings.Entry, the
// inverse. ADD turns the settings into one spec.Spec. A DEL or GC whose
// entry does not parse still tears down, with the defaults of the bad
// keys.
//
// # Kubernetes pods
//
// A CRI runtime (containerd, CRI-O) names the pod in CNI_ARGS
// (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID, in any order) and passes
// the values of the capabilities the entry declares in runtimeConfig
// (ParseRuntimeConfig): the pod's annotations, its DNS settings and its
// cgroup. For a pod:
//
//   - the sandbox is called "<namespace>/<pod name>" (the state's key
//     stays the container id and interface, which can name a directory),
//     and its decision log carries the pod's uid;
//   - the policy is the one its doorman.io/mode and doorman.io/allowed-hosts
//     annotations ask for (package annotation, the OCI hook's parser),
//     else a policyDir file, else the network's; doorman.io/allow-direct
//     adds to the network's allowDirect. Annotations that do not parse
//     fail the ADD, naming the annotation and the value: the pod stays in
//     ContainerCreating with that reason, and never runs unenforced;
//   - a pod in one of the excludeNamespaces (kube-system by default:
//     cluster DNS and the CNI's own pods) is passed through untouched, and
//     recorded as unenforced ("n/a (excluded namespace)") so that the CLI
//     lists it;
//   - its resolvers are the servers of the dns capability: what the
//     kubelet writes into the pod's resolv.conf, so they come before the
//     interface plugin's result, which the kubelet does not use;
//   - names under clusterDomain may reach serviceCIDRs and podCIDRs
//     through the proxy, and no other private range (see package guard).
//   - its cgroup (the cgroupPath capability: a cgroupfs path or a systemd
//     slice name; anything else fails the ADD) is recorded in the
//     sandbox's state as its cgroupParent.
//
// The runtime sends DEL twice, at the pod's stop (with prevResult and its
// netns) and at its removal (with neither); the second finds nothing left
// to do.
package plugin
