package hook

import "syscall"

// execve is syscall.Exec, kept apart so the wrapper's one irreversible step
// is easy to find.
func execve(path string, argv, env []string) error {
	return syscall.Exec(path, argv, env)
}
