package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/proxy/launch"
)

// Main is `doorman supervise`, as launch.Start starts it (args without
// the verb): it takes what it was handed (launch.Supervise) and runs its
// workers until SIGTERM. It returns the exit status: 2 for a command line
// that does not parse, 1 for anything else that stops it.
func Main(args []string, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "doorman supervise: %v\n", err)
		return 1
	}
	sup, err := launch.Supervise(args, stderr)
	if errors.Is(err, launch.ErrUsage) {
		return 2
	}
	if err != nil {
		return fail(err)
	}
	phasetrace.Mark("sup.config")
	cfg := sup.Config
	sc := Config{
		Sandbox: cfg.Sandbox,
		// The running binary, even once an upgrade has replaced the file
		// it was started from: a worker of another release might not
		// read this release's config file.
		Worker: launch.Worker{Path: "/proc/self/exe", Sandbox: cfg.Sandbox, ConfigFile: sup.ConfigFile,
			Env: os.Environ(), Listeners: sup.Listeners, Stderr: os.Stderr},
		Stderr:      os.Stderr,
		StatusFile:  sup.StatusFile,
		Cgroup:      sup.Cgroup,
		StopTimeout: cfg.DrainTimeout.Or(launch.DefaultDrainTimeout) + DefaultStopTimeout/2,
		// A worker that answers no heartbeat this long is replaced.
		HeartbeatTimeout: cfg.Limits.Effective(0).HeartbeatTimeout,
		Ready:            sup.Ready,
		// A worker that runs is one the sandbox's ruleset already
		// sends connections to: they wait in the backlog until it
		// serves (see package supervise).
		ReadyOnStart: sup.ReadyOnStart,
	}
	if err := Run(context.Background(), sc); err != nil {
		return fail(err)
	}
	return 0
}
