package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ociDir is where the init keeps the OCI runtime's bundle and state: in
// the command's own /run (mountRun's tmpfs, gone with its mount
// namespace), and covered inside the container by a tmpfs of the
// runtime's, so that the command cannot touch the runtime's state.
const ociDir = "/run/doorman-oci"

// ociContainerID is the container's id in the runtime's state directory,
// which holds only this run's container.
const ociContainerID = "doorman-run"

// keptCapNames are keptCaps by their OCI names.
var keptCapNames = map[int]string{
	unix.CAP_CHOWN: "CAP_CHOWN", unix.CAP_DAC_OVERRIDE: "CAP_DAC_OVERRIDE",
	unix.CAP_FOWNER: "CAP_FOWNER", unix.CAP_FSETID: "CAP_FSETID",
	unix.CAP_KILL: "CAP_KILL", unix.CAP_SETGID: "CAP_SETGID",
	unix.CAP_SETUID: "CAP_SETUID", unix.CAP_SETPCAP: "CAP_SETPCAP",
	unix.CAP_NET_BIND_SERVICE: "CAP_NET_BIND_SERVICE", unix.CAP_NET_RAW: "CAP_NET_RAW",
	unix.CAP_SYS_CHROOT: "CAP_SYS_CHROOT", unix.CAP_AUDIT_WRITE: "CAP_AUDIT_WRITE",
	unix.CAP_SETFCAP: "CAP_SETFCAP",
}

// ociSpec is the container that runs the init's command under an OCI
// runtime: its root is the init's view of the host (the covers, the run's
// resolv.conf and /run included), writable as the command would find it
// without a runtime; the runtime's own /proc, /dev and /sys; the command,
// its environment, working directory and user as given, with keptCaps
// (bounding only, for a user other than root); and the runtime's own pid,
// mount, IPC and UTS namespaces in the init's network namespace, whose
// interface the runtime's network stack takes. Nothing sets a cgroup: the
// runtime's default applies.
func ociSpec(spec initSpec) (*specs.Spec, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("no command")
	}
	var caps []string
	for _, c := range keptCaps {
		name, ok := keptCapNames[c]
		if !ok {
			return nil, fmt.Errorf("capability %d has no OCI name", c)
		}
		caps = append(caps, name)
	}
	user := specs.User{}
	if spec.UID != nil {
		user = specs.User{UID: *spec.UID, GID: spec.GID, AdditionalGids: spec.Groups}
	}
	pcaps := &specs.LinuxCapabilities{Bounding: caps}
	if user.UID == 0 {
		pcaps.Effective, pcaps.Permitted = caps, caps
	}
	args := append([]string{spec.Path}, spec.Args[1:]...)
	return &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: "/"},
		Process: &specs.Process{
			Args: args, Env: spec.Env, Cwd: spec.Dir, User: user,
			Capabilities: pcaps,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: ociDir, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "nodev", "mode=755", "size=64k"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace},
				{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				// The init is the first process of its pid namespace,
				// and in the sandbox's network namespace.
				{Type: specs.NetworkNamespace, Path: "/proc/1/ns/net"},
			},
		},
	}, nil
}

// ociCommand writes the bundle of ociSpec(spec) under ociDir and returns
// the runtime's command that runs it in the foreground: its exit status
// is the container's, and it passes the signals it gets on to it.
func ociCommand(spec initSpec) (*exec.Cmd, error) {
	s, err := ociSpec(spec)
	if err != nil {
		return nil, err
	}
	bundle, state := filepath.Join(ociDir, "bundle"), filepath.Join(ociDir, "state")
	for _, d := range []string{bundle, state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("the runtime's directory: %w", err)
		}
	}
	data, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		return nil, fmt.Errorf("the runtime's bundle: %w", err)
	}
	rt := spec.Runtime
	args := append(append([]string{rt[0]}, rt[1:]...), "--root", state, "run", "--bundle", bundle, ociContainerID)
	path, err := exec.LookPath(rt[0])
	if err != nil {
		return nil, fmt.Errorf("the runtime %s: %w", rt[0], err)
	}
	return &exec.Cmd{
		Path: path, Args: args, Env: os.Environ(), Dir: "/",
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	}, nil
}
