package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/doorman-net/doorman/internal/atomicfile"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce/hostlayer"
	"github.com/doorman-net/doorman/internal/runtimekind"
	"github.com/doorman-net/doorman/proxy/supervise"
	"github.com/doorman-net/doorman/spec"
)

// Files inside one sandbox's state directory.
const (
	stateFile  = "state.json"
	PolicyFile = "policy" // the policy in the plain allowlist form; the proxy watches it
)

// State is what doorman records about one enforced sandbox. It is written
// as state.json in the sandbox's directory under the state dir.
type State struct {
	// Version is the format of the state file: stateVersion for those
	// this release writes, 0 for those of earlier releases (see migrate).
	Version   int       `json:"version,omitempty"`
	Key       string    `json:"key"`                // directory name: unique per attachment
	ID        string    `json:"id"`                 // container id
	Name      string    `json:"name,omitempty"`     // container name, where known
	PodUID    string    `json:"podUID,omitempty"`   // Kubernetes pod uid, where known
	Runtime   string    `json:"runtime"`            // "cni" or "hook"
	Network   string    `json:"network,omitempty"`  // CNI network name
	IfName    string    `json:"ifName,omitempty"`   // CNI interface name
	NetNS     string    `json:"netns"`              // path of the sandbox's network namespace
	Mode      conf.Mode `json:"mode"`               // policy mode when enforced: what the ruleset is for
	Port4     uint16    `json:"port4"`              // proxy listener ports inside the sandbox
	Port6     uint16    `json:"port6"`              //
	Label     string    `json:"label"`              // what the enforcement covers: full, partial (...) (see ComposeLabel)
	BaseLabel string    `json:"baseLabel"`          // what the in-namespace rules cover, given the workload's capabilities
	DNSPort4  uint16    `json:"dnsPort4,omitempty"` // DNS filter ports inside the sandbox (UDP and TCP)
	DNSPort6  uint16    `json:"dnsPort6,omitempty"` //
	// HostPort4 and HostPort6 are the proxy's TCP listeners in the
	// runtime's namespace, and HostDNSPort4 and HostDNSPort6 its DNS
	// filter's sockets there (UDP and TCP): where the host-side layer
	// redirects what the sandbox sends through its host interface
	// without passing its own ruleset (a runtime with a network stack of
	// its own: gVisor, a microVM). Zero where there is none.
	HostPort4    uint16 `json:"hostPort4,omitempty"`
	HostPort6    uint16 `json:"hostPort6,omitempty"`
	HostDNSPort4 uint16 `json:"hostDNSPort4,omitempty"`
	HostDNSPort6 uint16 `json:"hostDNSPort6,omitempty"`
	// RuntimeKind is the kind of runtime the sandbox's workload runs
	// on, as doorman detected it (see package runtimekind): runc (the
	// host kernel's network stack), runsc (gVisor's), microvm (a guest
	// kernel's, behind a tap), or unknown. "" in states of earlier
	// releases.
	RuntimeKind string `json:"runtimeKind,omitempty"`
	// Spec is what the sandbox enforces, as its front door described it
	// (its Policy aside: the policy file holds the live one), with
	// ProxyLimits' defaults filled in. Resolvers are its rules' from a
	// later enforcement when the DNS filter is off (see reenforce).
	spec.Spec
	// ProxyBinary and ProxyResolvers say how the proxy is started, so
	// that leaving mode none starts the same one: the DNS servers it
	// resolves allowed names with, in order (none: the host's
	// /etc/resolv.conf).
	ProxyBinary    string           `json:"proxyBinary,omitempty"`
	ProxyResolvers []netip.AddrPort `json:"proxyResolvers,omitempty"`
	// HostLayer says the host-side layer holds HostIfaces for this
	// sandbox. When it is false while the spec's HostLayer asks for it,
	// the sandbox had no host-side interface yet (see CompleteHostLayer).
	HostLayer  bool     `json:"hostLayer,omitempty"`
	HostIfaces []string `json:"hostIfaces,omitempty"`
	// Pins are the identities the host-side layer pins on HostIfaces, as
	// the first Apply on each interface found them; every later Apply
	// and Check passes them back, so that a MAC or address the workload
	// took since is never pinned. States recorded before pins were have
	// none: the next Apply reads them from the sandbox's interfaces.
	Pins []Pin `json:"pins,omitempty"`
	// NetNSDev and NetNSIno identify the namespace NetNS named when the
	// sandbox was enforced: its nsfs device and inode. A path such as
	// /proc/PID/ns/net names another process's namespace once PID has
	// exited and been reused, so doorman changes the rules at NetNS only
	// while it still names this one (see NetNSCurrent). Zero in states
	// recorded before these fields were.
	NetNSDev uint64 `json:"netnsDev,omitempty"`
	NetNSIno uint64 `json:"netnsIno,omitempty"`
	// PID and PIDStart are the proxy process (the worker serving, for a
	// supervised proxy, when the state was saved; Load takes the one the
	// supervisor's status names) and its start time (clock ticks since
	// boot), to never signal a reused pid.
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pidStart"`
	// Supervisor is the proxy's parent (`doorman supervise`), which holds
	// its listeners and replaces it when it dies. Proxies of earlier
	// releases have none.
	Supervisor *Proc `json:"supervisor,omitempty"`
	// Stopped says an operator stopped the proxy (Stop): nothing
	// restarts it until Start.
	Stopped bool `json:"stopped,omitempty"`
	// CgroupParent is the cgroup the runtime named for the proxy
	// (Attachment.CgroupParent), kept with the spec's ProxyLimits for the
	// proxies a mode change or Start starts later.
	CgroupParent string `json:"cgroupParent,omitempty"`
	// Cgroup is the cgroup the proxy runs in, if it has one; CgroupError
	// says why it has none.
	Cgroup      *ProxyCgroup `json:"cgroup,omitempty"`
	CgroupError string       `json:"cgroupError,omitempty"`
	// LeftoverCgroups are cgroups of earlier proxies that could not be
	// removed from where they were stopped (see removeCgroup).
	LeftoverCgroups []cgroup.Group `json:"leftoverCgroups,omitempty"`
	LogFile         string         `json:"logFile"` // decision log
	Created         time.Time      `json:"created"` //
	Dir             string         `json:"-"`       // the sandbox's state directory

	// supervision is what the supervisor's status file says (see
	// loadSupervision).
	supervision *supervise.Status

	// Unenforced, when set, says why doorman enforces nothing on this
	// attachment ("excluded namespace"): the record of a sandbox the
	// front door passed through on purpose, so that the CLI lists it,
	// with no policy file, proxy, ruleset or host-side layer (see
	// RecordUnenforced).
	Unenforced string `json:"unenforced,omitempty"`

	// legacyErr says why what an earlier release recorded could not be
	// read (see migrate); starting a proxy fails with it.
	legacyErr error

	// system is what the sandbox's rules, namespace and proxy are
	// changed through (nil: host, see sys).
	system *system
}

