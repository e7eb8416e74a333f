// Package sandbox owns doorman's sandboxes: it is the one enforcement core
// that every front door calls (the CNI plugin's ADD/DEL/CHECK/GC, the OCI
// hook's createRuntime/poststop, `doorman run` through the plugin, the
// operator CLI's edits), and the code that writes doorman's state for a
// network namespace: the state file, the live policy file and the proxy's
// config file (package launch's format). Others read that state through
// it (Load, List, Find), and two files beside it are another's: the
// supervisor of a sandbox's proxy (package supervise) writes its status
// file, supervisor.json, which Load reads, and the proxy worker appends
// to the decision log. The network namespace itself is the runtime's (or,
// for `doorman run`, package runner's): a sandbox only records and checks
// its identity. What ls and show compute from a state is package
// sandbox/status's.
//
// A front door describes a sandbox once, typed: an Attachment (who: the
// container, its runtime, its netns, its label) and a spec.Spec (what: the
// policy, the resolvers, the upstream resolver, allowDirect, the layers,
// logging and export), which it builds from its own keys with the parsers
// of package spec. Nothing after that parses a setting again: the state
// embeds the Spec, and the proxy's config file its Proxy part.
//
// Enforcing a sandbox means, in this order:
//
//  1. create the proxy's listening sockets inside the sandbox's network
//     namespace (they stay bound to it after the thread leaves);
//  2. write the proxy's config file (package launch), make the proxy's
//     cgroup (package cgroup: below the cgroup the runtime names, else in
//     doorman's slice, with the Spec's limits), start one detached
//     `doorman supervise` in the caller's namespace (package supervise),
//     and hand it those sockets;
//  3. install the nftables ruleset (package enforce) that redirects the
//     sandbox's TCP to those sockets and rejects everything else, and
//     wait until the supervisor has started the `doorman proxy` that is
//     its first worker, in the cgroup (for a new sandbox, not until that
//     worker serves, see workerStarted, unless the sandbox has allowDirect
//     entries, whose flows only a serving worker logs; an operator's
//     start, until it serves);
//  4. meanwhile, where asked, install the host-side layer (package
//     hostlayer) on the sandbox's host interfaces;
//  5. record the sandbox's state (ports, proxy pid and start time, the
//     Spec's settings, label, the identity the host-side layer pins) under
//     the state directory.
//
// The cgroup is made before all of this, and a move into it is warmed at
// once (cgroup.WarmMigration), so that the kernel's wait on the first
// move runs beside the rest rather than after it; the supervisor is moved
// into it right after its exec, while it starts up, and joins it itself
// before it starts a worker.
//
// Any failure undoes what was done, so a container never starts with a
// half-applied policy. Because plugin and hook call the same Enforce and
// Teardown, their enforcement is the same by construction. Enforce on a
// live sandbox replaces its policy and rules (a second ADD or hook run),
// putting the old ones back if a step fails;
// UpdatePolicy and EditPolicy change a live sandbox's policy, starting or
// stopping its proxy when the mode enters or leaves none; Teardown, Check,
// List, Find and Holder do what they say.
//
// The supervisor holds the listeners and replaces a worker that dies, so
// the sandbox stays closed (never open) while none runs, and the ruleset
// never changes for it. The state records the supervisor; the worker
// serving now is the one its status file names (Load reads it). Check
// fails while no worker serves, while workers crash loop, when the
// supervisor is gone (nothing would replace the worker), and after Stop,
// an operator's way to keep a sandbox's proxy stopped until Start.
// Teardown, Stop and a mode change to none stop the supervisor, then any
// worker left, then remove the cgroup, which kills whatever still runs in
// it.
//
// The state records the namespace's identity (nsfs device and inode) beside
// its path. Runtimes often name a namespace /proc/PID/ns/net, which names
// another process's namespace once PID has exited and been reused; Teardown,
// Check and mode changes act on the path only while it still names the
// sandbox's own.
//
// The state also records the MAC and addresses the host-side layer pins
// on each host interface, as its first Apply found them (the CNI result's
// addresses where the plugin gives them), and passes them back to every
// later Apply and Check: a second ADD or hook run must not pin what a
// workload holding CAP_NET_ADMIN changed in the meantime.
//
// What the lifecycle changes outside the state directory it changes
// through small interfaces (kernel.go): the ruleset (package enforce:
// Present, Create, Apply, Check, Remove), the host-side layer (package
// hostlayer), network namespaces (open one, read its identity), the
// proxy's start (sockets, config file and supervisor), recorded processes
// (alive, stop) and cgroups. The exported functions use the host's
// implementations, which call those packages as before; a State carries
// the set it was loaded or made with. The package's unit tests hand fakes,
// so that what is decided (the order of the steps, what a failure at each
// undoes, what is refused, what a second call does) is tested without
// root; the tests beside them that need root, and ./integration, run the
// same code on the host.
//
// State files written by earlier releases are read as they are: Load
// migrates what they said in their own way (see legacy.go), and their
// proxies, started with flags, run on untouched until a mode change
// starts a new one.
package sandbox
