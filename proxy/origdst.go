package proxy

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (IPv4, level SOL_IP) and
// IP6T_SO_ORIGINAL_DST (IPv6, level SOL_IPV6): both are 80 in the kernel
// headers, and x/sys does not export them.
const soOriginalDst = 80

// OriginalDst returns the destination a redirected connection was addressed
// to before nftables rewrote it, read from conntrack through
// SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6).
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
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: %w", c.RemoteAddr(), err)
	}
	return dst, nil
}

// originalDstFD is OriginalDst for a bare socket; client is its peer.
func originalDstFD(fd int, client netip.AddrPort) (netip.AddrPort, error) {
	var dst netip.AddrPort
	var err error
	if client.Addr().Is4() {
		if dst, err = originalDst4(fd); err == nil {
			return dst, nil
		}
	}
	if dst, err = originalDst6(fd); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: %w", client, err)
	}
	return dst, nil
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
