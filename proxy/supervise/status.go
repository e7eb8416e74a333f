package supervise

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/doorman-net/doorman/internal/atomicfile"
)

// States of a supervisor, as Status.State says them.
const (
	StateStarting = "starting" // a worker was started and does not serve yet
	StateServing  = "serving"  // a worker serves
	// StateUnresponsive: a worker runs but has answered no heartbeat
	// for two heartbeats or more (stopped, deadlocked, its relay loop
	// wedged); it is replaced at the heartbeat timeout.
	StateUnresponsive = "unresponsive"
	StateBackoff      = "backoff"  // no worker: the next starts at NextStart
	StateStopping     = "stopping" // SIGTERM: the worker is being stopped
)

// CrashLoopAfter is how many workers in a row must die soon after they
// started (within StableAfter) for the proxy to be crash looping.
const CrashLoopAfter = 3

// Status is what a supervisor records in its status file.
type Status struct {
	// Supervisor is the parent process.
	Supervisor Process `json:"supervisor"`
	// Worker is the worker running now (starting or serving), if any.
	Worker *Process `json:"worker,omitempty"`
	// State is one of the State* constants.
	State string `json:"state"`
	// Restarts counts the workers started after the first.
	Restarts int `json:"restarts"`
	// Failures counts the workers in a row that ended before serving
	// for StableAfter; a worker that does resets it to 0.
	Failures int `json:"failures"`
	// LastExit says how the last worker that ended ended.
	LastExit *Exit `json:"lastExit,omitempty"`
	// NextStart is when the next worker starts, in StateBackoff.
	NextStart *time.Time `json:"nextStart,omitempty"`
	// Unresponsive, in StateUnresponsive, is when the worker last
	// answered a heartbeat.
	Unresponsive *time.Time `json:"unresponsiveSince,omitempty"`
	// HeartbeatTimeout is how long a worker may go without answering a
	// heartbeat before it is replaced (absent from the status of a
	// supervisor of a release without heartbeats).
	HeartbeatTimeout Duration `json:"heartbeatTimeout,omitempty"`
	// Updated is when the supervisor wrote this.
	Updated time.Time `json:"updated"`
}

// CrashLooping reports whether the last CrashLoopAfter workers or more
// each died soon after they started.
func (s *Status) CrashLooping() bool { return s.Failures >= CrashLoopAfter }

// Process names one process: a pid and its start time (clock ticks since
// boot, /proc/PID/stat's field 22), which together are never reused.
type Process struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	// Started is when it started, by the supervisor's clock.
	Started time.Time `json:"started"`
}

// Exit is how a worker ended.
type Exit struct {
	Time time.Time `json:"time"`
	PID  int       `json:"pid"`
	// Reason says it in words: "killed by SIGKILL", "exited with status
	// 1", "killed by the OOM killer at the cgroup's memory limit", "did
	// not serve within 10s".
	Reason string `json:"reason"`
	// OOM says the kernel's OOM killer ended it (the cgroup's memory
	// limit was reached).
	OOM bool `json:"oom,omitempty"`
	// Ran is how long it ran.
	Ran Duration `json:"ran"`
}

// Duration is a time.Duration written as in Go ("1.5s").
type Duration time.Duration

// MarshalText renders d as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses text with time.ParseDuration.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	*d = Duration(v)
	return err
}

// ReadStatus reads a supervisor's status file.
func ReadStatus(path string) (*Status, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Status
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("supervisor status %s: %w", path, err)
	}
	return &s, nil
}

// write replaces the status file at path with s. Like the sandbox's
// state, it is not fsynced: it describes processes, which do not outlive
// a reboot.
func (s *Status) write(path string) error {
	s.Updated = time.Now().UTC()
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, bytes.NewReader(append(data, '\n')), atomicfile.Options{Perm: 0o600, TempInfix: "."})
}
