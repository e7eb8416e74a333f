// Package learn turns what a sandbox was seen doing, the decisions of its
// log (see package decisionlog), into an allowlist that would admit it:
// what `doorman learn` prints.
//
// It is apart from package decisionlog because it is not reading the log
// but proposing a policy, and because it needs the public suffix list (no
// wildcard above a registrable domain), whose package brings net/http
// with it: decisionlog is imported by every writer of the log in the
// long-lived proxy, and stays light.
package learn