// Pin records a hostlayer.Pin: what the sandbox may call itself on one
// host-side interface.
type Pin struct {
	HostIface    string       `json:"hostIface"`
	HostIndex    int          `json:"hostIndex,omitempty"`
	SandboxIface string       `json:"sandboxIface,omitempty"`
	MAC          string       `json:"mac,omitempty"`
	Addrs        []netip.Addr `json:"addrs"`
}

// recordPins records the pins the host-side layer returned.
func recordPins(pins []hostlayer.Pin) []Pin {
	var out []Pin
	for _, p := range pins {
		r := Pin{HostIface: p.HostIface, HostIndex: p.HostIndex, SandboxIface: p.SandboxIface, Addrs: p.Addrs}
		if p.MAC != nil {
			r.MAC = p.MAC.String()
		}
		out = append(out, r)
	}
	return out
}

// layerPins are the recorded pins as the host-side layer takes them, or
// an error naming one that is not a pin.
func (s *State) layerPins() ([]hostlayer.Pin, error) {
	var out []hostlayer.Pin
	for _, r := range s.Pins {
		p := hostlayer.Pin{HostIface: r.HostIface, HostIndex: r.HostIndex, SandboxIface: r.SandboxIface, Addrs: r.Addrs}
		if r.MAC != "" {
			mac, err := net.ParseMAC(r.MAC)
			if err != nil {
				return nil, fmt.Errorf("recorded pin of %s: %w", r.HostIface, err)
			}
			p.MAC = mac
		}
		out = append(out, p)
	}
	return out, nil
}

