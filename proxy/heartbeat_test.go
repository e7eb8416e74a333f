package proxy

import (
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// heartbeatPair is the supervisor's end of a heartbeat socket whose other
// end p answers.
func heartbeatPair(t *testing.T, p *Proxy) int {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]) })
	if err := p.AnswerHeartbeats(fds[1]); err != nil {
		t.Fatal(err)
	}
	return fds[0]
}

// beat sends one heartbeat on fd and says whether it was answered within
// wait.
func beat(t *testing.T, fd int, seq byte, wait time.Duration) bool {
	t.Helper()
	if _, err := unix.Write(fd, []byte{seq}); err != nil {
		t.Fatal(err)
	}
	return answered(t, fd, seq, wait)
}

// answered waits up to wait for the answer seq on fd.
func answered(t *testing.T, fd int, seq byte, wait time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(wait.Milliseconds())); err != nil || n == 0 {
		return false
	}
	var buf [8]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n != 1 || buf[0] != seq {
		t.Fatalf("answer %v, %v; want [%d]", buf[:max(n, 0)], err, seq)
	}
	return true
}

// Heartbeats are answered by the relay loop: while its goroutine is held
// up, none is, and the one that waited is answered once it goes on.
func TestHeartbeatsProveTheLoop(t *testing.T) {
	p := New(Config{Sandbox: "t"})
	defer p.Shutdown(t.Context())
	l := p.relayLoop()
	if l == nil {
		t.Skip("no relay loop here")
	}
	fd := heartbeatPair(t, p)
	for i := range byte(3) {
		if !beat(t, fd, i, 5*time.Second) {
			t.Fatalf("heartbeat %d not answered", i)
		}
	}
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free() // before Shutdown, which waits for the loop
	held := make(chan struct{})
	l.Run(func() { close(held); <-release })
	<-held
	if beat(t, fd, 3, 300*time.Millisecond) {
		t.Fatal("a heartbeat answered while the relay loop was held up")
	}
	free()
	if !answered(t, fd, 3, 5*time.Second) {
		t.Fatal("the heartbeat that waited was not answered once the loop went on")
	}
	if !beat(t, fd, 4, 5*time.Second) {
		t.Fatal("heartbeat not answered after the loop went on")
	}
}
