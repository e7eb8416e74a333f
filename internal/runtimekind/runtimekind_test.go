package runtimekind

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOfProcess(t *testing.T) {
	for _, c := range []struct {
		exe, argv0 string
		want       Kind
	}{
		{"/usr/local/bin/runsc", "runsc-sandbox", Runsc},
		{"/opt/x/bin/runsc (deleted)", "", Runsc},
		{"/proc/self/exe", "runsc-gofer", Runsc},
		{"/usr/bin/qemu-system-x86_64", "/usr/bin/qemu-system-x86_64", MicroVM},
		{"/usr/bin/firecracker", "firecracker", MicroVM},
		{"/usr/bin/cloud-hypervisor", "", MicroVM},
		{"/pause", "/pause", Runc},
		{"/bin/busybox", "sleep", Runc},
		{"/usr/bin/runscape", "runscape", Runc},
	} {
		if got := OfProcess(c.exe, c.argv0); got != c.want {
			t.Errorf("OfProcess(%q, %q) = %s, want %s", c.exe, c.argv0, got, c.want)
		}
	}
}

// Detect goes by the processes in the namespace: a fake /proc whose
// entries all name one namespace file.
func TestDetect(t *testing.T) {
	ns := filepath.Join(t.TempDir(), "ns")
	if err := os.WriteFile(ns, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(ns)
	dev, ino := statIDs(t, fi)
	proc := t.TempDir()
	add := func(pid, exe, argv0 string) {
		d := filepath.Join(proc, pid)
		os.MkdirAll(filepath.Join(d, "ns"), 0o755)
		os.Symlink(ns, filepath.Join(d, "ns", "net"))
		os.Symlink(exe, filepath.Join(d, "exe"))
		os.WriteFile(filepath.Join(d, "cmdline"), []byte(argv0+"\x00--flag\x00"), 0o644)
	}
	if k := Detect(proc, dev, ino, nil); k != Unknown {
		t.Errorf("no process: %s, want unknown", k)
	}
	if k := Detect(proc, dev, ino, func() bool { return true }); k != MicroVM {
		t.Errorf("no process, redirected: %s, want microvm", k)
	}
	add("10", "/pause", "/pause")
	if k := Detect(proc, dev, ino, func() bool { return false }); k != Runc {
		t.Errorf("a pause process: %s, want runc", k)
	}
	add("11", "/usr/local/bin/runsc", "runsc-sandbox")
	if k := Detect(proc, dev, ino, nil); k != Runsc {
		t.Errorf("a runsc sandbox: %s, want runsc", k)
	}
	if k := Detect(proc, dev, ino+1, nil); k != Unknown {
		t.Errorf("another namespace: %s, want unknown", k)
	}
}