// The gap named when the sandbox's DNS goes to its resolvers unfiltered.
const gapDNS = "DNS to the resolvers is not filtered"

// ComposeLabel says what a sandbox's enforcement covers: base is what its
// in-namespace rules cover given the workload's capabilities ("full" or
// "partial (<gap>)"); the host-side layer closes that gap; DNS that is not
// filtered is a gap of its own, except in mode none where no DNS leaves.
// It is ComposeLabelFor with the runtime's kind unknown.
func ComposeLabel(base string, hostLayer, dnsFilter bool, mode conf.Mode) string {
	return ComposeLabelFor(base, hostLayer, dnsFilter, mode, "")
}

// ComposeLabelFor is ComposeLabel for a workload on a runtime of kind
// (see package runtimekind). The host-side layer covers every kind: it
// sits on the sandbox's link, which every frame crosses, and redirects
// there the TCP and DNS that the in-namespace rules did not. Without it, a
// workload with a network stack of its own (gVisor, a microVM) sends past
// the in-namespace rules altogether: that is the one gap its label names.
func ComposeLabelFor(base string, hostLayer, dnsFilter bool, mode conf.Mode, kind runtimekind.Kind) string {
	if !hostLayer && kind.OwnStack() && base != "n/a" && !strings.HasPrefix(base, "n/a ") {
		return "partial (" + kind.Describe() + ", and no host-side layer holds its link: nothing it sends is enforced or logged)"
	}
	var gaps []string
	if inner, ok := strings.CutPrefix(base, "partial ("); ok && !hostLayer {
		gaps = append(gaps, strings.TrimSuffix(inner, ")"))
	}
	if !dnsFilter && mode != conf.ModeNone {
		gaps = append(gaps, gapDNS)
	}
	if len(gaps) == 0 {
		return "full"
	}
	return "partial (" + strings.Join(gaps, "; ") + ")"
}

// relabel recomputes Label from BaseLabel and the layers in place.
func (s *State) relabel() {
	s.Label = ComposeLabelFor(s.BaseLabel, s.HostLayer, s.DNSFilter, s.Mode, runtimekind.Kind(s.RuntimeKind))
}

// DetectRuntimeKind looks again at what runs in the sandbox's namespace
// (see runtimekind.Detect) where the kind recorded is not conclusive (none
// yet, unknown, or runc: a CNI ADD runs before anything does, and a pod's
// first process is its pause), and recomputes the label with it. It
// changes s in memory only: the CLI shows what it finds.
func (s *State) DetectRuntimeKind() {
	k := runtimekind.Kind(s.RuntimeKind)
	if s.Unenforced != "" || k.OwnStack() || !s.NetNSCurrent() {
		return
	}
	found := runtimekind.Detect("/proc", s.NetNSDev, s.NetNSIno, func() bool { return runtimekind.Redirected(s.NetNS) })
	if found == runtimekind.Unknown && k != "" {
		return
	}
	s.RuntimeKind = string(found)
	s.relabel()
}

