package launch

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// readyLine is what a process writes to its readiness pipe once it is
// ready, before it closes it.
const readyLine = "ready\n"

// readySignal returns a function that writes readyLine to the inherited
// pipe fd and closes it; nil for no pipe (fd < 0).
func readySignal(fd int) func() {
	if fd < 0 {
		return nil
	}
	return func() {
		f := os.NewFile(uintptr(fd), "ready")
		f.WriteString(readyLine)
		f.Close()
	}
}

// AwaitReady reads the readiness line of the process that holds the other
// end of r, which it closes, and sends on the returned channel nil once the
// process said ready, or why it did not (it closed the pipe without a
// word, as it does when it exits).
func AwaitReady(r *os.File) <-chan error {
	ready := make(chan error, 1)
	go func() {
		defer r.Close()
		line, err := bufio.NewReader(r).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != strings.TrimSpace(readyLine) {
			ready <- fmt.Errorf("did not signal ready (%q, %v)", line, err)
			return
		}
		ready <- nil
	}()
	return ready
}
