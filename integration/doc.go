// Package integration holds doorman's end-to-end tests: real network
// namespaces built by package testnet, the real doorman binary, the
// reference CNI plugins driven through libcni, and real clients (curl and
// Go) inside the sandboxes. They need root; run them with `make test`.
package integration
