package rawsys

import (
	"net"
	"net/netip"
	"testing"
)

// TestGetsockname: the raw getsockname gives the address the runtime's
// net package reports, IPv4 and IPv6.
func TestGetsockname(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v (skipped)", addr, err)
			continue
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		want := netip.MustParseAddrPort(c.LocalAddr().String())
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got netip.AddrPort
		var gerr error
		rc.Control(func(fd uintptr) { got, gerr = Getsockname(int(fd)) })
		c.Close()
		ln.Close()
		if gerr != nil {
			t.Fatalf("%s: %v", addr, gerr)
		}
		if got != want {
			t.Fatalf("%s: Getsockname = %v, want %v", addr, got, want)
		}
	}
	if _, err := Getsockname(-1); err == nil {
		t.Fatal("Getsockname(-1) reported no error")
	}
}
