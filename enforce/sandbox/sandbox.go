package sandbox

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
)

// Request says what to enforce on one sandbox.
type Request struct {
	Key       string       // unique per attachment; names the state directory (see ValidKey)
	ID        string       // container id
	Name      string       // container name, if known
	Runtime   string       // "cni" or "hook"
	Network   string       // CNI network name, if any
	IfName    string       // CNI interface name, if any
	NetNS     string       // path of the sandbox's network namespace
	Policy    *conf.Policy // the policy to enforce (required)
	Resolvers []netip.Addr // DNS servers the sandbox may query
	AllowICMP bool
	Label     string // what the enforcement covers (see DESIGN.md "Honest labels")

	StateDir string // default DefaultStateDir
	LogDir   string // default DefaultLogDir
	// ProxyBinary is the doorman binary to run as `doorman proxy`
	// (default: this executable).
	ProxyBinary string
	// ProxyResolver is the DNS server ("addr:port") the proxy uses to
	// resolve allowed names; "" means the host's /etc/resolv.conf.
	ProxyResolver string
}

func (r *Request) defaults() error {
	if r.StateDir == "" {
		r.StateDir = DefaultStateDir
	}
	if r.LogDir == "" {
		r.LogDir = DefaultLogDir
	}
	if r.ProxyBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the doorman binary: %w", err)
		}
		r.ProxyBinary = exe
	}
	if r.Policy == nil {
		return errors.New("no policy")
	}
	if r.NetNS == "" {
		return errors.New("no network namespace")
	}
	if r.ID == "" {
		r.ID = r.Key
	}
	return ValidKey(r.Key)
}

// Enforce puts sandbox r under its policy: listeners in its netns, a proxy
// serving them, the ruleset, and the state record. Enforcing a sandbox that
// is already enforced with a live proxy updates its policy and re-applies
// the ruleset (idempotent). On any error nothing is left behind.
func Enforce(r Request) (*State, error) {
	if err := r.defaults(); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	if err := checkNetNS(r.NetNS); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	if old, err := Load(r.StateDir, r.Key); err == nil && old.NetNS == r.NetNS && proxyAlive(old.PID, old.PIDStart) {
		return reenforce(old, r)
	} else if err == nil {
		// Stale state (proxy dead, or another netns): start afresh.
		if err := Teardown(r.StateDir, r.Key); err != nil {
			return nil, err
		}
	}
	s, err := enforceNew(r)
	if err != nil {
		return nil, fmt.Errorf("enforce sandbox %s in %s: %w", r.Key, r.NetNS, err)
	}
	return s, nil
}

func enforceNew(r Request) (_ *State, err error) {
	dir := filepath.Join(r.StateDir, r.Key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.LogDir, 0o750); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("log dir: %w", err)
	}
	s := &State{
		Key: r.Key, ID: r.ID, Name: r.Name, Runtime: r.Runtime, Network: r.Network, IfName: r.IfName,
		NetNS: r.NetNS, Mode: string(r.Policy.Mode), Resolvers: r.Resolvers, AllowICMP: r.AllowICMP,
		Label: r.Label, LogFile: filepath.Join(r.LogDir, r.Key+".log"), Created: time.Now().UTC(), Dir: dir,
	}
	// Undo everything on failure, in reverse order.
	defer func() {
		if err != nil {
			stopProxy(s.PID, s.PIDStart, time.Second)
			enforce.Remove(r.NetNS)
			os.RemoveAll(dir)
		}
	}()
	if err := conf.WriteFileAtomic(s.PolicyPath(), r.Policy); err != nil {
		return nil, err
	}
	spec := enforce.Spec{Resolvers: r.Resolvers, AllowICMP: r.AllowICMP, DenyAll: r.Policy.Mode == conf.ModeNone}
	if !spec.DenyAll {
		lns, err := listenIn(r.NetNS)
		if err != nil {
			return nil, err
		}
		var files []*os.File
		for _, ln := range lns {
			f, err := ln.ln.File()
			ln.ln.Close()
			if err != nil {
				closeFiles(files)
				return nil, fmt.Errorf("listener fd: %w", err)
			}
			files = append(files, f)
			if ln.v6 {
				s.Port6 = ln.port
			} else {
				s.Port4 = ln.port
			}
		}
		s.PID, s.PIDStart, err = startProxy(proxyArgs{
			binary: r.ProxyBinary, sandbox: r.ID, policy: s.PolicyPath(),
			logFile: s.LogFile, resolver: r.ProxyResolver, listeners: files,
		})
		closeFiles(files)
		if err != nil {
			return nil, err
		}
		spec.Port4, spec.Port6 = s.Port4, s.Port6
	}
	if err := enforce.Apply(r.NetNS, spec); err != nil {
		return nil, err
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	return s, nil
}

