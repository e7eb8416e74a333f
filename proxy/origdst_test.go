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
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	client := c.LocalAddr().(*net.TCPAddr).AddrPort()
	port := ln.Addr().(*net.TCPAddr).AddrPort().Port()
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
