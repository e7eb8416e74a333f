package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestOriginalDstFDNotRedirected: a connection made straight to a
// listener is refused as not redirected, whether originalDstFD knows the
// listener's port (the loop's accept, which then compares addresses only
// for a destination on that port) or not.
func TestOriginalDstFDNotRedirected(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (conntrack)")
	}
	c, s := tcpPair(t)
	client := c.LocalAddr().(*net.TCPAddr).AddrPort()
	port := s.LocalAddr().(*net.TCPAddr).AddrPort().Port() // the listener's
	rc, err := s.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, hint := range []uint16{port, 0} {
		var dstErr error
		rc.Control(func(fd uintptr) { _, dstErr = originalDstFD(int(fd), client, hint) })
		if errors.Is(dstErr, syscall.ENOENT) {
			t.Skipf("conntrack does not track loopback here: %v", dstErr)
		}
		if !errors.Is(dstErr, errNotRedirected) {
			t.Errorf("listener port %d: err %v, want %v", hint, dstErr, errNotRedirected)
		}
	}
}
