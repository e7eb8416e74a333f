// Package phasetrace records when a doorman process reaches each phase of
// a sandbox's start, so that the time of a CNI ADD can be split into its
// parts across the three processes it spans (the plugin, the supervisor
// it starts, and the supervisor's first worker).
//
// Why a file of timestamps and not a profile: an ADD is a few
// milliseconds spread over processes that start and exit, and most of it
// is waiting (process starts, the kernel's cgroup and nftables work), which
// a CPU profile does not show. Each process appends one line per phase
// to the file that the environment variable DOORMAN_TRACE names:
//
//	<unix time in ns> <pid> <phase>
//
// Lines are short appends to a file opened with O_APPEND, so the
// processes' lines never mix. The supervisor passes the variable on to
// its workers. Without the variable Mark does nothing but read a string
// once: tracing is for measurements, never on in production.
package phasetrace

import (
	"os"
	"strconv"
	"sync"
	"time"
)

// EnvVar names the environment variable that turns tracing on: the path
// of the file lines are appended to.
const EnvVar = "DOORMAN_TRACE"

// path is the trace file, read from the environment once.
var path = sync.OnceValue(func() string { return os.Getenv(EnvVar) })

// On reports whether this process traces (DOORMAN_TRACE is set).
func On() bool { return path() != "" }

// Env is the environment entry that passes tracing on to a child, or ""
// if this process does not trace.
func Env() string {
	if p := path(); p != "" {
		return EnvVar + "=" + p
	}
	return ""
}

// Mark records that this process has reached phase now. Errors are
// ignored: a trace that cannot be written costs only the trace.
func Mark(phase string) {
	p := path()
	if p == "" {
		return
	}
	line := strconv.AppendInt(nil, time.Now().UnixNano(), 10)
	line = append(line, ' ')
	line = strconv.AppendInt(line, int64(os.Getpid()), 10)
	line = append(line, ' ')
	line = append(line, phase...)
	line = append(line, '\n')
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	f.Write(line)
	f.Close()
}