// reenforce updates a live sandbox: new policy file (the proxy picks it up),
// ruleset re-applied with the same listeners.
func reenforce(s *State, r Request) (*State, error) {
	wasNone := s.Mode == string(conf.ModeNone)
	isNone := r.Policy.Mode == conf.ModeNone
	if wasNone != isNone {
		// Listeners exist only outside mode none: rebuild.
		if err := Teardown(r.StateDir, r.Key); err != nil {
			return nil, err
		}
		return Enforce(r)
	}
	if err := conf.WriteFileAtomic(s.PolicyPath(), r.Policy); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	s.Mode, s.Resolvers, s.AllowICMP, s.Label = string(r.Policy.Mode), r.Resolvers, r.AllowICMP, r.Label
	if err := enforce.Apply(s.NetNS, s.spec()); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	if err := s.save(); err != nil {
		return nil, fmt.Errorf("enforce sandbox %s: %w", r.Key, err)
	}
	return s, nil
}

// spec is the ruleset the state says is installed.
func (s *State) spec() enforce.Spec {
	return enforce.Spec{
		Port4: s.Port4, Port6: s.Port6, Resolvers: s.Resolvers, AllowICMP: s.AllowICMP,
		DenyAll: s.Mode == string(conf.ModeNone),
	}
}

// ProxyAlive reports whether the sandbox's proxy process is running.
func (s *State) ProxyAlive() bool { return proxyAlive(s.PID, s.PIDStart) }

// Teardown stops the sandbox's proxy, removes its ruleset and its state. A
// sandbox that is not there, or whose netns is gone, is no error.
func Teardown(stateDir, key string) error {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	s, err := Load(stateDir, key)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		// Unreadable state: nothing to stop, but do not leave it.
		if ValidKey(key) == nil {
			os.RemoveAll(filepath.Join(stateDir, key))
		}
		return nil
	}
	var errs []error
	if err := stopProxy(s.PID, s.PIDStart, time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := enforce.Remove(s.NetNS); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("tear down sandbox %s: %w", key, errors.Join(errs...))
	}
	return nil
}

// Check reports an error if sandbox key is not enforced as recorded: no
// state, proxy not running, or the ruleset differs from what doorman
// installs.
func Check(stateDir, key string) error {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	s, err := Load(stateDir, key)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if s.Mode != string(conf.ModeNone) && !s.ProxyAlive() {
		return fmt.Errorf("check sandbox %s: proxy (pid %d) is not running", key, s.PID)
	}
	if err := enforce.Check(s.NetNS, s.spec()); err != nil {
		return fmt.Errorf("check sandbox %s: %w", key, err)
	}
	return nil
}

type listener struct {
	ln   *net.TCPListener
	port uint16
	v6   bool
}

// listenIn creates the proxy's listeners inside the netns at path: one for
// IPv4 on 0.0.0.0 and, where the namespace has IPv6, one on [::] (v6only).
// Redirected local connections arrive on loopback, forwarded ones from
// nested containers on the incoming interface's address, hence the
// wildcard binds; the ruleset rejects direct connections to these ports.
func listenIn(nsPath string) ([]listener, error) {
	var out []listener
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		ln4, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			return fmt.Errorf("listen tcp4 in sandbox: %w", err)
		}
		out = append(out, listener{ln: ln4.(*net.TCPListener), port: portOf(ln4)})
		if ln6, err := net.Listen("tcp6", "[::]:0"); err == nil {
			out = append(out, listener{ln: ln6.(*net.TCPListener), port: portOf(ln6), v6: true})
		}
		return nil
	})
	if err != nil {
		for _, l := range out {
			l.ln.Close()
		}
		return nil, err
	}
	return out, nil
}

func portOf(ln net.Listener) uint16 {
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// checkNetNS fails unless path is a network namespace.
func checkNetNS(path string) error {
	n, err := ns.GetNS(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	return n.Close()
}
