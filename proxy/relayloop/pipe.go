package relayloop

import (
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/internal/rawsys"
)

// pipeMaxSize is what a pipe grows to once one splice fills a quarter of
// it: the kernel's default /proc/sys/fs/pipe-max-size, and the size Go's own
// splice uses. A new pipe starts at the default 64 KiB, so directions that
// never carry bulk never hold a large one.
const pipeMaxSize = 1 << 20

// pipe is a non-blocking pipe that carries one direction's bytes between
// splices.
type pipe struct {
	r, w int
	size int // its capacity
}

func newPipe() (*pipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	p := &pipe{r: fds[0], w: fds[1], size: 64 << 10}
	if sz, err := unix.FcntlInt(uintptr(p.r), unix.F_GETPIPE_SZ, 0); err == nil {
		p.size = sz
	}
	return p, nil
}

// grow enlarges the pipe after a splice of n bytes that took a quarter of
// it or more (bulk: a larger pipe moves more per wakeup).
func (p *pipe) grow(n int) {
	if p.size >= pipeMaxSize || n < p.size/4 {
		return
	}
	if sz, err := unix.FcntlInt(uintptr(p.r), unix.F_SETPIPE_SZ, pipeMaxSize); err == nil {
		p.size = sz
	}
}

func (p *pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// rawSplice is a non-blocking splice(2) of up to n bytes (see package
// rawsys: every descriptor involved is non-blocking).
func rawSplice(rfd, wfd, n int) (int64, error) { return rawsys.Splice(rfd, wfd, n) }

// Detach takes c's socket out of the Go runtime's hands: it returns a new
// descriptor of the same socket (non-blocking, close-on-exec) and closes
// c, which takes c's own descriptor out of the runtime's netpoller. The
// socket itself stays open, held by the returned descriptor only.
func Detach(c interface {
	SyscallConn() (syscall.RawConn, error)
	Close() error
}) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	cerr := rc.Control(func(s uintptr) {
		fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	})
	if cerr != nil {
		return -1, cerr
	}
	if derr != nil {
		return -1, derr
	}
	c.Close()
	return fd, nil
}
