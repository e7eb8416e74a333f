package hostconf

// DefaultStateDir is where sandbox state lives unless configured otherwise.
// Its default, under /run, is a tmpfs: the state describes processes and
// namespaces that do not outlive a reboot.
const DefaultStateDir = "/run/doorman"

// DefaultLogDir is where decision logs go unless configured otherwise.
// Logs outlive their sandbox: they are the record of what it did.
const DefaultLogDir = "/var/log/doorman"

// DefaultCADir holds one directory per doorman network with that
// network's CA (package ca), unless configured otherwise. Not under
// /run: the CA outlives a reboot, so that the bundles containers trust
// stay valid.
const DefaultCADir = "/var/lib/doorman/ca"

// ConfigDir holds doorman's host-wide configuration: the limits and OTLP
// files, the runc wrapper's runtime.json, default policies and, by
// convention, the secret files of credential injection.
const ConfigDir = "/etc/doorman"
