package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// readyTimeout bounds how long Enforce waits for a new proxy to serve.
const readyTimeout = 10 * time.Second

// proxyArgs says how to start one sandbox's proxy.
type proxyArgs struct {
	binary    string
	sandbox   string
	policy    string
	logFile   string
	resolver  string
	listeners []*os.File
}

// startProxy starts a detached `doorman proxy` (its own session, stdio on
// /dev/null, so it outlives the plugin and the runtime and never holds the
// runtime's pipes open), hands it the listener sockets, and waits until it
// writes "ready". It returns the proxy's pid and start time.
func startProxy(a proxyArgs) (int, uint64, error) {
	readR, readW, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	defer readR.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		readW.Close()
		return 0, 0, err
	}
	defer devnull.Close()

	args := []string{"proxy", "--sandbox", a.sandbox, "--policy", a.policy, "--log", a.logFile, "--drain-timeout", "500ms"}
	if a.resolver != "" {
		args = append(args, "--resolver", a.resolver)
	}
	// ExtraFiles start at fd 3: listeners first, then the readiness pipe.
	extra := append([]*os.File{}, a.listeners...)
	for i := range a.listeners {
		args = append(args, "--listen-fd", strconv.Itoa(3+i))
	}
	args = append(args, "--ready-fd", strconv.Itoa(3+len(extra)))
	extra = append(extra, readW)

	cmd := exec.Command(a.binary, args...)
	cmd.Stdin, cmd.Stdout = devnull, devnull
	// Early failures (bad flags, unreadable policy) go to the decision
	// log's directory as the proxy's own stderr.
	errLog, err := os.OpenFile(a.logFile+".stderr", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		readW.Close()
		return 0, 0, fmt.Errorf("proxy stderr log: %w", err)
	}
	defer errLog.Close()
	cmd.Stderr = errLog
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=2"}
	err = cmd.Start()
	readW.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("start proxy %s: %w", a.binary, err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(readR).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			ready <- fmt.Errorf("proxy did not signal ready (%q, %v)", line, err)
			return
		}
		ready <- nil
	}()
	select {
	case err := <-ready:
		if err != nil {
			cmd.Process.Kill()
			return 0, 0, fmt.Errorf("%w; see %s", err, a.logFile+".stderr")
		}
	case err := <-exited:
		return 0, 0, fmt.Errorf("proxy exited before serving (%v); see %s", err, a.logFile+".stderr")
	case <-time.After(readyTimeout):
		cmd.Process.Kill()
		return 0, 0, fmt.Errorf("proxy not ready after %v", readyTimeout)
	}
	start, err := processStart(pid)
	if err != nil {
		cmd.Process.Kill()
		return 0, 0, fmt.Errorf("proxy pid %d: %w", pid, err)
	}
	// Let the child go: it belongs to no one once this process exits.
	cmd.Process.Release()
	return pid, start, nil
}

// processStart reads a process's start time (field 22 of /proc/PID/stat,
// clock ticks since boot): together with the pid it names one process, so
// a pid reused after the proxy died is never signalled.
func processStart(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// openProxy returns a pidfd for the recorded proxy, or -1 if that process
// is gone (the pid is free or now names another process).
func openProxy(pid int, start uint64) (int, error) {
	if pid <= 0 {
		return -1, nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// Check the start time after opening the pidfd: if it matches now,
	// the pidfd refers to our proxy and stays valid even if it exits.
	got, err := processStart(pid)
	if err != nil || got != start {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// proxyAlive reports whether the recorded proxy process still runs (and is
// not a zombie).
func proxyAlive(pid int, start uint64) bool {
	fd, err := openProxy(pid, start)
	if err != nil || fd < 0 {
		return false
	}
	defer unix.Close(fd)
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// stopProxy terminates the recorded proxy through a pidfd: SIGTERM, then
// SIGKILL if it has not exited within grace. A proxy already gone is fine.
func stopProxy(pid int, start uint64, grace time.Duration) error {
	fd, err := openProxy(pid, start)
	if err != nil || fd < 0 {
		return err
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal proxy %d: %w", pid, err)
	}
	if waitPidfd(fd, grace) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill proxy %d: %w", pid, err)
	}
	if !waitPidfd(fd, 5*time.Second) {
		return fmt.Errorf("proxy %d did not exit after SIGKILL", pid)
	}
	return nil
}

// waitPidfd waits until the process behind fd has exited.
func waitPidfd(fd int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms < 0 {
			ms = 0
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if n > 0 {
			return true
		}
		if err != nil || ms == 0 {
			return false
		}
	}
}
