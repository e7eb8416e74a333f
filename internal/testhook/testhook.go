// Package testhook names the environment variables with which doorman's
// end-to-end tests make a running proxy fail in a way no workload can
// make it fail, so that what must notice the failure can be shown to:
// DOORMAN_TEST_WEDGE_LOOP makes a worker wedge its relay loop on SIGUSR2
// (the supervisor's liveness check must replace it). Nothing sets them
// in production; a process that does not see one does nothing
// differently. The supervisor passes its environment on to its workers,
// and the sandbox package passes these variables on to the supervisor
// (Env), as it does DOORMAN_TRACE.
package testhook

import "os"

// WedgeLoopEnv names the variable that, set to anything, makes a proxy
// worker block its relay loop's goroutine for good when it gets SIGUSR2.
const WedgeLoopEnv = "DOORMAN_TEST_WEDGE_LOOP"

// WedgeLoop reports whether this process is to wedge its relay loop on
// SIGUSR2.
func WedgeLoop() bool { return os.Getenv(WedgeLoopEnv) != "" }

// Env is the environment entries of the hooks this process has, to pass
// on to a child.
func Env() []string {
	if v, ok := os.LookupEnv(WedgeLoopEnv); ok {
		return []string{WedgeLoopEnv + "=" + v}
	}
	return nil
}
