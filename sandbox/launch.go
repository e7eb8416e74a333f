package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/doorman-net/doorman/proxy/resolver"
)

// launchFile, in a sandbox's state directory, records how its proxy was
// started while the sandbox sits in mode none without one, so that leaving
// mode none starts the same binary with the same upstream resolvers. Only
// states recorded before State said so themselves need it.
const launchFile = "proxy.json"

// launch is how a proxy was started: what State does not record.
type launch struct {
	Binary    string           `json:"binary"`
	Resolvers []netip.AddrPort `json:"resolvers,omitempty"`
	// LegacyResolver is the one resolver of records written before
	// Resolvers was; loadLaunch moves it there.
	LegacyResolver string `json:"resolver,omitempty"`
}

// launchOf reads how the running proxy pid was started, from /proc: its
// binary and its --resolver flags (a proxy of an older doorman has at most
// one).
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
	for _, v := range flagValues(strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00"), "resolver") {
		if ap, err := resolver.ParseServer(v); err == nil {
			l.Resolvers = append(l.Resolvers, ap)
		}
	}
	return l, nil
}

// flagValues returns the values of every --name (or -name) in args, as the
// flag package reads them: "--name v" or "--name=v".
func flagValues(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			continue
		}
		a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
		if a == name && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		} else if v, ok := strings.CutPrefix(a, name+"="); ok {
			out = append(out, v)
		}
	}
	return out
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
	l.Resolvers = withLegacyResolver(l.Resolvers, l.LegacyResolver)
	l.LegacyResolver = ""
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
