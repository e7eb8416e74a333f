package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// InitArg0 is the argv[0] a run's init is started with: the doorman
// binary, re-executed by Sandbox.Start as the first process of the
// command's pid namespace. A main that sees it calls Init.
const InitArg0 = "doorman-run-init"

// The init's inherited descriptors.
const (
	initSpecFd   = 3 // read: the initSpec, as JSON, then EOF
	initSignalFd = 4 // read: one byte per signal to pass on to the command
	initStatusFd = 5 // write: the initStatus, then closed
)

// keptCaps is the capability bounding set of the command and of whatever
// it executes: the capabilities a Docker container gets by default, less
// CAP_MKNOD (no device cgroup stands behind it here). A root command thus
// cannot undo its view of the filesystem (no CAP_SYS_ADMIN: no umount,
// mount or setns), trace or read other processes (CAP_SYS_PTRACE), open
// files by handle past the covers (CAP_DAC_READ_SEARCH), reach raw memory
// or devices (CAP_SYS_RAWIO, CAP_MKNOD), load modules, or change its own
// network namespace's rules (CAP_NET_ADMIN).
var keptCaps = []int{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID,
	unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP,
	unix.CAP_NET_BIND_SERVICE, unix.CAP_NET_RAW, unix.CAP_SYS_CHROOT,
	unix.CAP_AUDIT_WRITE, unix.CAP_SETFCAP,
}

// initSpec is the command the init runs, as Start was given it.
type initSpec struct {
	Path   string   `json:"path"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	UID    *uint32  `json:"uid,omitempty"` // with GID and Groups: run as this user
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	// Runtime, if set, is the OCI runtime that runs the command (see
	// Config.Runtime): the init runs it, with every capability, on a
	// bundle it writes (ociSpec), instead of the command.
	Runtime []string `json:"runtime,omitempty"`
}

// initStatus is what the init reports once the command has started, or
// could not: Errno is the error number of a failed start, if it had one.
type initStatus struct {
	Err   string `json:"err,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

// err is the status as an error for Start's caller: a failed exec keeps
// its errno, so that a command that does not exist is told from one that
// cannot run.
func (st initStatus) err(path string) error {
	switch {
	case st.Err == "":
		return nil
	case st.Errno != 0:
		return &os.PathError{Op: "fork/exec", Path: path, Err: syscall.Errno(st.Errno)}
	default:
		return errors.New(st.Err)
	}
}

// Init is a run's init: the first process of the command's pid
// namespace. It mounts the namespace's own /proc, limits the capability
// bounding set to keptCaps, starts the command its spec names, passes on
// the signals Start's caller forwards, reaps every orphan, and returns
// the command's exit status (128+N if signal N ended it), for main to
// exit with; the kernel then ends whatever the command left running.
// Main must call it, and nothing else, when os.Args[0] is InitArg0.
func Init() int {
	status := os.NewFile(initStatusFd, "status")
	fail := func(st initStatus) int {
		json.NewEncoder(status).Encode(st)
		return ExitFailed
	}
	if os.Getpid() != 1 {
		return fail(initStatus{Err: "doorman run: " + InitArg0 + " is started by doorman run only"})
	}
	for _, fd := range []int{initSpecFd, initSignalFd, initStatusFd} {
		syscall.CloseOnExec(fd)
	}
	var spec initSpec
	if err := json.NewDecoder(os.NewFile(initSpecFd, "spec")).Decode(&spec); err != nil {
		return fail(initStatus{Err: fmt.Sprintf("doorman run: init: read the command: %v", err)})
	}
	// Every signal Start's caller may forward is caught, and dropped when
	// it comes other than through the signal pipe: the terminal sends its
	// own to the whole process group, the command included. Caught, not
	// ignored, so that the command starts with the default actions.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)
	if err := setupInit(len(spec.Runtime) == 0); err != nil {
		return fail(initStatus{Err: fmt.Sprintf("doorman run: init: %v", err)})
	}
	if spec.Dir != "" {
		// Looked up again through the covers: a working directory below
		// one of them is not there for the command.
		if fi, err := os.Stat(spec.Dir); err != nil || !fi.IsDir() {
			return fail(initStatus{Err: fmt.Sprintf("doorman run: the working directory %s is hidden from the command (doorman's own directories are); run it from another", spec.Dir)})
		}
	}
	cmd := &exec.Cmd{
		Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	}
	if len(spec.Runtime) > 0 {
		var err error
		if cmd, err = ociCommand(spec); err != nil {
			return fail(initStatus{Err: fmt.Sprintf("doorman run: init: %v", err)})
		}
	} else if spec.UID != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: *spec.UID, Gid: spec.GID, Groups: spec.Groups}}
	}
	if err := cmd.Start(); err != nil {
		st := initStatus{Err: err.Error()}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			st.Errno = int(errno)
		}
		return fail(st)
	}
	json.NewEncoder(status).Encode(initStatus{})
	status.Close()
	pid := cmd.Process.Pid

	go func() {
		r := os.NewFile(initSignalFd, "signals")
		b := make([]byte, 1)
		for {
			if _, err := r.Read(b); err != nil {
				return
			}
			unix.Kill(pid, unix.Signal(b[0]))
		}
	}()
	for s := range sigs {
		if s != syscall.SIGCHLD {
			continue
		}
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err != nil || got <= 0 {
				break
			}
			if got != pid {
				continue
			}
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
	return ExitFailed
}

