package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// capNames are the capabilities' names, indexed by number (see
// capabilities(7)).
var capNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// dockerDefaultCaps is the set Docker (and containerd, Podman) give a
// container unless told otherwise.
var dockerDefaultCaps = []string{
	"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
}

// capsAppliedEnv marks the re-executed probe, so that it does not loop.
const capsAppliedEnv = "DOORMAN_ESCAPE_CAPS_APPLIED"

func capNumber(name string) (int, bool) {
	name = strings.TrimPrefix(strings.ToUpper(name), "CAP_")
	for i, n := range capNames {
		if n == name {
			return i, true
		}
	}
	return 0, false
}

// restrictCaps reduces the process's capabilities to spec ("docker", then
// optional extra names: "docker,NET_ADMIN") and re-executes the probe, so
// that the new program starts with exactly those: it drops the rest from
// the bounding set (which caps what root gets at execve), from the
// permitted and effective sets, and clears the inheritable and ambient
// sets. It returns only on error.
func restrictCaps(spec string) error {
	if os.Getenv(capsAppliedEnv) == "1" {
		return nil
	}
	parts := splitList(spec)
	if len(parts) == 0 || parts[0] != "docker" {
		return fmt.Errorf("%q: want docker[,CAP...]", spec)
	}
	keep := map[int]bool{}
	for _, name := range append(dockerDefaultCaps, parts[1:]...) {
		n, ok := capNumber(name)
		if !ok {
			return fmt.Errorf("%q: unknown capability %q", spec, name)
		}
		keep[n] = true
	}
	last := len(capNames) - 1
	if data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			last = v
		}
	}
	// Capabilities are per thread: change and execve on this one.
	runtime.LockOSThread()
	for c := 0; c <= last; c++ {
		if !keep[c] {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	var mask [2]uint32
	for c := range keep {
		mask[c/32] |= 1 << (c % 32)
	}
	for i := range data {
		data[i].Effective &= mask[i]
		data[i].Permitted &= mask[i]
		data[i].Inheritable = 0
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if err := os.Setenv(capsAppliedEnv, "1"); err != nil {
		return err
	}
	return syscall.Exec("/proc/self/exe", os.Args, os.Environ())
}

// effectiveCaps names the capabilities in the process's effective set.
func effectiveCaps() ([]string, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		hexset, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		set, err := strconv.ParseUint(strings.TrimSpace(hexset), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("CapEff %q: %w", hexset, err)
		}
		var names []string
		for c := range 64 {
			if set&(1<<c) == 0 {
				continue
			}
			if c < len(capNames) {
				names = append(names, "CAP_"+capNames[c])
			} else {
				names = append(names, fmt.Sprintf("CAP_%d", c))
			}
		}
		return names, nil
	}
	return nil, fmt.Errorf("no CapEff line in /proc/self/status")
}

// capsRow reports the effective capabilities in Detail, comma-separated.
func capsRow() row {
	names, err := effectiveCaps()
	if err != nil {
		return row{Attempt: "caps", Error: err.Error()}
	}
	return row{Attempt: "caps", Detail: strings.Join(names, ",")}
}
