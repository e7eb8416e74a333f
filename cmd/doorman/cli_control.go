package main

import (
	"fmt"
	"io"

	"github.com/doorman-net/doorman/sandbox"
)

func runStop(args []string, stdout, stderr io.Writer) int {
	c := newCLI("stop", "SANDBOX", `
Stops a sandbox's proxy, and keeps it stopped: its supervisor (which
would otherwise replace a proxy that dies), the proxy and its cgroup go.
The sandbox stays enforced and closed: its TCP connections are refused and
its DNS filter does not answer (its allowDirect destinations stay
reachable; doorman mode SANDBOX none cuts those too). ls and show say
"stopped", and CNI CHECK fails, until doorman start SANDBOX, a mode change,
or the runtime enforcing the sandbox again.

`+sandboxArg, stdout, stderr)
	return c.control(args, sandbox.Stop, func(ch *sandbox.ProxyChange) string {
		if !ch.Changed {
			return "proxy already stopped"
		}
		return "proxy stopped: the sandbox's TCP is refused until doorman start"
	})
}

func runStart(args []string, stdout, stderr io.Writer) int {
	c := newCLI("start", "SANDBOX", `
Starts a sandbox's proxy under a supervisor: after doorman stop, after
every process of it died, or in place of a proxy that runs without one (its
supervisor was killed, or an earlier release started it). The new proxy
serves new listeners first, then one ruleset change redirects the sandbox
to them, then the old proxy stops: no connection goes unenforced, and on
failure nothing changes. A proxy that runs under its supervisor is left as
it is.

`+sandboxArg, stdout, stderr)
	return c.control(args, sandbox.Start, func(ch *sandbox.ProxyChange) string {
		switch {
		case !ch.Changed:
			return fmt.Sprintf("proxy already running under its supervisor (pid %d)", ch.State.Supervisor.PID)
		case ch.Replaced:
			return fmt.Sprintf("proxy replaced: pid %d, under supervisor %d", ch.State.PID, ch.State.Supervisor.PID)
		}
		return fmt.Sprintf("proxy started: pid %d, under supervisor %d", ch.State.PID, ch.State.Supervisor.PID)
	})
}

// control runs stop or start (do) on the one sandbox args name and
// reports what it did.
func (c *cli) control(args []string, do func(stateDir, key string) (*sandbox.ProxyChange, error), say func(*sandbox.ProxyChange) string) int {
	pos, code, ok := c.parse(args, 1, 1)
	if !ok {
		return code
	}
	s, code := c.find(pos[0])
	if s == nil {
		return code
	}
	ch, err := do(c.stateDir, s.Key)
	if ch != nil && ch.Changed {
		fmt.Fprintf(c.stdout, "sandbox %s: %s\n", s.Key, say(ch))
	}
	if err != nil {
		return c.fail(err)
	}
	if !ch.Changed {
		fmt.Fprintf(c.stdout, "sandbox %s: %s\n", s.Key, say(ch))
	}
	return exitOK
}
