// Package hostconf holds the host-wide defaults every front door of doorman
// falls back to: the host's DNS servers (/etc/resolv.conf, or
// systemd-resolved's upstreams behind its loopback stub), the host-wide OTLP
// export settings (/etc/doorman/otlp.json) and caps (/etc/doorman/limits.json),
// and where sandbox state and decision logs live unless a front door names
// other directories.
//
// It exists so that the CNI plugin, the OCI hook and `doorman run` read the
// host the same way without importing each other: each of them is a front
// door that builds a spec.Spec, and none is a library of the others.
// Nothing here is per sandbox.
package hostconf
