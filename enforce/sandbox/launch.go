package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// launchFile, in a sandbox's state directory, records how its proxy was
// started while the sandbox sits in mode none without one, so that leaving
// mode none starts the same binary with the same upstream resolver.
const launchFile = "proxy.json"

// launch is how a proxy was started: what State does not record.
type launch struct {
	Binary   string `json:"binary"`
	Resolver string `json:"resolver,omitempty"`
}

// launchOf reads how the running proxy pid was started, from /proc.
func launchOf(pid int) (launch, error) {
	var l launch
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return l, err
	}
	if !strings.HasSuffix(exe, " (deleted)") {
		l.Binary = exe
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return l, err
	}
	l.Resolver = flagValue(strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00"), "resolver")
	return l, nil
}

// flagValue returns the value of --name (or -name) in args, as the flag
// package reads it: "--name v" or "--name=v".
func flagValue(args []string, name string) string {
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func (l launch) save(dir string) error {
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, launchFile), data, 0o600)
}

// loadLaunch reads the record in dir; found is false if there is none.
func loadLaunch(dir string) (l launch, found bool) {
	data, err := os.ReadFile(filepath.Join(dir, launchFile))
	if err != nil || json.Unmarshal(data, &l) != nil {
		return launch{}, false
	}
	return l, true
}

// clockTicks is USER_HZ, the unit of process start times in /proc: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProxyStarted returns when the sandbox's proxy process started. It fails
// if the proxy is not running.
func (s *State) ProxyStarted() (time.Time, error) {
	if !s.ProxyAlive() {
		return time.Time{}, errors.New("proxy not running")
	}
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("/proc/stat btime: %w", err)
			}
			ticks := int64(s.PIDStart)
			return time.Unix(boot, 0).Add(time.Duration(ticks) * time.Second / clockTicks), nil
		}
	}
	return time.Time{}, errors.New("/proc/stat has no btime")
}
