// Package daemon is `doorman proxy` as a process: the proxy of one
// sandbox, its DNS filter and the log of its allowDirect flows, set up from
// one launch.Config and run until SIGTERM.
//
// A sandbox's supervisor (package supervise) starts one such process at a
// time, with the proxy's listening sockets (created inside the sandbox's
// network namespace) as inherited descriptors and everything else in the
// config file the sandbox wrote (package launch: Main takes what it was
// handed with launch.InheritWorker). A proxy can also be run by hand on a
// config file whose listeners are addresses to bind.
//
// Run wires the parts: listeners from descriptors (or addresses), the JSON
// decision log (and the OTLP export beside it), one upstream guard shared by
// the proxy and the DNS filter, the policy watcher that keeps both on the
// policy file, the conntrack watcher for allowDirect flows, and the drain on
// SIGTERM. While it runs it gives idle memory back (see dropBinaryPages).
package daemon
