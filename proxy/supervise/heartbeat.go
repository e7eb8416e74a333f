package supervise

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultHeartbeatTimeout is how long a worker may go without answering
// its supervisor's heartbeat before it is killed and replaced, unless
// Config says otherwise.
const DefaultHeartbeatTimeout = 5 * time.Second

// MinHeartbeatTimeout is the least heartbeat timeout a supervisor takes:
// below it, a worker the host starves of CPU for a moment would be
// killed.
const MinHeartbeatTimeout = time.Second

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
type heartbeat struct {
	own    *os.File // the supervisor's end
	worker *os.File // the worker's end, closed once it has started
	// last is when the worker last answered (UnixNano), or when it
	// began to serve.
	last atomic.Int64
	seq  byte
}

// newHeartbeat makes the socket pair of one worker's heartbeat.
func newHeartbeat() (*heartbeat, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: socketpair: %w", err)
	}
	// The supervisor's end goes to the runtime's poller, so that its
	// reader parks rather than blocks a thread.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	return &heartbeat{own: os.NewFile(uintptr(fds[0]), "heartbeat"), worker: os.NewFile(uintptr(fds[1]), "heartbeat-worker")}, nil
}

// start begins to count the worker's silence from now, and reads its
// answers until the socket is closed.
func (h *heartbeat) start() {
	h.last.Store(time.Now().UnixNano())
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := h.own.Read(buf); err != nil {
				return
			}
			h.last.Store(time.Now().UnixNano())
		}
	}()
}

// ping sends the next heartbeat without waiting: a worker that reads none
// lets them pile up in the socket until it is full, and then they are
// dropped, which is no different for its silence.
func (h *heartbeat) ping() {
	h.seq++
	rc, err := h.own.SyscallConn()
	if err != nil {
		return
	}
	rc.Write(func(fd uintptr) bool {
		for {
			_, err := unix.Write(int(fd), []byte{h.seq})
			if err != syscall.EINTR {
				return true
			}
		}
	})
}

// silence is how long the worker has not answered, as of now.
func (h *heartbeat) silence(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, h.last.Load()))
}

// lastAnswer is when the worker last answered.
func (h *heartbeat) lastAnswer() time.Time { return time.Unix(0, h.last.Load()).UTC() }

// close closes both ends that are still open here.
func (h *heartbeat) close() {
	h.own.Close()
	h.worker.Close()
}
