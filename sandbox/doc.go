// Package sandbox is the one enforcement core that both of doorman's entry
// points call: the CNI plugin (ADD/DEL/CHECK/GC) and the OCI hook
// (createRuntime/poststop). Enforcing a sandbox means, in this order:
//
//  1. create the proxy's listening sockets inside the sandbox's network
//     namespace (they stay bound to it after the thread leaves);
//  2. start one detached `doorman proxy` in the caller's namespace, hand it
//     those sockets, and wait until it says it is serving;
//  3. install the nftables ruleset (package enforce) that redirects the
//     sandbox's TCP to those sockets and rejects everything else;
//  4. meanwhile, where asked, install the host-side layer (package
//     hostlayer) on the sandbox's host interfaces;
//  5. record the sandbox's state (ports, proxy pid and start time, policy,
//     label, the identity the host-side layer pins) under the state
//     directory.
//
// Any failure undoes what was done, so a container never starts with a
// half-applied policy. Because plugin and hook call the same Enforce and
// Teardown, their enforcement is the same by construction.
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
package sandbox
