package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/proxy/resolver"
)

// What earlier releases recorded and this one reads, only here: Load
// migrates a state file of any of them into a State, and nothing else in
// this package knows their formats. A state is saved in the current
// format the next time anything changes it.
//
//   - "proxyResolver": the one resolver ("addr:port"; "" the host's
//     resolv.conf) of states recorded before "proxyResolvers".
//   - "otlpConfig": the path of the OTLP settings file (otlp.json in the
//     sandbox's directory) of states recorded before "otlp".
//   - No "proxyBinary": states recorded before a state said how its proxy
//     was started. A launch record (launchFile) in the sandbox's
//     directory, which those releases wrote on entering mode none, says
//     it; else the proxy, if it still runs, says it on its command line,
//     where those releases gave it its resolvers as --resolver flags.
//
// Proxies those releases started took their settings as flags, and keep
// running as they are: a proxy is only ever started anew with a config
// file (see spawnProxy), by a binary of this release. The binary such a
// state records is one that takes flags, so the next proxy of its sandbox
// is started from this executable instead.
type legacyFields struct {
	ProxyResolver string `json:"proxyResolver"`
	OTLPConfig    string `json:"otlpConfig"`
}

// stateVersion is the format of the state files this release writes: the
// first whose proxies take a config file.
const stateVersion = 1

// launchFile is the launch record of states recorded before proxyBinary.
const launchFile = "proxy.json"

// launchRecord is how a proxy was started. Its binary is not needed: it
// took flags, and the next proxy is this release's.
type launchRecord struct {
	Resolvers []netip.AddrPort `json:"resolvers,omitempty"`
	// Resolver is the one resolver of records written before Resolvers
	// was.
	Resolver string `json:"resolver,omitempty"`
}

// migrate fills in s what the state file data of an earlier release said
// in its own way. What cannot be read is remembered in s.legacyErr, for
// the next proxy start, rather than failing Load: such a sandbox must
// still be listed, checked and torn down.
func (s *State) migrate(data []byte) {
	if s.Version >= stateVersion {
		return
	}
	var old legacyFields
	if json.Unmarshal(data, &old) != nil {
		return
	}
	if len(s.ProxyResolvers) == 0 {
		s.ProxyResolvers = legacyResolver(old.ProxyResolver)
	}
	if s.OTLP.Endpoint == "" && old.OTLPConfig != "" {
		o, err := hostconf.LoadOTLP(old.OTLPConfig)
		if err != nil {
			s.legacyErr = fmt.Errorf("the OTLP settings an earlier doorman recorded: %w", err)
		}
		s.OTLP = o
	}
	if s.ProxyBinary != "" || s.migrateLaunch() {
		// The recorded binary takes flags; this one, the config file.
		exe, err := os.Executable()
		if err != nil {
			s.legacyErr = fmt.Errorf("find the doorman binary: %w", err)
		}
		s.ProxyBinary = exe
	}
}

// migrateLaunch reports whether it knows how the proxy of a state recorded
// before proxyBinary was started, from its launch record, else from the
// running proxy's command line, and takes its resolvers from there. Without
// either, leaving mode none says what the new proxy resolves with (see
// leaveNone).
func (s *State) migrateLaunch() bool {
	l, ok := loadLaunch(s.Dir)
	if !ok && s.PID > 0 && s.ProxyAlive() {
		l, ok = launchOf(s.PID)
	}
	if ok {
		s.ProxyResolvers = l.Resolvers
	}
	return ok
}

// legacyResolver is the one resolver an older doorman recorded (as its
// proxy's --resolver, always "addr:port"; "" for the host's resolv.conf).
func legacyResolver(raw string) []netip.AddrPort {
	if raw == "" {
		return nil
	}
	if ap, err := resolver.ParseServer(raw); err == nil {
		return []netip.AddrPort{ap}
	}
	return nil
}

// loadLaunch reads the launch record in dir; ok is false if there is none.
func loadLaunch(dir string) (l launchRecord, ok bool) {
	data, err := os.ReadFile(filepath.Join(dir, launchFile))
	if err != nil || json.Unmarshal(data, &l) != nil {
		return launchRecord{}, false
	}
	if len(l.Resolvers) == 0 {
		l.Resolvers = legacyResolver(l.Resolver)
	}
	l.Resolver = ""
	return l, true
}

// launchOf reads how the running proxy pid was started, from its command
// line in /proc: its --resolver flags.
func launchOf(pid int) (launchRecord, bool) {
	var l launchRecord
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return l, false
	}
	for _, v := range flagValues(strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00"), "resolver") {
		if ap, err := resolver.ParseServer(v); err == nil {
			l.Resolvers = append(l.Resolvers, ap)
		}
	}
	return l, true
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
