// Package runtimekind tells which kind of runtime a sandbox's workload
// runs on, which decides where its packets can be seen:
//
//   - runc (and crun, youki, any runtime whose workload is an ordinary
//     process of the host): the host kernel's network stack, inside the
//     sandbox's network namespace, whose nftables hooks see every packet;
//   - runsc (gVisor): gVisor's own network stack, which writes Ethernet
//     frames to the sandbox's interface through a packet socket, past
//     every IP hook of the namespace;
//   - microvm (Kata Containers, Firecracker, Cloud Hypervisor): a guest
//     kernel, whose frames reach the sandbox's interface from the VM's tap
//     through a tc mirred redirect, past every IP hook of the namespace.
//
// Only the host side of the sandbox's link sees the frames of the last
// two (package hostlayer). Detect reads the namespace's processes (their
// executable and argv[0]) and, for a namespace whose VM monitor runs
// elsewhere, its interfaces' tc filters; it enters no namespace but to
// list those filters, and changes nothing.
package runtimekind

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is a kind of runtime.
type Kind string

// The kinds Detect tells apart.
const (
	// Runc is a workload on the host kernel's network stack.
	Runc Kind = "runc"
	// Runsc is a workload on gVisor's network stack.
	Runsc Kind = "runsc"
	// MicroVM is a workload on a guest kernel behind a tap.
	MicroVM Kind = "microvm"
	// Unknown is a namespace with no process and no redirect yet (a CNI
	// ADD runs before the runtime starts anything in it).
	Unknown Kind = "unknown"
)

// OwnStack reports whether k's workload has a network stack of its own,
// whose packets the namespace's IP hooks never see.
func (k Kind) OwnStack() bool { return k == Runsc || k == MicroVM }

// Describe says, for a label, why k's packets pass the sandbox's own
// ruleset by.
func (k Kind) Describe() string {
	switch k {
	case Runsc:
		return "the workload runs on gVisor's network stack (runsc), which sends past the in-namespace rules"
	case MicroVM:
		return "the workload runs in a microVM whose frames a tc redirect sends past the in-namespace rules"
	}
	return ""
}

// vmm are executables of VM monitors and of the runtimes that run them
// (by base name, a prefix where it ends in "*").
var vmm = []string{"qemu-system-*", "qemu-kvm", "firecracker", "jailer", "cloud-hypervisor", "containerd-shim-kata-v2", "kata-runtime", "dragonball", "virtiofsd"}

// OfProcess classifies one process by its executable's path and its
// argv[0]: Runsc, MicroVM, or Runc for any other.
func OfProcess(exe, argv0 string) Kind {
	names := []string{filepath.Base(exe), filepath.Base(argv0)}
	for _, n := range names {
		n = strings.TrimSuffix(n, " (deleted)")
		if n == "runsc" || strings.HasPrefix(n, "runsc-") {
			return Runsc
		}
		for _, v := range vmm {
			if p, ok := strings.CutSuffix(v, "*"); ok && strings.HasPrefix(n, p) || n == v {
				return MicroVM
			}
		}
	}
	return Runc
}

// OfPID classifies process pid of the proc filesystem at proc ("/proc").
func OfPID(proc string, pid int) Kind {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	exe, _ := os.Readlink(filepath.Join(dir, "exe"))
	var argv0 string
	if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		argv0, _, _ = strings.Cut(string(cmd), "\x00")
	}
	if exe == "" && argv0 == "" {
		return Unknown
	}
	return OfProcess(exe, argv0)
}

// Detect tells the kind of the network namespace with nsfs device dev and
// inode ino, from the processes under proc that are in it: Runsc or
// MicroVM if any of them is gVisor's or a VM monitor, else Runc if any
// is redirected (its interfaces redirect frames with tc mirred, as a VM's
// tap does, whose monitor may run elsewhere), else Runc if any process
// runs there, else Unknown.
func Detect(proc string, dev, ino uint64, redirected func() bool) Kind {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return Unknown
	}
	kind := Unknown
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join(proc, e.Name(), "ns", "net"), &st) != nil || st.Dev != dev || st.Ino != ino {
			continue
		}
		switch k := OfPID(proc, pid); k {
		case Runsc, MicroVM:
			return k
		case Runc:
			kind = Runc
		}
	}
	if redirected != nil && redirected() {
		return MicroVM
	}
	return kind
}
