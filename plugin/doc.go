// Package plugin is doorman as a chained CNI plugin. Placed after an
// interface plugin (bridge, ptp, macvlan...) in a conflist, it enforces the
// network's policy on every container attached to it: ADD enforces the
// container's namespace through package sandbox and passes prevResult
// through unchanged, DEL undoes it, CHECK verifies the ruleset and the
// proxy, GC reaps attachments the runtime no longer knows, and STATUS says
// whether this host can enforce at all.
package plugin
