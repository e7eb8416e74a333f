package supervise

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/launch"
)

// envWorker makes this test binary a worker (see TestMain): "serve" says
// ready, then answers each connection on the inherited listener (fd 3)
// with its pid, and each heartbeat, until SIGTERM; "fail" exits with status 3 at once;
// "flaky" says ready and exits with status 4 a moment later; "late" serves
// as "serve" does once the file its pid names is gone.
const envWorker = "DOORMAN_SUPERVISE_TEST_WORKER"

// envHold names the file a "late" worker waits for to be removed before
// it serves.
const envHold = "DOORMAN_SUPERVISE_TEST_HOLD"

func TestMain(m *testing.M) {
	switch mode := os.Getenv(envWorker); mode {
	case "":
		os.Exit(m.Run())
	case "fail":
		fmt.Fprintln(os.Stderr, "test worker: failing as asked")
		os.Exit(3)
	case "serve", "flaky", "late":
		if mode == "late" {
			hold := os.Getenv(envHold)
			for {
				if _, err := os.Stat(hold); os.IsNotExist(err) {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		// The descriptors launch.Worker hands a worker: its one
		// listener, then these.
		fd, hb := -1, -1
		fmt.Sscan(os.Getenv(launch.EnvWorkerFDs), &hb, &fd)
		// Heartbeats are answered as a proxy answers them: each message
		// sent back.
		go func() {
			f := os.NewFile(uintptr(hb), "heartbeat")
			buf := make([]byte, 64)
			for {
				n, err := f.Read(buf)
				if err != nil {
					return
				}
				f.Write(buf[:n])
			}
		}()
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		ln, err := net.FileListener(os.NewFile(3, "listener"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "test worker:", err)
			os.Exit(1)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "%d\n", os.Getpid())
				c.Close()
			}
		}()
		ready := os.NewFile(uintptr(fd), "ready")
		ready.WriteString("ready\n")
		ready.Close()
		if mode == "flaky" {
			time.Sleep(20 * time.Millisecond)
			os.Exit(4)
		}
		<-term
		os.Exit(0)
	}
}

// harness runs Run on a TCP listener of its own with workers of the given
// mode, until the test ends.
type harness struct {
	t      *testing.T
	ln     *net.TCPListener
	status string
	done   chan error
	cancel context.CancelFunc
	ready  chan struct{}
}

func newHarness(t *testing.T, mode string, tweak func(*Config)) *harness {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ln: ln, status: filepath.Join(t.TempDir(), "status.json"), done: make(chan error, 1), ready: make(chan struct{})}
	cfg := Config{
		Sandbox: "test",
		Worker:  launch.Worker{Path: os.Args[0], Env: append(os.Environ(), envWorker+"="+mode), Listeners: []*os.File{f}, Stderr: stderr},
		Stderr:  stderr, StatusFile: h.status,
		Ready: func() { close(h.ready) },
	}
	if tweak != nil {
		tweak(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context's end")
		}
		f.Close()
		ln.Close()
		stderr.Close()
		if t.Failed() {
			data, _ := os.ReadFile(stderr.Name())
			t.Logf("supervisor's stderr:\n%s", data)
		}
	})
	return h
}

// waitStatus polls the status file until ok says yes (a generous
// deadline: the machine is shared).
func (h *harness) waitStatus(what string, ok func(*Status) bool) *Status {
	h.t.Helper()
	var last *Status
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s, err := ReadStatus(h.status); err == nil {
			last = s
			if ok(s) {
				return s
			}
		}
	}
	h.t.Fatalf("status never %s; last %+v", what, last)
	return nil
}

