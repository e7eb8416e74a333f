package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doorman-net/doorman/internal/procstat"
	"github.com/doorman-net/doorman/internal/testhook"
	"github.com/doorman-net/doorman/proxy/supervise"
	"github.com/doorman-net/doorman/sandbox"
)

// livenessTimeout is the heartbeat timeout of the liveness tests'
// sandboxes (limits.heartbeatTimeout).
const livenessTimeout = 6 * time.Second

// unresponsiveBed is a CNI sandbox with the liveness tests' heartbeat
// timeout that reaches the allowed name.
func unresponsiveBed(t *testing.T) (*cniEnv, *container, *sandbox.State) {
	t.Helper()
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"limits": map[string]any{"heartbeatTimeout": livenessTimeout.String()}}))
	if !e.reaches(c, "https://"+apiName+"/", apiName) {
		t.Fatal("allowed name not reached")
	}
	first := e.state(c)
	if h, _ := e.lsColumns(c); h != "up" {
		t.Fatalf("ls before: health %s, want up", h)
	}
	if err := e.check(c); err != nil {
		t.Fatalf("CHECK before: %v", err)
	}
	return e, c, first
}

// assertNotUp checks that ls, show and CHECK say the worker of c serves
// nothing, with why (a part of show's line).
func (e *cniEnv) assertNotUp(c *container, why string) {
	e.t.Helper()
	if h, _ := e.lsColumns(c); h != "unresponsive" {
		e.t.Errorf("ls with the worker serving nothing: health %s, want unresponsive", h)
	}
	if p := e.lsProxy(c); !strings.Contains(p.Problem, "unresponsive") {
		e.t.Errorf("ls -o json proxy: %+v, want the problem", p)
	}
	if show := e.mustCLI("show", c.rt.ContainerID).stdout; !strings.Contains(show, "UNRESPONSIVE") || !strings.Contains(show, why) {
		e.t.Errorf("show with the worker serving nothing, want UNRESPONSIVE and %q:\n%s", why, show)
	} else {
		e.t.Logf("show:\n%s", show)
	}
	if err := e.check(c); err == nil || !strings.Contains(err.Error(), "unresponsive") {
		e.t.Errorf("CHECK with the worker serving nothing: %v, want it to fail saying so", err)
	}
}

// assertReplaced waits for the worker that replaces first's, and checks
// that the supervisor says it replaced it for not answering, that the
// connection made meanwhile (done) was served by the new worker, that a
// new one is, and that ls, CHECK are well again.
func (e *cniEnv) assertReplaced(c *container, first *sandbox.State, since time.Time, waited <-chan bool) {
	e.t.Helper()
	s := e.waitState(c, "a worker in place of the unresponsive one", servingOther(first.PID))
	st := s.Supervision()
	e.t.Logf("worker %d replaced by %d %v after it stopped serving (heartbeat timeout %v)", first.PID, s.PID,
		st.LastExit.Time.Sub(since).Round(10*time.Millisecond), livenessTimeout)
	if st.Restarts != 1 || st.LastExit == nil || st.LastExit.PID != first.PID ||
		!strings.HasPrefix(st.LastExit.Reason, "unresponsive: answered no heartbeat for ") {
		e.t.Errorf("supervision after the replacement: %+v, last exit %+v", st, st.LastExit)
	}
	if st.LastExit != nil && st.LastExit.Time.Sub(since) < livenessTimeout-2*time.Second {
		e.t.Errorf("replaced %v after it stopped serving, before the heartbeat timeout %v", st.LastExit.Time.Sub(since), livenessTimeout)
	}
	waitGone(e.t, first.PID)
	if !<-waited {
		e.t.Error("the connection made while the worker served nothing was not served by the next one")
	}
	if !e.reaches(c, "https://"+apiName+"/after", apiName) {
		e.t.Error("allowed name not reached through the new worker")
	}
	if h, r := e.lsColumns(c); h != "up" || r != "1" {
		e.t.Errorf("ls after the replacement: health %s, restarts %s; want up, 1", h, r)
	}
	if show := e.mustCLI("show", c.rt.ContainerID).stdout; !strings.Contains(show, "unresponsive: answered no heartbeat") {
		e.t.Errorf("show does not say why the last proxy ended:\n%s", show)
	}
	if err := e.check(c); err != nil {
		e.t.Errorf("CHECK with the new worker serving: %v", err)
	}
}

// connectMeanwhile makes a connection to the allowed name (by address:
// the DNS filter is the worker's too) that waits for a worker to serve it,
// and says on the channel whether it was served.
func (e *cniEnv) connectMeanwhile(c *container) <-chan bool {
	done := make(chan bool, 1)
	go func() {
		r := curl(e.t, c.ns, e.caFile, "--max-time", "18", "--resolve", apiName+":443:"+apiAddr4.String(), "https://"+apiName+"/meanwhile")
		done <- r.exit == 0 && strings.HasPrefix(r.stdout, apiName+" ")
	}()
	return done
}

// TestCNISupervisedStopped: a worker stopped with SIGSTOP (it runs and
// holds its listeners, and serves nothing) is shown as unresponsive by ls
// and show, and fails CHECK, at once; its supervisor, which it no longer
// answers, kills it at the heartbeat timeout and starts another, which
// serves the connection that waited meanwhile and new ones.
func TestCNISupervisedStopped(t *testing.T) {
	e, c, first := unresponsiveBed(t)
	if err := syscall.Kill(first.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { syscall.Kill(first.PID, syscall.SIGKILL) })
	// (Stopped once the kernel has delivered the signal: until then it
	// may still take a connection.)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, err := procstat.Read(first.PID); err == nil && st.State == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %d never stopped", first.PID)
		}
	}
	waited := e.connectMeanwhile(c)
	e.assertNotUp(c, "stopped (SIGSTOP")
	// The supervisor finds it too: its heartbeats go unanswered.
	e.waitState(c, "the supervisor saying the worker is unresponsive", func(s *sandbox.State) bool {
		st := s.Supervision()
		return st != nil && st.State == supervise.StateUnresponsive && st.Unresponsive != nil
	})
	e.assertReplaced(c, first, stopped, waited)
}

// TestCNISupervisedWedgedLoop: a worker whose relay loop is wedged (a
// test hook blocks the loop's goroutine: the process runs, its other
// goroutines too) answers no heartbeat, since the loop answers them; ls,
// show and CHECK say so before the supervisor replaces it at the
// heartbeat timeout, and the next worker serves.
func TestCNISupervisedWedgedLoop(t *testing.T) {
	t.Setenv(testhook.WedgeLoopEnv, "1") // the plugin passes it on to the supervisor, the supervisor to its workers
	e, c, first := unresponsiveBed(t)
	if err := syscall.Kill(first.PID, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	wedged := time.Now()
	s := e.waitState(c, "the supervisor saying the worker is unresponsive", func(s *sandbox.State) bool {
		st := s.Supervision()
		return st != nil && st.State == supervise.StateUnresponsive && st.Worker != nil && st.Worker.PID == first.PID
	})
	// (Not before: until the loop is wedged it would take the
	// connection, which dies with it.)
	waited := e.connectMeanwhile(c)
	if !s.Serving() {
		t.Fatalf("the wedged worker %d does not run", first.PID)
	}
	e.assertNotUp(c, "answered no heartbeat")
	e.assertReplaced(c, first, wedged, waited)
}
