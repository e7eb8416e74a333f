package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Exit statuses of a run itself, as env(1), timeout(1) and container
// engines use them; any other status Run returns is the command's.
const (
	ExitFailed      = 125 // the sandbox could not be set up
	ExitNotRunnable = 126 // the command was found but could not be started
	ExitNotFound    = 127 // the command was not found
)

// detachTimeout bounds the teardown after the command has ended.
const detachTimeout = 2 * time.Minute

// forwarded are the signals Run passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Run is `doorman run`: it attaches a sandbox with cfg, starts cmd in it,
// passes SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 on to it,
// and when cmd ends tears the sandbox down. It returns cmd's exit status
// (see ExitStatus), or one of the Exit statuses above; what went wrong is
// written to stderr. A teardown that fails is reported too, and the status
// stays the command's: the next run reaps what is left.
func Run(ctx context.Context, cfg Config, cmd *exec.Cmd, stderr io.Writer) int {
	// Signals are caught from the start: one that comes while the
	// sandbox is being made ends the run once it is made, torn down.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	sb, err := Attach(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return ExitFailed
	}
	detach := func(status int) int {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
		defer cancel()
		if err := sb.Detach(ctx); err != nil {
			fmt.Fprintln(stderr, err)
		}
		return status
	}
	if sig, ok := pendingTermination(sigs); ok {
		return detach(128 + int(sig))
	}
	if err := sb.Start(cmd); err != nil {
		fmt.Fprintf(stderr, "doorman run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return detach(ExitNotFound)
		}
		return detach(ExitNotRunnable)
	}
	for {
		select {
		case sig := <-sigs:
			forwardSignal(sig.(syscall.Signal), sb)
		case <-sb.Exited():
			return detach(ExitStatus(sb.Wait()))
		}
	}
}

// pendingTermination reports a terminating signal that came while the
// sandbox was being made.
func pendingTermination(sigs <-chan os.Signal) (syscall.Signal, bool) {
	for {
		select {
		case s := <-sigs:
			if sig := s.(syscall.Signal); sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2 {
				return sig, true
			}
		default:
			return 0, false
		}
	}
}

// forwardSignal passes sig on to the command. The command shares doorman's
// process group (its init drops what it gets other than from Signal), so when doorman is the foreground job of the terminal on
// stdin, a SIGINT, SIGQUIT or SIGHUP most likely came from that terminal,
// which has already sent it to the command too: those are not sent twice.
func forwardSignal(sig syscall.Signal, sb *Sandbox) {
	switch sig {
	case syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP:
		if foregroundOnTerminal() {
			return
		}
	}
	sb.Signal(sig)
}

// foregroundOnTerminal reports whether stdin is a terminal whose
// foreground process group is this process's.
func foregroundOnTerminal() bool {
	pgrp, err := unix.IoctlGetInt(int(os.Stdin.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
