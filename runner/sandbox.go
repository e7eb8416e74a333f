package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/hostconf"
)

// Sandbox is one attached run: a network namespace enforced by doorman,
// ready to run a command. Make it with Attach; end it with Detach.
type Sandbox struct {
	rec        record
	dir        string // this run's directory under the run dir
	runDir     string
	resolvConf string
	stateDir   string
	logDir     string
	caRoot     string   // the networks' CA directory (not this network's)
	secrets    []string // the secret files of the run's policy
	// trustBundle is the run's trust bundle when its policy inspects
	// hosts, mounted over trustPaths (see addTrust).
	trustBundle string
	trustPaths  []string
	// runtime is Config.Runtime: the OCI runtime that runs the command,
	// nil for none.
	runtime []string

	init    *exec.Cmd     // the command's init (see Init), once started
	signals *os.File      // the init's signal pipe
	exited  chan struct{} // closed when init has been waited for
	result  error         // what init.Wait returned, once exited is closed
}

// Attach creates the sandbox's namespace and attaches it through the CNI
// chain. On error nothing it made is left behind.
func Attach(ctx context.Context, cfg Config) (*Sandbox, error) {
	s, err := attach(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("doorman run: %w", err)
	}
	return s, nil
}

func attach(ctx context.Context, cfg Config) (_ *Sandbox, err error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(c.CNIPath) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this binary: %w", err)
		}
		c.CNIPath = SearchPath(exe)
	}
	if _, err := FindPlugins(c.CNIPath); err != nil {
		return nil, err
	}
	lock, err := lockRunDir(ctx, c.RunDir)
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	reapStale(ctx, c.RunDir, c.Logf)
	if err := checkRoutes(c.Bridge, c.Subnets); err != nil {
		return nil, err
	}
	chainConf, err := c.chainList(filepath.Join(c.RunDir, ipamSubdir))
	if err != nil {
		return nil, err
	}
	start, err := processStart(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("own start time: %w", err)
	}
	s := &Sandbox{
		rec: record{
			Name: c.Name, PID: os.Getpid(), PIDStart: start, NetNS: netnsPath(c.Name),
			Bridge: c.Bridge, CNIPath: c.CNIPath, Created: time.Now().UTC(),
		},
		dir:      filepath.Join(c.RunDir, c.Name),
		runDir:   c.RunDir,
		stateDir: c.StateDir,
		logDir:   c.LogDir,
		caRoot:   cmp.Or(c.CADir, hostconf.DefaultCADir),
		secrets:  c.Policy.SecretFiles(),
		runtime:  c.Runtime,
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("a run named %q exists (%s): is it still running?", c.Name, s.dir)
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			if terr := s.teardown(context.WithoutCancel(ctx)); terr != nil {
				err = errors.Join(err, fmt.Errorf("and undoing it: %w", terr))
			}
		}
	}()
	if err = s.wire(ctx, c, chainConf); err != nil {
		return nil, err
	}
	if err = s.addTrust(c); err != nil {
		return nil, err
	}
	return s, nil
}

// wire makes what the run's record says, recording each part before it
// is made: from here on, a crash leaves something the next run knows how
// to undo. Called with the lock held; the caller undoes it on error.
func (s *Sandbox) wire(ctx context.Context, c Config, chainConf []byte) error {
	if err := s.rec.save(s.dir); err != nil {
		return err
	}
	var err error
	if s.resolvConf, err = writeResolvConf(s.dir, c.Resolvers, c.Search); err != nil {
		return err
	}
	if err := createNetns(s.rec.NetNS); err != nil {
		return err
	}
	existing, err := findBridge(c.Bridge)
	if err != nil {
		return err
	}
	for _, list := range [][]byte{loopbackList(), chainConf} {
		// Recorded before the ADD: a failed ADD is undone by a DEL too.
		s.rec.Networks = append(s.rec.Networks, list)
		if err := s.rec.save(s.dir); err != nil {
			return err
		}
		err := s.add(ctx, list)
		if existing == nil {
			// Marked even if the ADD failed after making it, so that
			// the teardown can remove it.
			if merr := markBridge(c.Bridge); merr != nil && err == nil {
				err = merr
			}
		}
		if err != nil {
			return err
		}
	}
	return applyMasq(c.Bridge, c.Subnets)
}

// cni is the libcni handle of this run: its plugin path, its own cache.
func (s *Sandbox) cni() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir(s.rec.CNIPath, filepath.Join(s.dir, cacheDir), nil)
}

func (s *Sandbox) runtimeConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: s.rec.Name, NetNS: s.rec.NetNS, IfName: IfName}
}

