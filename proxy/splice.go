package proxy

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The relay's own splice loop. Go's io.Copy between two *net.TCPConn also
// splices, but it parks on the destination until its pipe is empty while
// the runtime keeps the source armed in its edge-triggered epoll set: with a
// slow reader (a TLS client decrypting on a busy machine) every segment that
// arrives from upstream meanwhile wakes the netpoller for nothing. Measured
// per GB relayed on one such stream: 28-46k epoll waits and 24-41k context
// switches. This loop raises the source's SO_RCVLOWAT while it waits for the
// destination, so those arrivals stay silent until half the source's buffer
// is queued, tops the pipe up before it sleeps, and lowers the mark again
// before it waits for the source.
const (
	// splicePipeSize is what a direction's pipe grows to once one splice
	// moves a quarter of its default 64 KiB: the kernel's default
	// /proc/sys/fs/pipe-max-size, and the size Go's own splice uses.
	splicePipeSize = 1 << 20
	// maxSpliceLowat bounds the source's SO_RCVLOWAT while the loop waits
	// for the destination (the kernel caps it further at half of
	// tcp_rmem's maximum).
	maxSpliceLowat = 16 << 20
)

// splicePipe is a non-blocking pipe that carries one direction's bytes.
type splicePipe struct {
	r, w    int
	size    int // its capacity
	cleanup runtime.Cleanup
}

// splicePipes keeps empty pipes for the next connection, as Go's own splice
// does: a connection then costs no pipe(2), fcntl(2) and close(2) calls.
// A pipe the pool drops is closed by its cleanup.
var splicePipes sync.Pool

func getSplicePipe() (*splicePipe, error) {
	if p, ok := splicePipes.Get().(*splicePipe); ok {
		return p, nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	p := &splicePipe{r: fds[0], w: fds[1]}
	size, err := unix.FcntlInt(uintptr(p.r), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		size = 64 << 10
	}
	p.size = size
	p.cleanup = runtime.AddCleanup(p, func(fds [2]int) {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}, fds)
	return p, nil
}

// put returns p to the pool if it is empty, and closes it otherwise.
func (p *splicePipe) put(empty bool) {
	if empty {
		splicePipes.Put(p)
		return
	}
	p.cleanup.Stop()
	unix.Close(p.r)
	unix.Close(p.w)
}

// splicer moves one direction of a relayed connection through a pipe of
// its own, never through user space.
type splicer struct {
	src, dst       syscall.RawConn
	pipe           *splicePipe
	inPipe         int        // bytes in the pipe
	lowat          bool       // the source's SO_RCVLOWAT is raised
	srcDone        bool       // the source reached EOF or failed
	bulk           *bulkSched // counts the bytes written; nil: nothing counts
	srcErr, dstErr error
	written        int64 // bytes the destination took
}

// errNoSplice means the connections or the kernel do not allow the splice
// loop; the caller falls back to io.Copy.
var errNoSplice = errors.New("splice loop unavailable")

// spliceCopy copies src to dst until src reaches EOF or either fails, and
// returns the bytes written to dst. It returns errNoSplice, having moved no
// byte, when it cannot splice (no raw connection, no pipe). bulk, if not
// nil, counts the bytes written.
func spliceCopy(dst, src *net.TCPConn, bulk *bulkSched) (int64, error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return 0, errNoSplice
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return 0, errNoSplice
	}
	p, err := getSplicePipe()
	if err != nil {
		return 0, errNoSplice
	}
	s := &splicer{src: srcRC, dst: dstRC, pipe: p, bulk: bulk}
	defer func() { p.put(s.inPipe == 0) }()
	return s.run()
}

// run alternates fill and pump until the source has ended and the pipe is
// empty, or either side fails.
func (s *splicer) run() (int64, error) {
	for {
		if s.inPipe == 0 {
			if s.srcDone {
				return s.written, s.srcErr
			}
			if err := s.fill(); err != nil {
				// The source's connection was closed under us.
				return s.written, err
			}
			continue
		}
		if err := s.pump(); err != nil {
			return s.written, err
		}
		if s.dstErr != nil {
			return s.written, s.dstErr
		}
	}
}

// fill waits until the source has bytes (or ends) and moves what it has into
// the pipe.
func (s *splicer) fill() error {
	return s.src.Read(func(fd uintptr) bool {
		if s.spliceIn(int(fd)) != unix.EAGAIN {
			return true
		}
		if !s.lowat {
			return false
		}
		// Wake up for the first byte again. Bytes that came in since
		// the splice above signalled nothing: look once more rather
		// than count on the kernel to signal them now.
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
		s.lowat = false
		return s.spliceIn(int(fd)) != unix.EAGAIN
	})
}

// spliceIn moves what the source holds into the pipe, without waiting. It
// returns EAGAIN if the source had nothing; EOF and other errors end the
// source (s.srcDone).
func (s *splicer) spliceIn(fd int) error {
	for {
		n, err := rawSplice(fd, s.pipe.w, s.pipe.size-s.inPipe, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return err
		case err != nil:
			s.srcDone, s.srcErr = true, err
			return err
		case n == 0:
			s.srcDone = true
			return nil
		}
		s.inPipe += int(n)
		if s.pipe.size < splicePipeSize && int(n) >= s.pipe.size/4 {
			// A bulk transfer (the pipe's slots may fill before its
			// bytes do): a larger pipe moves more per wakeup. A new
			// pipe starts at the default, so connections that never
			// carry bulk never hold a large one.
			if sz, err := unix.FcntlInt(uintptr(s.pipe.r), unix.F_SETPIPE_SZ, splicePipeSize); err == nil {
				s.pipe.size = sz
			}
		}
		return nil
	}
}

// pump moves the pipe's bytes to the destination, waiting for it to take
// them. While it waits, it tops the pipe up from the source and raises the
// source's SO_RCVLOWAT so that its arrivals do not wake the process.
func (s *splicer) pump() error {
	return s.dst.Write(func(fd uintptr) bool {
		for s.inPipe > 0 {
			n, err := rawSplice(s.pipe.r, int(fd), s.inPipe, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if n > 0 {
				s.inPipe -= int(n)
				s.written += n
				s.bulk.add(n)
				continue
			}
			switch err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				s.whileBlocked()
				return false
			case nil:
				err = syscall.EPIPE // cannot happen: the pipe is ours and not empty
			}
			s.dstErr = err
			return true
		}
		return true
	})
}

// whileBlocked runs when the destination is full: it moves what the source
// has into the pipe without waiting, and silences the source until the
// destination drains.
func (s *splicer) whileBlocked() {
	s.src.Control(func(fd uintptr) {
		if !s.srcDone && s.inPipe < s.pipe.size {
			s.spliceIn(int(fd))
		}
		if !s.lowat && !s.srcDone {
			// Below the cap, a low-water mark no larger than half the
			// receive buffer leaves the buffer as the kernel sized it.
			rcvbuf, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
			if err != nil {
				return
			}
			lowat := min(max(rcvbuf/2, 1), maxSpliceLowat)
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, lowat) == nil {
				s.lowat = true
			}
		}
	})
}

// rawSplice is splice(2) without the runtime's system-call bookkeeping
// (entersyscall wakes the runtime's monitor thread after an idle spell; with
// unix.Splice the relay made twice the context switches per GB): the pipe
// and both sockets are non-blocking, so the call never blocks.
func rawSplice(rfd, wfd, n, flags int) (int64, error) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, uintptr(rfd), 0, uintptr(wfd), 0, uintptr(n), uintptr(flags))
	if e != 0 {
		return 0, e
	}
	return int64(r), nil
}
