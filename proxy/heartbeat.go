package proxy

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/internal/testhook"
	"github.com/doorman-net/doorman/proxy/relayloop"
)

// Heartbeats. A worker that stops serving without dying (stopped with
// SIGSTOP, deadlocked, its relay loop wedged in a call that never
// returns) still holds its listeners and runs, so nothing that looks at
// processes notices it, while every connection of its sandbox hangs. Its
// supervisor sends it a heartbeat every second or so on a socket (see
// package supervise) and replaces it once it answers none for the
// heartbeat timeout. The answer comes from the relay loop's goroutine, the
// one that accepts, decides the common case and relays every established
// connection: a heartbeat answered proves that the loop still gets round
// to what is ready, not only that the process runs.

// AnswerHeartbeats answers the heartbeats on fd, a SOCK_SEQPACKET socket
// whose other end the supervisor holds: each message is sent back as it
// came, from the relay loop's goroutine (from a goroutine of its own where
// the loop cannot run). It takes fd over; once the supervisor's end is
// closed, it stops and closes fd. Call it once the proxy serves.
func (p *Proxy) AnswerHeartbeats(fd int) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return err
	}
	l := p.relayLoop()
	if l == nil {
		go answerBlocking(fd)
		return nil
	}
	if _, err := l.Watch(fd, unix.EPOLLIN, func(w *relayloop.Watcher, _ uint32) { answerReady(w, fd) }); err != nil {
		unix.Close(fd)
		return err
	}
	if testhook.WedgeLoop() {
		wedgeOnSignal(l)
	}
	return nil
}

// answerReady sends back what fd holds, on the loop; at the end of the
// supervisor's end it stops watching fd and closes it.
func answerReady(w *relayloop.Watcher, fd int) {
	var buf [64]byte
	for {
		n, err := unix.Read(fd, buf[:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return
		case err != nil || n == 0:
			w.Stop()
			unix.Close(fd)
			return
		}
		// The supervisor reads every answer at once; one that does not
		// fit in the socket is dropped, like a late one.
		unix.Write(fd, buf[:n])
	}
}

// answerBlocking answers on a goroutine of its own, for a proxy without
// a relay loop.
func answerBlocking(fd int) {
	f := os.NewFile(uintptr(fd), "heartbeat")
	defer f.Close()
	var buf [64]byte
	for {
		n, err := f.Read(buf[:])
		if err != nil || n == 0 {
			return
		}
		f.Write(buf[:n])
	}
}

// wedgeOnSignal blocks l's goroutine for good on SIGUSR2: the test hook
// of testhook.WedgeLoopEnv.
func wedgeOnSignal(l *relayloop.Loop) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR2)
	go func() {
		<-sig
		l.Run(func() { select {} })
	}()
}
