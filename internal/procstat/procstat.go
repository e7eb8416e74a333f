// Package procstat reads what doorman needs of /proc/PID/stat: a
// process's state and its start time. A pid is reused once its process
// has exited; the pid with its start time is not, so doorman records both
// for the processes it must find again (a sandbox's proxy, a `doorman
// run`), and never signals or trusts a pid alone.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is what /proc/PID/stat says of one process.
type Stat struct {
	// State is the process's state letter: R, S, D, ..., Z for a zombie,
	// X for a dead one.
	State byte
	// Start is the process's start time (field 22), in clock ticks since
	// boot.
	Start uint64
}

// Exited reports whether the process has exited (a zombie or dead).
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// Read reads the stat of process pid.
func Read(pid int) (Stat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	st, err := parse(string(data))
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// parse reads the fields of one stat line. The command name (field 2) may
// hold spaces and parentheses: the fields after it start after the last
// ')'.
func parse(line string) (Stat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("malformed")
	}
	fields := strings.Fields(line[i+1:])
	if len(fields) < 20 || len(fields[0]) != 1 {
		return Stat{}, fmt.Errorf("malformed")
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("malformed start time: %w", err)
	}
	return Stat{State: fields[0][0], Start: start}, nil
}
