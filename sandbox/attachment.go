package sandbox

import (
	"errors"
	"net/netip"

	"github.com/doorman-net/doorman/spec"
)

// Attachment is who a sandbox is: the container and, for CNI, the
// attachment of it that the sandbox enforces.
type Attachment struct {
	Key string // unique per attachment; names the state directory (see ValidKey)
	// ID is what the sandbox is called (default Key): the container id,
	// or for a Kubernetes pod "<namespace>/<pod name>". The decision log
	// and the CLI show it, and the CLI takes it as a selector.
	ID      string
	Name    string // container name, if known
	PodUID  string // a Kubernetes pod's uid, if known: in the decision log with the ID
	Runtime string // "cni" or "hook"
	// RuntimeKind is the kind of runtime the workload runs on, where the
	// front door knows it (see package runtimekind); "" for unknown.
	RuntimeKind string
	Network     string // CNI network name, if any
	IfName      string // CNI interface name, if any
	NetNS       string // path of the sandbox's network namespace
	// Label is what the in-namespace rules cover given the workload's
	// capabilities: full or partial (...); see ComposeLabel.
	Label string
	// HostIfaces names the sandbox's host interfaces for the host-side
	// layer (the CNI prevResult's host veth); empty means find the veth
	// peers of the sandbox. With the layer in place the label is "full";
	// where no host interface can be found (macvlan, or a runtime that
	// adds the interface later) the sandbox runs without it and keeps its
	// Label.
	HostIfaces []string
	// Addrs are the addresses IPAM assigned interface IfName (the CNI
	// result's): where the host-side layer first pins the sandbox's
	// identity on that interface, it pins these rather than those the
	// interface has. Empty means read them from the interface.
	Addrs []netip.Addr
	// CgroupParent is the cgroup the proxy's cgroup goes below, as the
	// runtime names it (see cgroup.ParsePath): a pod's cgroup, from the
	// CNI cgroupPath capability, or the parent of a container's own
	// cgroup, for the OCI hook. Empty, or one that cannot be used, means
	// doorman's slice (DefaultCgroupSlice).
	CgroupParent string
}

// validate checks what Enforce needs of s and a; each value in them was
// parsed once, by its front door.
func validate(s *spec.Spec, a Attachment) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if a.NetNS == "" {
		return errors.New("no network namespace")
	}
	return ValidKey(a.Key)
}
