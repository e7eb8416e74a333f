// Package daemon is `doorman proxy` as a process: the proxy of one
// sandbox, its DNS filter and the log of its allowDirect flows, set up from
// one proxyconf.Config and run until SIGTERM.
//
// The sandbox package starts one such process per sandbox, detached, with
// the proxy's listening sockets (created inside the sandbox's network
// namespace) as inherited descriptors, and everything else in a config
// file (package proxyconf). `doorman proxy` also takes flags for running a
// proxy by hand; they build the same proxyconf.Config.
//
// Run wires the parts: listeners from descriptors (or addresses), the JSON
// decision log (and the OTLP export beside it), one upstream guard shared by
// the proxy and the DNS filter, the policy watcher that keeps both on the
// policy file, the conntrack watcher for allowDirect flows, and the drain on
// SIGTERM. While it runs it gives idle memory back (see dropBinaryPages).
package daemon
