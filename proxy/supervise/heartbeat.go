package supervise

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/spec"
)

// DefaultHeartbeatTimeout is how long a worker may go without answering
// its supervisor's heartbeat before it is killed and replaced, unless
// Config says otherwise: the default of the limits.heartbeatTimeout
// setting.
const DefaultHeartbeatTimeout = spec.DefaultHeartbeatTimeout

// MinHeartbeatTimeout is the least heartbeat timeout a supervisor takes:
// below it, a worker the host starves of CPU for a moment would be
// killed.
const MinHeartbeatTimeout = spec.MinHeartbeatTimeout

// HeartbeatInterval is how often a supervisor whose workers have
// timeout to answer sends a heartbeat: five a timeout, at most one a
// second.
func HeartbeatInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/5, 10*time.Millisecond), time.Second)
}

// heartbeat is the supervisor's end of one worker's heartbeat: a
// SOCK_SEQPACKET socket pair whose other end the worker inherits. The
// supervisor sends one byte every interval; the worker sends each back
// from the goroutine that relays its connections (see
// proxy.Proxy.AnswerHeartbeats), so a worker that is stopped (SIGSTOP),
// deadlocked, or whose relay loop is wedged answers nothing, although it
// runs and holds its listeners.
//
// Silence is counted from the first heartbeat sent that no answer has
// followed, and the answers are read just before it is judged, on the
// supervisor's one goroutine: a supervisor that was itself held up (a
// stopped or starved process, a paused machine) sent nothing meanwhile,
// and finds the answers to what it did send, so it never takes its own
// pause for its worker's.
type heartbeat struct {
	own    int      // the supervisor's end, non-blocking
	worker *os.File // the worker's end, closed once it has started
	seq    byte
	// pending is when the oldest heartbeat not answered yet was sent;
	// zero if none is.
	pending time.Time
	closed  bool
}

// newHeartbeat makes the socket pair of one worker's heartbeat.
func newHeartbeat() (*heartbeat, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: socketpair: %w", err)
	}
	// The worker's end blocks, as an inherited descriptor should; the
	// worker sets it as it needs.
	if err := unix.SetNonblock(fds[1], false); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	return &heartbeat{own: fds[0], worker: os.NewFile(uintptr(fds[1]), "heartbeat-worker")}, nil
}

// beat runs one heartbeat at now: it reads the answers that came, and
// returns how long the worker has left a heartbeat unanswered (0 if it
// answered everything it was sent), then sends the next without waiting
// (a worker that reads none lets them pile up in the socket until it is
// full, and then they are dropped, which is no different for its
// silence).
func (h *heartbeat) beat(now time.Time) (silence time.Duration) {
	var buf [64]byte
	for {
		n, err := unix.Read(h.own, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			break
		}
		h.pending = time.Time{}
	}
	if !h.pending.IsZero() {
		silence = now.Sub(h.pending)
	} else {
		h.pending = now
	}
	h.seq++
	for {
		if _, err := unix.Write(h.own, []byte{h.seq}); err != unix.EINTR {
			break
		}
	}
	return silence
}

// since is when the oldest heartbeat not answered yet was sent.
func (h *heartbeat) since() time.Time { return h.pending.UTC() }

// close closes both ends that are still open here. Only the supervisor's
// goroutine calls it, once the worker has ended.
func (h *heartbeat) close() {
	if h.closed {
		return
	}
	h.closed = true
	unix.Close(h.own)
	h.worker.Close()
}