// NetNSCurrent reports whether s.NetNS still names the network namespace
// the sandbox was enforced in. A state recorded without the namespace's
// identity is taken at its word.
func (s *State) NetNSCurrent() bool {
	if s.NetNSIno == 0 {
		return true
	}
	dev, ino, err := s.sys().netns.Identity(s.NetNS)
	return err == nil && dev == s.NetNSDev && ino == s.NetNSIno
}

// describe names the container and attachment of s, for messages.
func (s *State) describe() string {
	if s.Runtime == "cni" {
		return fmt.Sprintf("container %s, network %s, interface %s", s.ID, s.Network, s.IfName)
	}
	return fmt.Sprintf("container %s, OCI hook", s.ID)
}

// errNetNSGone is the error of a change that needs the sandbox's network
// namespace when its path names another one, or none.
func (s *State) errNetNSGone() error {
	return fmt.Errorf("%s no longer is the sandbox's network namespace (inode %d; its process has exited?)", s.NetNS, s.NetNSIno)
}

// netnsIdentity returns the device and inode of the namespace file at path
// on this host.
func netnsIdentity(path string) (dev, ino uint64, err error) {
	return host.netns.Identity(path)
}

// PolicyPath is the path of the sandbox's live policy file.
func (s *State) PolicyPath() string { return filepath.Join(s.Dir, PolicyFile) }

// ValidKey reports whether key can name a state directory: no path
// separators, no dot-dot, nothing a runtime could use to escape the state dir.
func ValidKey(key string) error {
	ok := len(key) > 0 && len(key) <= 201 && isAlnum(key[0])
	for i := 1; ok && i < len(key); i++ {
		c := key[i]
		ok = isAlnum(c) || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return fmt.Errorf("sandbox key %q: want letters, digits, '_', '.', '-' (at most 201), starting with a letter or digit", key)
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Load reads the state of sandbox key under stateDir. A sandbox that is not
// there yields an error matching os.ErrNotExist.
func Load(stateDir, key string) (*State, error) { return host.load(stateDir, key) }

// load is Load on sys: the state it returns changes the sandbox through
// sys.
func (sys *system) load(stateDir, key string) (*State, error) {
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	dir := filepath.Join(stateDir, key)
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", key, err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("sandbox %s: state file %s: %w", key, filepath.Join(dir, stateFile), err)
	}
	s.Dir, s.system = dir, sys
	s.migrate(data)
	s.loadSupervision()
	return &s, nil
}

// List returns every sandbox recorded under stateDir, oldest first.
// Directories without a readable state file are skipped.
func List(stateDir string) ([]*State, error) { return host.list(stateDir) }

// list is List on sys.
func (sys *system) list(stateDir string) ([]*State, error) {
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []*State
	for _, e := range ents {
		if !e.IsDir() || ValidKey(e.Name()) != nil {
			continue
		}
		if s, err := sys.load(stateDir, e.Name()); err == nil {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// save writes the state atomically.
func (s *State) save() error {
	s.Version = stateVersion
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.Dir, stateFile), data, 0o600)
}

// writePolicy writes the policy file of a sandbox that Enforce puts under
// p as conf.WriteFileAtomic does (mode 0644), but without its fsyncs (see
// writeAtomic) and without parsing the file back: p comes from a Spec, so
// from conf's parsers (and a file the proxy could not read would put it in
// deny-all, not open it).
func writePolicy(path string, p *conf.Policy) error {
	return writeAtomic(path, p.MarshalFile(), 0o644)
}

// writeAtomic replaces path with data through a temporary file and a
// rename, so that readers (the proxy watching its policy, the CLI) see the
// old file or the new one, never a part. It does not fsync: the state
// directory describes processes and namespaces that do not outlive a
// reboot (its default, /run, is a tmpfs), and a file that a crash left
// empty reads as unreadable state, which Enforce and Teardown replace.
// On a disk the fsyncs cost milliseconds on every ADD.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	if err := atomicfile.Write(path, bytes.NewReader(data), atomicfile.Options{Perm: perm, TempInfix: "."}); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
