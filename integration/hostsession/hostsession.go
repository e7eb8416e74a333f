// Package hostsession holds a "host session" for doorman's end-to-end
// tests: a shell inside a network namespace made by testnet (the one that
// plays a machine's host namespace), with a mount namespace of its own,
// in which a container engine or a Kubernetes node runs its daemons and
// tools one after the other, as on a real host.
//
// Why a session: `ip netns exec` gives each command a new mount namespace,
// and container engines keep mounts there (a container's netns bind mount,
// its rootfs, a pod's volumes). The commands of one container's life must
// see the same mounts, so they all enter the one mount namespace the
// session holds (`nsenter --mount --net`). Mounts made in the session stay
// in it (`ip netns exec` makes the namespace a slave of the root's): the
// machine's own mount table is never changed, and the session's mounts go
// away with its last process.
//
// `ip netns exec` also mounts a fresh /sys, which hides the cgroup
// hierarchies an OCI runtime needs: the session mounts them again
// (CgroupMountScript) before anything else. The functions on cgroups here
// (CgroupMounts, RemoveCgroupTree, RemoveCgroupParent) work on the
// machine's hierarchies from the root mount namespace, for the tests'
// cleanups.
//
// It is a normal package, shared by package integration's runtime tests
// and integration/k8scluster. It needs root.
package hostsession

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/testnet"
)

// Session is a running host session: the shell that holds the mount
// namespace, inside a testnet namespace.
type Session struct {
	pid int
}

// Start starts a session inside x: the shell mounts the cgroup
// hierarchies, runs setup (shell commands, run with `set -e`, that may
// mount more: overlays, binds), reports its pid and then waits for its
// stdin to close. A failing setup fails tb. tb.Cleanup ends the session;
// register the cleanups of whatever runs in it after Start, so that they
// run first.
func Start(tb testing.TB, x *testnet.Netns, setup string) *Session {
	tb.Helper()
	mounts, err := CgroupMountScript()
	if err != nil {
		tb.Fatal(err)
	}
	script := "set -e\n" + mounts + setup + "\necho ready $$\nread -r _ || true\n"
	cmd := x.Command(context.Background(), "sh", "-c", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start the host session: %v", err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			tb.Errorf("the host session did not end when its stdin closed")
		}
	})

	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(s, "ready ")))
		if err != nil {
			tb.Fatalf("host session: got %q, want \"ready <pid>\"; stderr: %s\nscript:\n%s", s, stderr.String(), script)
		}
		return &Session{pid: pid}
	case <-time.After(30 * time.Second):
		tb.Fatalf("host session not ready after 30s; stderr: %s", stderr.String())
	}
	return nil // not reached: Fatalf ends the test
}

// PID is the session shell's pid: `nsenter --target PID --mount --net`
// enters the session.
func (s *Session) PID() int { return s.pid }

// Path is path as the session sees it, for a process of the root mount
// namespace: /proc/<pid>/root/<path>, resolved in the session's mount
// namespace.
func (s *Session) Path(path string) string {
	return filepath.Join("/proc", strconv.Itoa(s.pid), "root", path)
}

// Command is a command running name with args inside the session (its
// mount and network namespaces), for the caller to start. nsenter execs
// name, so the command's process is name's own.
func (s *Session) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	full := slices.Concat([]string{"--target", strconv.Itoa(s.pid), "--mount", "--net", "--", name}, args)
	return exec.CommandContext(ctx, "nsenter", full...)
}

// Result is what a command run in a session did.
type Result struct {
	Tool           string
	Args           []string
	Stdout, Stderr string
	Exit           int
}

func (r Result) String() string {
	return fmt.Sprintf("%s %s: exit %d\nstdout: %s\nstderr: %s", r.Tool, strings.Join(r.Args, " "), r.Exit, r.Stdout, r.Stderr)
}

// Run runs tool with args inside the session, with env (nil: the
// environment without *_proxy variables) and stdin (may be empty), within
// timeout. The error is only for a tool that could not be run at all, or
// did not end in time; a tool's own failure is its Result.Exit.
func (s *Session) Run(env []string, stdin string, timeout time.Duration, tool string, args ...string) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := s.Command(ctx, tool, args...)
	if env == nil {
		env = EnvWithoutProxy()
	}
	cmd.Env = env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	// Should a process the tool leaves behind hold the pipes, do not
	// wait for it beyond the tool's own exit.
	cmd.WaitDelay = 5 * time.Second
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Tool: filepath.Base(tool), Args: args, Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return r, fmt.Errorf("%s %s: not done after %v", tool, strings.Join(args, " "), timeout)
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		r.Exit = ee.ExitCode()
	default:
		return r, fmt.Errorf("%s %s: %w (stderr %q)", tool, strings.Join(args, " "), err, errb.String())
	}
	return r, nil
}

// Processes lists the processes in the session's mount namespace other
// than the session shell: what is left of its daemons.
func (s *Session) Processes() []int {
	self, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", s.pid))
	if err != nil {
		return nil
	}
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == s.pid {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", d.Name(), "ns", "mnt")); err == nil && ns == self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// EnvWithoutProxy is the process environment minus *_proxy variables.
func EnvWithoutProxy() []string {
	var env []string
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		if !strings.HasSuffix(strings.ToLower(key), "_proxy") {
			env = append(env, kv)
		}
	}
	return env
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