// setupInit mounts the pid namespace's own /proc (in the command's mount
// namespace, which the init shares) and, if dropCaps, limits the
// capability bounding set to keptCaps; the ambient and inheritable sets
// are emptied, so that nothing the command executes gains a capability
// outside the set. An OCI runtime (Config.Runtime) keeps every
// capability: it gives the command keptCaps itself.
func setupInit(dropCaps bool) error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc of the pid namespace: %w", err)
	}
	if !dropCaps {
		return nil
	}
	data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("cap_last_cap %q: %w", data, err)
	}
	keep := map[int]bool{}
	for _, c := range keptCaps {
		keep[c] = true
	}
	for c := 0; c <= last; c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("read the capabilities: %w", err)
	}
	caps[0].Inheritable, caps[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("clear the inheritable capabilities: %w", err)
	}
	return nil
}

// startInit starts the init that runs cmd: this binary again, as InitArg0,
// with cmd's standard streams, as the first process of a new pid
// namespace, from the calling thread (which must be in the command's
// network and mount namespaces) and killed if that thread ends; rt is
// Config.Runtime. It
// returns once the command has started, or failed to.
func startInit(cmd *exec.Cmd, rt []string) (*exec.Cmd, *os.File, error) {
	spec := initSpec{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Runtime: rt}
	if spec.Env == nil {
		spec.Env = os.Environ()
	}
	if spec.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, nil, fmt.Errorf("working directory: %w", err)
		}
		spec.Dir = wd
	}
	if a := cmd.SysProcAttr; a != nil && a.Credential != nil {
		uid := a.Credential.Uid
		spec.UID, spec.GID, spec.Groups = &uid, a.Credential.Gid, a.Credential.Groups
	}
	var pipes [6]*os.File // spec r/w, signals r/w, status r/w
	for i := 0; i < len(pipes); i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			for _, f := range pipes[:i] {
				f.Close()
			}
			return nil, nil, err
		}
		pipes[i], pipes[i+1] = r, w
	}
	specR, specW, sigR, sigW, statR, statW := pipes[0], pipes[1], pipes[2], pipes[3], pipes[4], pipes[5]
	defer specW.Close()
	defer statR.Close()
	init := &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{InitArg0}, Env: []string{},
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
		ExtraFiles: []*os.File{specR, sigR, statW},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWPID,
			// Pdeathsig fires when the thread that forked the init
			// ends: Start's thread lives until the init is waited for.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	err := init.Start()
	specR.Close()
	sigR.Close()
	statW.Close()
	if err != nil {
		sigW.Close()
		return nil, nil, fmt.Errorf("start the sandbox's init: %w", err)
	}
	if err := json.NewEncoder(specW).Encode(spec); err != nil {
		init.Process.Kill()
		init.Wait()
		sigW.Close()
		return nil, nil, fmt.Errorf("tell the sandbox's init the command: %w", err)
	}
	specW.Close()
	var st initStatus
	data, err := io.ReadAll(statR)
	if err == nil {
		err = json.Unmarshal(data, &st)
	}
	if err == nil {
		err = st.err(cmd.Path)
	} else {
		err = fmt.Errorf("the sandbox's init ended before starting the command: %w", err)
	}
	if err != nil {
		init.Process.Kill()
		init.Wait()
		sigW.Close()
		return nil, nil, err
	}
	return init, sigW, nil
}