// add runs ADD of one conflist. Plugins get a generous bound of their own:
// an ADD cut short by a signal could leave a proxy nobody recorded.
func (s *Sandbox) add(ctx context.Context, raw []byte) error {
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		return fmt.Errorf("conflist: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if _, err := s.cni().AddNetworkList(ctx, list, s.runtimeConf()); err != nil {
		return fmt.Errorf("ADD network %s: %w", list.Name, err)
	}
	return nil
}

func (s *Sandbox) del(ctx context.Context, raw []byte) error {
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		return fmt.Errorf("conflist: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.cni().DelNetworkList(ctx, list, s.runtimeConf()); err != nil {
		return fmt.Errorf("DEL network %s: %w", list.Name, err)
	}
	return nil
}

// Name is the sandbox's container id.
func (s *Sandbox) Name() string { return s.rec.Name }

// NetNS is the path of the sandbox's network namespace.
func (s *Sandbox) NetNS() string { return s.rec.NetNS }

// Key is the sandbox's key in doorman's state directory.
func (s *Sandbox) Key() string { return s.rec.Name + "-" + IfName }

// LogFile is the sandbox's decision log.
func (s *Sandbox) LogFile() string { return filepath.Join(s.logDir, s.Key()+".log") }

// Start starts cmd inside the sandbox, in a view of the host of its own:
//
//   - the sandbox's network namespace;
//   - a mount namespace of its own (nothing mounted there propagates back)
//     where /etc/resolv.conf lists the sandbox's resolvers, the trust
//     bundle (when the policy inspects hosts) is mounted over the host's
//     bundle paths, doorman's directories (hiddenDirs) are covered by
//     empty read-only tmpfs mounts and the secret files of credential
//     injection (secretFiles) by /dev/null, /run is an empty tmpfs of
//     its own, without the host's daemons' sockets (mountRun), and /dev
//     holds only the devices every program uses (mountDev);
//   - a pid namespace of its own, with its own /proc, whose first process
//     is the run's init (Init: this binary again), which starts cmd with
//     the capability bounding set keptCaps and passes on what Signal
//     sends. No process of the host, the sandbox's proxy included, is
//     visible to cmd.
//   - with Config.Runtime, the init starts that OCI runtime instead, with
//     every capability (the runtime is the sandbox then), on a bundle
//     whose root is this view of the host: cmd runs inside it with
//     keptCaps as its capabilities, as its user, on the runtime's own
//     network stack in the same network namespace (see ociSpec).
//
// cmd runs as the calling user unless cmd.SysProcAttr.Credential says
// otherwise (no other SysProcAttr field nor ExtraFiles are supported); cmd
// itself is not started (its Process stays nil): Exited, Wait and Signal
// are the run's. The init gets SIGKILL if this process dies, and the
// command with it. A Sandbox runs one command.
func (s *Sandbox) Start(cmd *exec.Cmd) error {
	if s.init != nil {
		return errors.New("doorman run: the sandbox already ran a command")
	}
	if len(cmd.ExtraFiles) > 0 {
		return errors.New("doorman run: a command with extra files is not supported")
	}
	if env := s.trustEnv(); env != nil {
		base := cmd.Env
		if base == nil {
			base = os.Environ()
		}
		cmd.Env = withEnv(base, env)
	}
	var keep []string
	if s.trustBundle != "" {
		keep = []string{s.trustBundle}
	}
	covers, err := resolveCovers(s.hiddenDirs(), s.secretFiles(), keep)
	if err != nil {
		return err
	}
	type startResult struct {
		init    *exec.Cmd
		signals *os.File
		err     error
	}
	started := make(chan startResult, 1)
	exited := make(chan struct{})
	go func() {
		// The thread enters the sandbox's namespaces, so it must never
		// run another goroutine: it stays locked and ends with this one.
		runtime.LockOSThread()
		err := enterSandbox(s.rec.NetNS, s.resolvConf)
		if err == nil && s.trustBundle != "" {
			err = mountTrust(s.trustBundle, s.trustPaths)
		}
		if err == nil {
			err = mountCovers(covers)
		}
		if err == nil {
			err = mountRun(keep)
		}
		if err == nil {
			err = mountDev()
		}
		var r startResult
		if err == nil {
			r.init, r.signals, err = startInit(cmd, s.runtime)
		}
		r.err = err
		started <- r
		if err != nil {
			return
		}
		s.result = r.init.Wait()
		close(exited)
	}()
	r := <-started
	if r.err != nil {
		return r.err
	}
	s.init, s.signals, s.exited = r.init, r.signals, exited
	return nil
}

