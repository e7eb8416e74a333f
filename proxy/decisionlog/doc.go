// Package decisionlog reads what a sandbox's proxy wrote: its decision
// lines (one JSON object per connection, msg "connection", see
// proxy.Record, and one per query its DNS filter answered, msg "dns", see
// package dnsfilter) and its policy events ("policy loaded", "policy
// rejected"). It parses, filters, counts, follows and formats them for the
// operator CLI; package learn turns them into an allowlist that would
// admit what a sandbox was seen doing.
//
// DNS lines are decisions too: with the DNS filter on, a name the policy
// does not admit is refused at the lookup and the workload never connects,
// so the query is the only trace of what it tried.
//
// It exists apart from package proxy so that reading logs needs none of the
// proxy's machinery, and so that the format the proxy writes and the one
// the CLI reads are tested against each other in one place.
package decisionlog
