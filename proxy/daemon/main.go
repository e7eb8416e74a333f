package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/proxy/launch"
)

// Main is `doorman proxy` (args without the verb): the worker a
// supervisor starts, or a proxy run by hand, on its config file alone
// (see launch.InheritWorker); it serves until SIGTERM. It returns the exit
// status: 2 for a command line that does not parse, 1 for anything else
// that stops it.
func Main(args []string, stderr io.Writer) int {
	w, err := launch.InheritWorker(args, stderr)
	if errors.Is(err, launch.ErrUsage) {
		return 2
	}
	if err == nil {
		phasetrace.Mark("worker.config")
		err = Run(context.Background(), w.Config, w.ConfigFile, stderr, func() {
			phasetrace.Mark("worker.serving")
			if w.Ready != nil {
				w.Ready()
			}
		}, w.Heartbeat)
	}
	if err != nil {
		fmt.Fprintf(stderr, "doorman proxy: %v\n", err)
		return 1
	}
	return 0
}
