package hook

import (
	"path"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/cgroup"
)

// cgroupParent is the cgroup a container's proxy's cgroup goes below:
// the parent of the container's own cgroup, as its spec names it
// (linux.cgroupsPath, in either driver's form: "/docker/<id>" gives
// /docker, "system.slice:docker:<id>" /system.slice, a CRI container's
// its pod's cgroup), so that the proxy sits beside the container. Never
// below it: the runtime removes the container's cgroup before the
// poststop hook stops the proxy (runc does), which a proxy still inside
// would make fail, and on cgroup v2 a cgroup with processes (the
// container's) can have no child with controllers. A spec without a
// cgroupsPath, or with a relative one (runc then places the container
// below its own cgroup), gives none: the proxy goes to doorman's slice.
func cgroupParent(oci *specs.Spec) string {
	if oci.Linux == nil || oci.Linux.CgroupsPath == "" {
		return ""
	}
	p, err := cgroup.ParsePath(oci.Linux.CgroupsPath)
	if err != nil {
		return ""
	}
	return path.Dir(p)
}
