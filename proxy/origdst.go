package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/internal/rawsys"
)

// soOriginalDst is SO_ORIGINAL_DST (IPv4, level SOL_IP) and
// IP6T_SO_ORIGINAL_DST (IPv6, level SOL_IPV6): both are 80 in the kernel
// headers, and x/sys does not export them.
const soOriginalDst = 80

// errNotRedirected is the error of a connection made straight to one of
// the proxy's listeners: its original destination is the listener itself.
var errNotRedirected = errors.New("not redirected: a connection straight to the proxy's listener")

// OriginalDst returns the destination a redirected connection was addressed
// to before nftables rewrote it, read from conntrack through
// SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6). A connection
// that nothing redirected (its original destination is the address it
// was accepted on) is an error: the host-side listeners are bound to the
// runtime namespace's wildcard address, and only the host-side layer's
// redirect may bring a connection to them.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	var dst netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if local.Addr().Is4() || local.Addr().Is4In6() {
			dst, serr = originalDst4(int(fd))
			if serr == nil {
				return
			}
		}
		dst, serr = originalDst6(int(fd))
	})
	if err == nil {
		err = serr
	}
	if err == nil && dst == unmapped(local) {
		err = errNotRedirected
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: %w", c.RemoteAddr(), err)
	}
	return dst, nil
}

// unmapped is ap with an IPv4-mapped address as IPv4.
func unmapped(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// originalDstFD is OriginalDst for a bare socket; client is its peer and
// port the port of the listening socket that accepted it (0: unknown). A
// connection made straight to the listener has the listener's port as its
// original destination's, so only such a destination (or any, when port
// is 0) costs a getsockname(2) to compare it with the socket's own
// address: every other one was redirected.
func originalDstFD(fd int, client netip.AddrPort, port uint16) (netip.AddrPort, error) {
	dst, err := originalDstRaw(fd, client)
	if err == nil && (port == 0 || dst.Port() == port) {
		if local, serr := rawsys.Getsockname(fd); serr == nil && dst == local {
			err = errNotRedirected
		}
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: %w", client, err)
	}
	return dst, nil
}

func originalDstRaw(fd int, client netip.AddrPort) (netip.AddrPort, error) {
	if client.Addr().Is4() {
		if dst, err := originalDst4(fd); err == nil {
			return dst, nil
		}
	}
	return originalDst6(fd)
}

func originalDst4(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet4
	l := uint32(unsafe.Sizeof(sa))
	if err := getsockopt(fd, unix.SOL_IP, soOriginalDst, unsafe.Pointer(&sa), &l); err != nil {
		return netip.AddrPort{}, err
	}
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}

func originalDst6(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6
	l := uint32(unsafe.Sizeof(sa))
	if err := getsockopt(fd, unix.SOL_IPV6, soOriginalDst, unsafe.Pointer(&sa), &l); err != nil {
		return netip.AddrPort{}, err
	}
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port), nil
}

func getsockopt(fd, level, name int, val unsafe.Pointer, vallen *uint32) error {
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(val), uintptr(unsafe.Pointer(vallen)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
