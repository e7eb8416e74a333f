// Package hook gives containers that never see a CNI plugin the same
// enforcement as those that do: Podman 5+ and CRI-O (through hooks.d),
// Docker and the inner daemons of Docker-in-Docker (through a runc wrapper,
// since dockerd has no hooks directory), and plain runc (hooks in
// config.json).
//
// The OCI hook (Hook.Run) reads the runtime's state on stdin and the bundle's
// config.json, finds the container's network namespace, works out its
// policy and enforcement label, builds one sandbox.Spec from its
// annotations, the resolv.conf the container will see and the hook's
// flags, and calls the same enforcement core as the CNI plugin (package
// sandbox). A container whose namespace another sandbox holds
// (sandbox.Holder) joins that sandbox's enforcement instead. Any failure
// exits non-zero, so the runtime refuses to start the container: an
// unenforced container never runs.
//
// The container's proxy gets a cgroup beside the container's, below the
// parent of its linux.cgroupsPath (cgroupParent), never inside it: runc
// removes the container's cgroup before poststop tears the sandbox down,
// and its kill and freeze of the container reach only that cgroup, so
// the proxy neither blocks the removal nor dies before the teardown.
//
// The runtime wrapper (Wrap) sits where dockerd expects runc. On `create`
// and `run` it adds doorman's hooks to config.json (once), copies
// doorman.io/* container labels from Docker's own container config into
// annotations (Docker 20.10 passes neither labels nor annotations to the
// runtime), sets DOORMAN_NETWORK_MODE and DOORMAN_ENFORCEMENT in the
// container's environment, and then execs the real runc with the arguments
// untouched.
package hook
