// Package daemon is `doorman proxy` as a process: the proxy of one
// sandbox, its DNS filter and the log of its allowDirect flows, set up from
// one Config and run until SIGTERM.
//
// The sandbox package starts one such process per sandbox, detached, with
// the proxy's listening sockets (created inside the sandbox's network
// namespace) as inherited descriptors, and describes everything else in a
// config file (WriteFile, LoadConfig): which descriptor is which listener,
// the policy file to watch, the decision log, the servers that resolve
// allowed names and those the DNS filter forwards to, the allowDirect
// destinations, the OTLP export. A file rather than flags: the settings are
// typed once, in one place that both sides share, and the OTLP headers,
// which often hold a token, stay off the command line that every user of
// the host can read in /proc. `doorman proxy` still takes flags for running
// a proxy by hand; they build the same Config.
//
// Run wires the parts: listeners from descriptors (or addresses), the JSON
// decision log (and the OTLP export beside it), one upstream guard shared by
// the proxy and the DNS filter, the policy watcher that keeps both on the
// policy file, the conntrack watcher for allowDirect flows, and the drain on
// SIGTERM. While it runs it gives idle memory back (see dropBinaryPages).
package daemon