// Signal passes sig on to the command started by Start.
func (s *Sandbox) Signal(sig syscall.Signal) error {
	if s.init == nil {
		return errors.New("doorman run: no command started")
	}
	select {
	case <-s.exited:
		return os.ErrProcessDone
	default:
	}
	_, err := s.signals.Write([]byte{byte(sig)})
	return err
}

// Exited is closed when the command started by Start has ended (nil
// before Start).
func (s *Sandbox) Exited() <-chan struct{} { return s.exited }

// Wait waits for the command started by Start and returns what
// exec.Cmd.Wait returned for its init: the command's exit status, or
// 128+N for a command that signal N ended (see ExitStatus). It may be
// called from several goroutines.
func (s *Sandbox) Wait() error {
	if s.init == nil {
		return errors.New("doorman run: no command started")
	}
	<-s.exited
	return s.result
}

// enterSandbox moves the calling (locked) thread into the namespace at
// netnsPath and into a new mount namespace where resolvConf is mounted
// read-only over /etc/resolv.conf. Nothing mounted here propagates back.
func enterSandbox(netnsPath, resolvConf string) error {
	f, err := os.Open(netnsPath)
	if err != nil {
		return fmt.Errorf("open the sandbox's network namespace: %w", err)
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter the sandbox's network namespace: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("new mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the mount namespace a slave: %w", err)
	}
	if _, err := os.Stat(hostconf.ResolvConf); err != nil {
		return fmt.Errorf("%w (%v)", errNoResolvConf, err)
	}
	if err := unix.Mount(resolvConf, hostconf.ResolvConf, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount the sandbox's resolv.conf over %s: %w", hostconf.ResolvConf, err)
	}
	if err := unix.Mount("", hostconf.ResolvConf, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", hostconf.ResolvConf, err)
	}
	return nil
}

// Detach ends the run: it kills the command if it still runs, DELs both
// networks (the doorman plugin stops the proxy and removes its state),
// removes the namespace and the run's files, and the bridge, its
// masquerade table and its IPAM data when no other run uses them. It may
// be called more than once.
func (s *Sandbox) Detach(ctx context.Context) error {
	if s.init != nil {
		select {
		case <-s.exited:
		default:
			s.init.Process.Kill()
			s.Wait()
		}
		s.signals.Close()
	}
	lock, err := lockRunDir(ctx, s.runDir)
	if err != nil {
		return fmt.Errorf("doorman run: %w", err)
	}
	defer lock.unlock()
	if err := s.teardown(ctx); err != nil {
		return fmt.Errorf("doorman run: %w", err)
	}
	return nil
}

// teardown undoes everything the record says was made, in reverse order,
// going on past errors. Called with the lock held.
func (s *Sandbox) teardown(ctx context.Context) error {
	var errs []error
	if s.rec.NetNS != "" {
		// The namespace's mount lives in the mount namespace of the run
		// that made it; if that was a private one (`ip netns exec`) that
		// died with it, only the mount point is left. Without the file,
		// the plugins' DEL skips the namespace and cleans up the rest.
		if n, err := ns.GetNS(s.rec.NetNS); err == nil {
			n.Close()
			if err := killProcessesIn(s.rec.NetNS); err != nil {
				errs = append(errs, err)
			}
		} else if _, notNS := err.(ns.NSPathNotNSErr); notNS {
			os.Remove(s.rec.NetNS)
		}
	}
	for i := len(s.rec.Networks) - 1; i >= 0; i-- {
		if err := s.del(ctx, s.rec.Networks[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if s.rec.NetNS != "" {
		if err := removeNetns(s.rec.NetNS); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		// Keep the record (and the CNI cache) while something failed,
		// so that a later run can try again.
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if s.rec.Bridge != "" {
		removed, err := removeIdleBridge(s.rec.Bridge)
		if err != nil {
			errs = append(errs, err)
		}
		if removed {
			if err := removeMasq(s.rec.Bridge); err != nil {
				errs = append(errs, err)
			}
			if err := os.RemoveAll(filepath.Join(s.runDir, ipamSubdir, s.rec.Bridge)); err != nil {
				errs = append(errs, err)
			}
			os.Remove(filepath.Join(s.runDir, ipamSubdir)) // if no other bridge's data is there
		}
	}
	s.rec.Networks = nil
	return errors.Join(errs...)
}

// ExitStatus is the shell's exit status for what Wait returned: the
// command's own, or 128+N if signal N killed it.
func ExitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}
