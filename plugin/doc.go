// Package plugin is doorman as a chained CNI plugin. Placed after an
// interface plugin (bridge, ptp, macvlan...) in a conflist, it enforces the
// network's policy on every container attached to it: ADD enforces the
// container's namespace through package sandbox and passes prevResult
// through unchanged, DEL undoes it, CHECK verifies the ruleset and the
// proxy, GC reaps attachments the runtime no longer knows, and STATUS says
// whether this host can enforce at all.
//
// The conflist entry is this front door's keys: ADD turns them into one
// sandbox.Spec (the policy parsed once, with conf.ParseJSON, or from a
// per-container file in policyDir), and a bad value is an error naming
// the key, the value and why.
package plugin
