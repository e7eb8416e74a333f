package hook

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// reportToRuntime makes a refusal visible where the runtime throws its
// hooks' output away. crun (Podman's runtime, and CRI-O's by default) runs
// hooks with stdout and stderr on /dev/null and then reports only "error
// executing hook `…` (exit code: 1)". So when this process's stderr is
// /dev/null, err also goes to the runtime, this process's parent:
//
//   - to its stderr, which conmon hands to Podman as the reason the
//     container was not created;
//   - to the log its --log flag names, in its --log-format (see
//     logRuntimeError), where the runtime's own error line follows. Podman
//     reports the runtime's log only when the whole file is one JSON
//     object, which it no longer is; it then reports conmon's message, the
//     stderr above.
//
// runc keeps a hook's stderr and puts it into its own error: there (stderr
// not /dev/null) nothing more is written.
func reportToRuntime(err error) {
	ppid := os.Getppid()
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ppid))
	reportVia(err, os.Stderr, fmt.Sprintf("/proc/%d/fd/2", ppid), runtimeArgs(cmdline))
}

// reportVia writes err to the file at runtimeStderr, and to the log that
// the runtime arguments args name, when own is /dev/null.
func reportVia(err error, own *os.File, runtimeStderr string, args []string) {
	if !isDevNull(own) {
		return
	}
	logRuntimeError(args, err)
	// Append: where the runtime's stderr is a regular file, a plain open
	// would write over its start.
	f, ferr := os.OpenFile(runtimeStderr, os.O_WRONLY|os.O_APPEND, 0)
	if ferr != nil {
		return
	}
	defer f.Close()
	if !isDevNull(f) {
		fmt.Fprintln(f, err)
	}
}

// runtimeArgs returns the arguments (without the program name) of a
// /proc/<pid>/cmdline.
func runtimeArgs(cmdline []byte) []string {
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	if len(args) < 2 {
		return nil
	}
	return args[1:]
}

// isDevNull reports whether f is the null device.
func isDevNull(f *os.File) bool {
	var st unix.Stat_t
	if f == nil || unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(1, 3)
}
