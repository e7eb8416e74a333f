// Package spec is the typed description of a sandbox that every layer of
// doorman shares: Spec, what one sandbox enforces (its policy, resolvers,
// allowDirect, layers, logging, export, caps and cgroup limits), and its
// Proxy part, what the sandbox's proxy enforces besides the policy.
//
// Each front door fills one Spec from its own keys, once: the CNI plugin
// from its conflist entry and runtimeConfig (package plugin), the OCI hook
// from annotations, Docker labels, runtime.json and its flags (package
// hook), `doorman run` from its flags (package runner, which hands the
// Spec to the plugin as conflist keys). The parsers here (ParseAllowDirect,
// ParseServers, ParseNAT64Prefixes, ParseMemoryLimit, ParseLimits,
// ParseOTLP, ...) are the ones every front door uses: their FieldError
// names the key as that front door spells it, so that a bad value reads
// the same from every door.
//
// The Spec is then embedded, not copied: by the request and the state of
// a sandbox (package sandbox, whose state.json carries its keys) and, its
// Proxy part, by the proxy's config file (package launch). A setting added
// to Spec or Proxy reaches the state and the proxy with no code between.
//
// It is a leaf: it imports only the policy (package conf), the value types
// of the packages that enforce its settings (cgroup.Limits, guard's check
// of a NAT64 prefix, resolver's form of a DNS server, sniff's size of a
// ClientHello), and the standard library.
package spec
