// Package cgroup puts a process tree in a control group of its own with a
// memory, a pids and a CPU weight limit, and takes it away again: the
// cgroup each sandbox's proxy runs in.
//
// A proxy lives in the runtime's namespace, outside the container, so
// without a cgroup of its own it runs wherever its caller did (often the
// host's root cgroup) and outside every limit the container has: one
// sandbox that makes its proxy grow takes memory, processes and CPU from
// its neighbours and the host. Here each proxy gets a cgroup that caps it,
// placed under the cgroup the runtime names (a Kubernetes pod's, so that
// it counts against the pod) or in doorman's own slice.
//
// Hosts come in three layouts, and this package handles each the same way
// from the outside: cgroup v1 (one hierarchy per controller or group of
// controllers, mounted under /sys/fs/cgroup/<ctrl>), cgroup v2 (one
// unified hierarchy), and the hybrid of both that systemd sets up on
// older distributions (v1 controllers plus a v2 "unified" hierarchy that
// holds none). A Layout lists the hierarchies of the mounts this process
// sees (/proc/self/mountinfo) and, for each controller doorman limits
// (memory, pids, cpu), the one hierarchy that holds it. A Group is one
// cgroup path made in each of those hierarchies.
//
// Runtimes name cgroups in one of two forms, after their cgroup driver:
// a path (cgroupfs: "/kubepods/burstable/pod<uid>") or systemd units
// ("kubepods-burstable-pod<uid>.slice" for a slice, "slice:prefix:name"
// for a container's scope, which runc expands to
// "/<slice path>/<prefix>-<name>.scope"). ParsePath turns either into the
// path of the cgroup tree. doorman writes the cgroup filesystem itself in
// both cases, as runc's and the kubelet's cgroupfs drivers do: the path a
// systemd driver chose is where its units live, and a cgroup beside them
// is no unit of systemd's.
//
// On v2, a cgroup whose children have controllers must hold no processes
// itself (the "no internal processes" rule): a container's own cgroup
// holds the container, so a proxy can never go below it. That is why
// callers place a proxy beside a container (under its parent), or under a
// pod's cgroup, which holds only the pod's containers' cgroups.
package cgroup
