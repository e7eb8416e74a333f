// Package directlog writes the decision lines of a sandbox's allowDirect
// flows.
//
// allowDirect destinations bypass the proxy on both layers: the sandbox's
// ruleset accepts them before the redirect to the proxy, so the proxy never
// sees those connections and cannot log them. Yet every decision must be a
// log line. The kernel sees each of those flows as a new conntrack entry
// in the sandbox's network namespace, so this package subscribes to
// conntrack's NEW events there (a netlink socket opened in that namespace,
// from the proxy's own) and writes one "connection" line per new TCP or
// UDP flow whose original destination matches an allowDirect entry and that
// was not redirected (its reply comes from the original destination, not
// from the proxy's listener).
//
// Lines are written when the flow starts, with zero byte counts: counters
// exist only on DESTROY events, which come minutes after a TCP close
// (TIME_WAIT) or a UDP flow's last packet, need conntrack accounting
// switched on in the sandbox's namespace, and never come for flows still
// open when the proxy stops. A line per flow, at once and always, is what
// an operator reading the log needs.
//
// The watcher only reads: it never changes the namespace, and a sandbox
// without allowDirect entries gets no socket at all. Events the kernel
// could not queue (ENOBUFS, a flood of new flows) are counted and
// reported once, not fatal.
package directlog