// ask connects to the listener and returns the pid the worker answers
// with.
func (h *harness) ask() int {
	h.t.Helper()
	c, err := net.DialTimeout("tcp", h.ln.Addr().String(), 10*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		h.t.Fatalf("no answer from a worker: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// A worker killed with SIGKILL is replaced, on the same listener; a
// connection made while no worker ran waits in the backlog and is
// answered by the next one.
func TestRunReplacesAKilledWorker(t *testing.T) {
	h := newHarness(t, "serve", nil)
	<-h.ready
	first := h.waitStatus("serving", func(s *Status) bool { return s.State == StateServing && s.Worker != nil })
	if first.Supervisor.PID != os.Getpid() || first.Restarts != 0 || first.LastExit != nil {
		t.Fatalf("first status %+v", first)
	}
	if pid := h.ask(); pid != first.Worker.PID {
		t.Fatalf("answered by %d, the status says %d", pid, first.Worker.PID)
	}
	syscall.Kill(first.Worker.PID, syscall.SIGKILL)
	answered := make(chan int, 1)
	go func() { answered <- h.ask() }()
	s := h.waitStatus("serving a second worker", func(s *Status) bool {
		return s.State == StateServing && s.Worker != nil && s.Worker.PID != first.Worker.PID
	})
	if s.Restarts != 1 || s.LastExit == nil || s.LastExit.Reason != "killed by SIGKILL" || s.LastExit.PID != first.Worker.PID || s.LastExit.OOM {
		t.Errorf("after kill -9: %+v, last exit %+v", s, s.LastExit)
	}
	if pid := <-answered; pid != s.Worker.PID {
		t.Errorf("the connection made across the restart was answered by %d, want the new worker %d", pid, s.Worker.PID)
	}
}

// The first worker must serve: its failure is Run's error.
func TestRunFirstWorkerFails(t *testing.T) {
	h := newHarness(t, "fail", nil)
	select {
	case err := <-h.done:
		h.done <- err
		if err == nil || !strings.Contains(err.Error(), "exited with status 3") {
			t.Errorf("Run: %v, want the worker's exit", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case <-h.ready:
		t.Error("Ready called for a worker that never served")
	default:
	}
}

// Workers that keep dying back off, the status says so (crash loop), and
// SIGTERM still stops the supervisor at once.
func TestRunBacksOff(t *testing.T) {
	h := newHarness(t, "flaky", func(c *Config) { c.BackoffBase = 200 * time.Millisecond })
	<-h.ready
	s := h.waitStatus("in backoff, crash looping", func(s *Status) bool {
		return s.State == StateBackoff && s.CrashLooping() && s.NextStart != nil
	})
	if s.Worker != nil || s.LastExit == nil || s.LastExit.Reason != "exited with status 4" || s.Restarts < CrashLoopAfter-1 {
		t.Errorf("crash loop status %+v, last exit %+v", s, s.LastExit)
	}
	// The delays grow: a later backoff waits longer than the first.
	later := h.waitStatus("backing off longer", func(o *Status) bool {
		return o.State == StateBackoff && o.Failures > s.Failures+1
	})
	if d0, d1 := s.NextStart.Sub(s.Updated), later.NextStart.Sub(later.Updated); d1 <= d0 {
		t.Errorf("backoff %v after %d failures, %v after %d: want it growing", d0, s.Failures, d1, later.Failures)
	}
	start := time.Now()
	h.cancel()
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return while backing off")
	}
	t.Logf("stopped %v after the cancel, in backoff", time.Since(start).Round(time.Millisecond))
}

// A worker that serves StableAfter resets the failures; stopping the
// supervisor stops its worker with SIGTERM.
func TestRunStableAndStop(t *testing.T) {
	h := newHarness(t, "serve", func(c *Config) { c.StableAfter = 300 * time.Millisecond })
	<-h.ready
	first := h.waitStatus("serving", func(s *Status) bool { return s.State == StateServing })
	syscall.Kill(first.Worker.PID, syscall.SIGKILL)
	h.waitStatus("one failure", func(s *Status) bool { return s.Failures == 1 && s.State == StateServing })
	s := h.waitStatus("failures reset", func(s *Status) bool { return s.Failures == 0 && s.Restarts == 1 })
	h.cancel()
	if err := <-h.done; err != nil {
		t.Errorf("Run: %v", err)
	}
	h.done <- nil
	for deadline := time.Now().Add(10 * time.Second); alive(s.Worker.PID) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if alive(s.Worker.PID) {
		t.Errorf("worker %d still runs after Run returned", s.Worker.PID)
	}
	final, _ := ReadStatus(h.status)
	if final.State != StateStopping || final.Worker != nil {
		t.Errorf("final status %+v", final)
	}
}

// With ReadyOnStart, Ready comes once the first worker runs, before it
// serves: the status names it, starting. It serves afterwards, on the
// same listener, and a connection made in between is answered.
func TestRunReadyOnStart(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, "late", func(c *Config) {
		c.ReadyOnStart = true
		c.Worker.Env = append(c.Worker.Env, envHold+"="+hold)
	})
	select {
	case <-h.ready:
	case <-time.After(20 * time.Second):
		t.Fatal("no Ready while the first worker had not served yet")
	}
	s, err := ReadStatus(h.status)
	if err != nil || s.State != StateStarting || s.Worker == nil || !alive(s.Worker.PID) {
		t.Fatalf("status at Ready: %+v (%v), want a live worker starting", s, err)
	}
	answered := make(chan int, 1)
	go func() { answered <- h.ask() }()
	os.Remove(hold)
	if pid := <-answered; pid != s.Worker.PID {
		t.Errorf("the connection made before it served was answered by %d, want the first worker %d", pid, s.Worker.PID)
	}
	h.waitStatus("serving", func(o *Status) bool {
		return o.State == StateServing && o.Worker != nil && o.Worker.PID == s.Worker.PID
	})
}

// With ReadyOnStart, a first worker that never serves is not Run's
// error: it is replaced like a later one, and the status says the proxy
// crash loops.
func TestRunReadyOnStartFirstWorkerFails(t *testing.T) {
	h := newHarness(t, "fail", func(c *Config) {
		c.ReadyOnStart = true
		c.BackoffBase = 50 * time.Millisecond
	})
	select {
	case <-h.ready:
	case err := <-h.done:
		h.done <- err
		t.Fatalf("Run returned (%v) without Ready", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no Ready once the first worker started")
	}
	s := h.waitStatus("crash looping", func(s *Status) bool { return s.CrashLooping() })
	if s.LastExit == nil || s.LastExit.Reason != "exited with status 3" || s.Restarts < CrashLoopAfter-1 {
		t.Errorf("status %+v, last exit %+v", s, s.LastExit)
	}
	select {
	case err := <-h.done:
		h.done <- err
		t.Fatalf("Run returned (%v) while its workers kept failing", err)
	default:
	}
}

// Even with ReadyOnStart, a first worker that cannot be started at all
// is Run's error, and Ready is never called.
func TestRunReadyOnStartCannotStart(t *testing.T) {
	h := newHarness(t, "serve", func(c *Config) {
		c.ReadyOnStart = true
		c.Worker.Path = filepath.Join(t.TempDir(), "missing")
	})
	select {
	case err := <-h.done:
		h.done <- err
		if err == nil || !strings.Contains(err.Error(), "missing") {
			t.Errorf("Run: %v, want the failed start", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case <-h.ready:
		t.Error("Ready called though no worker started")
	default:
	}
}

func TestBackoff(t *testing.T) {
	c := Config{}
	c.defaults()
	want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	for f, w := range want {
		if got := c.Backoff(f); got != w {
			t.Errorf("Backoff(%d) = %v, want %v", f, got, w)
		}
	}
	if got := c.Backoff(100); got != DefaultBackoffMax {
		t.Errorf("Backoff(100) = %v, want the cap %v", got, DefaultBackoffMax)
	}
}

// A worker that stops answering heartbeats (stopped with SIGSTOP: it runs
// and holds the listener) is said to be unresponsive, then killed and
// replaced at the heartbeat timeout, its end counted as a failure and
// recorded as unresponsive; the next worker answers the connection that
// waited meanwhile.
func TestRunReplacesAnUnresponsiveWorker(t *testing.T) {
	h := newHarness(t, "serve", func(c *Config) { c.HeartbeatTimeout = time.Second })
	<-h.ready
	first := h.waitStatus("serving", func(s *Status) bool { return s.State == StateServing && s.Worker != nil })
	if first.HeartbeatTimeout != Duration(time.Second) {
		t.Errorf("status %+v: want the heartbeat timeout", first)
	}
	// Past a few heartbeats, the worker that answered them still serves.
	time.Sleep(3 * HeartbeatInterval(time.Second))
	if s, _ := ReadStatus(h.status); s.State != StateServing || s.Worker.PID != first.Worker.PID {
		t.Fatalf("a worker that answers its heartbeats: %+v", s)
	}
	syscall.Kill(first.Worker.PID, syscall.SIGSTOP)
	stopped := time.Now()
	waitStopped(t, first.Worker.PID)
	answered := make(chan int, 1)
	go func() { answered <- h.ask() }()
	u := h.waitStatus("unresponsive", func(s *Status) bool { return s.State == StateUnresponsive })
	// Unresponsive since the first heartbeat it left unanswered: one
	// sent after the stop, or just before it.
	if u.Worker == nil || u.Worker.PID != first.Worker.PID || u.Unresponsive == nil ||
		u.Unresponsive.Before(stopped.Add(-2*HeartbeatInterval(time.Second))) {
		t.Errorf("unresponsive status %+v", u)
	}
	s := h.waitStatus("serving a second worker", func(s *Status) bool {
		return s.State == StateServing && s.Worker != nil && s.Worker.PID != first.Worker.PID
	})
	took := time.Since(stopped)
	if s.Restarts != 1 || s.Failures != 1 || s.LastExit == nil || !strings.HasPrefix(s.LastExit.Reason, "unresponsive: answered no heartbeat for ") ||
		s.LastExit.PID != first.Worker.PID || s.Unresponsive != nil {
		t.Errorf("after the stop: %+v, last exit %+v", s, s.LastExit)
	}
	if took < time.Second {
		t.Errorf("replaced %v after the stop, before the timeout", took)
	}
	if alive(first.Worker.PID) {
		t.Errorf("the unresponsive worker %d still runs", first.Worker.PID)
	}
	select {
	case pid := <-answered:
		if pid != s.Worker.PID {
			t.Errorf("the connection made while the worker was stopped was answered by %d, want the new worker %d", pid, s.Worker.PID)
		}
	case <-time.After(30 * time.Second):
		t.Error("the connection made while the worker was stopped was not answered")
	}
}

// waitStopped waits until the kernel has process pid stopped (the
// signal is delivered when it next runs).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if i := strings.LastIndexByte(string(data), ')'); err == nil && i > 0 && i+2 < len(data) && data[i+2] == 'T' {
			return
		}
	}
	t.Fatalf("process %d never stopped", pid)
}

// A worker that misses heartbeats for less than the timeout and then
// answers again is said to be unresponsive, then serving again, and is
// not replaced.
func TestRunUnresponsiveWorkerRecovers(t *testing.T) {
	h := newHarness(t, "serve", func(c *Config) { c.HeartbeatTimeout = 3 * time.Second })
	<-h.ready
	first := h.waitStatus("serving", func(s *Status) bool { return s.State == StateServing && s.Worker != nil })
	syscall.Kill(first.Worker.PID, syscall.SIGSTOP)
	waitStopped(t, first.Worker.PID)
	h.waitStatus("unresponsive", func(s *Status) bool { return s.State == StateUnresponsive })
	syscall.Kill(first.Worker.PID, syscall.SIGCONT)
	s := h.waitStatus("serving again", func(s *Status) bool { return s.State == StateServing })
	if s.Worker == nil || s.Worker.PID != first.Worker.PID || s.Restarts != 0 || s.LastExit != nil || s.Unresponsive != nil {
		t.Errorf("after it answered again: %+v", s)
	}
	if pid := h.ask(); pid != first.Worker.PID {
		t.Errorf("answered by %d, want the first worker %d", pid, first.Worker.PID)
	}
}

// A worker's silence counts from the first heartbeat it left unanswered,
// judged once the answers that came are read: a supervisor held up for an
// hour (as a stopped supervisor or a paused machine is) finds the answer
// to what it sent before and does not take its own pause for the
// worker's; a worker that stops answering is silent from the next
// heartbeat on.
func TestHeartbeatSilence(t *testing.T) {
	hb, err := newHeartbeat()
	if err != nil {
		t.Fatal(err)
	}
	defer hb.close()
	answering := make(chan bool, 1)
	answering <- true
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := hb.worker.Read(buf)
			if err != nil {
				return
			}
			on := <-answering
			answering <- on
			if on {
				hb.worker.Write(buf[:n])
			}
		}
	}()
	waitAnswered := func() {
		fds := []unix.PollFd{{Fd: int32(hb.own), Events: unix.POLLIN}}
		unix.Poll(fds, 5000)
	}
	t0 := time.Now()
	if s := hb.beat(t0); s != 0 {
		t.Errorf("first heartbeat: silence %v", s)
	}
	waitAnswered()
	if s := hb.beat(t0.Add(time.Hour)); s != 0 {
		t.Errorf("an hour later, its answer waiting: silence %v", s)
	}
	waitAnswered()
	<-answering
	answering <- false
	if s := hb.beat(t0.Add(time.Hour + time.Second)); s != 0 {
		t.Errorf("answered the last one: silence %v", s)
	}
	if s := hb.beat(t0.Add(time.Hour + 4*time.Second)); s != 3*time.Second {
		t.Errorf("silent since the heartbeat 3s ago: silence %v", s)
	}
	if got := hb.since(); !got.Equal(t0.Add(time.Hour + time.Second).UTC()) {
		t.Errorf("unresponsive since %v, want the first heartbeat it left unanswered", got)
	}
}
