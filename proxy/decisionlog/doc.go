// Package decisionlog defines the log a sandbox's proxy writes, and reads
// it back.
//
// The log is JSON lines, one slog record each. Its decision lines are one
// per connection (msg "connection": the proxy's, see proxy.Record, and the
// allowDirect flows that bypass it, see package directlog) and one per
// query the DNS filter answered (msg "dns", see package dnsfilter); around
// them are the policy watcher's events ("policy loaded", "policy
// rejected, denying everything"), the resolvers the proxy uses, the OTLP
// export's counts and the errors a proxy survives.
//
// The schema is defined here once: every message, every field's key and
// type, the verdicts and the reasons readers tell apart (schema.go), and
// typed lines that write them (Connection, DNSQuery, PolicyLoad,
// Resolver). Every writer in the proxy uses them, and the reader's JSON
// tags are tested against them, so that adding a field is one change in
// one package and a key spelt two ways cannot split the log.
//
// The rest is for the operator CLI: it parses, filters, counts, follows
// and formats the lines, and waits for policy events; package learn turns
// decisions into an allowlist that would admit what a sandbox was seen
// doing.
//
// DNS lines are decisions too: with the DNS filter on, a name the policy
// does not admit is refused at the lookup and the workload never connects,
// so the query is the only trace of what it tried.
//
// The proxy's packages import this one, and the proxy is a long-lived
// process per sandbox: it imports nothing but the standard library (see
// TestImportsOnlyTheStandardLibrary), and reading logs needs none of the
// proxy's machinery.
package decisionlog
