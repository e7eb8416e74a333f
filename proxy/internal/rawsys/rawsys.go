// Package rawsys makes the few system calls of the relay loop's hot path
// without the Go runtime's system-call bookkeeping.
//
// syscall.Syscall tells the scheduler that the thread may block
// (entersyscall, exitsyscall): the runtime's monitor thread wakes up to
// watch it, and a call that takes longer than 20 µs has its P handed to
// another thread. Every call here is made on a non-blocking descriptor
// and returns at once, so that bookkeeping buys nothing, and with one P
// (a sandbox's proxy runs with GOMAXPROCS=1) it costs context switches:
// proxy/splice.go measured twice the switches per GB with unix.Splice.
// x/sys/unix's RawSyscall is the same call without it.
package rawsys

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// Splice is a non-blocking splice(2) of up to n bytes from rfd to wfd
// (SPLICE_F_MOVE|SPLICE_F_NONBLOCK).
func Splice(rfd, wfd, n int) (int64, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(rfd), 0, uintptr(wfd), 0, uintptr(n),
		uintptr(unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK))
	return int64(r), errnoErr(e)
}

// Peek copies what the socket fd has received into b without consuming
// it (recvfrom with MSG_PEEK|MSG_DONTWAIT).
func Peek(fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(p), uintptr(len(b)),
		uintptr(unix.MSG_PEEK|unix.MSG_DONTWAIT), 0, 0)
	return int(r), errnoErr(e)
}

// Shutdown is shutdown(2).
func Shutdown(fd, how int) error {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), uintptr(how), 0)
	return errnoErr(e)
}

// Close is close(2).
func Close(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return errnoErr(e)
}

// EpollCtl is epoll_ctl(2).
func EpollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return errnoErr(e)
}

// EpollWait is epoll_wait(2) with a zero timeout: it never blocks.
func EpollWait(epfd int, events []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	return int(r), errnoErr(e)
}

// Accept4 accepts a connection on the non-blocking listening socket fd,
// returning a non-blocking, close-on-exec socket and its peer's address
// in raw form (see SockaddrAddr).
func Accept4(fd int, sa *unix.RawSockaddrAny) (int, error) {
	l := uint32(unsafe.Sizeof(*sa))
	r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(sa)), uintptr(unsafe.Pointer(&l)),
		uintptr(unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC), 0, 0)
	return int(r), errnoErr(e)
}

// Getsockname is getsockname(2): the socket's local address (AF_INET or
// AF_INET6, IPv4-mapped addresses unmapped; the zero AddrPort for any
// other family). x/sys/unix's Getsockname goes through the runtime, and
// its conversion of the address makes a second call (getsockopt
// SO_PROTOCOL), also through the runtime.
func Getsockname(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrAny
	l := uint32(unsafe.Sizeof(sa))
	_, _, e := unix.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l)))
	if e != 0 {
		return netip.AddrPort{}, e
	}
	return SockaddrAddrPort(&sa), nil
}

// SockaddrAddrPort is the address in sa (AF_INET or AF_INET6, IPv4-mapped
// addresses unmapped); the zero AddrPort for any other family.
func SockaddrAddrPort(sa *unix.RawSockaddrAny) netip.AddrPort {
	switch sa.Addr.Family {
	case unix.AF_INET:
		in := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(in.Addr), port(in.Port))
	case unix.AF_INET6:
		in := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom16(in.Addr).Unmap(), port(in.Port))
	}
	return netip.AddrPort{}
}

// port converts a port in network byte order.
func port(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// SetsockoptInt is setsockopt(2) of an int option.
func SetsockoptInt(fd, level, opt, value int) error {
	v := int32(value)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), 4, 0)
	return errnoErr(e)
}

// GetsockoptInt is getsockopt(2) of an int option.
func GetsockoptInt(fd, level, opt int) (int, error) {
	var v int32
	l := uint32(4)
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	return int(v), errnoErr(e)
}

// Socket is socket(2) for a non-blocking, close-on-exec TCP socket of a's
// family.
func Socket(a netip.Addr) (int, error) {
	family := unix.AF_INET6
	if a.Is4() {
		family = unix.AF_INET
	}
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), uintptr(unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC), uintptr(unix.IPPROTO_TCP))
	return int(r), errnoErr(e)
}

// Connect is connect(2) to to, of the family Socket chose for its address:
// on a non-blocking socket it returns EINPROGRESS, and the socket becomes
// writable once the connection is made or has failed (SO_ERROR says).
func Connect(fd int, to netip.AddrPort) error {
	var e syscall.Errno
	p := to.Port()
	pb := [2]byte{byte(p >> 8), byte(p)}
	if a := to.Addr(); a.Is4() {
		sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		sa.Port = *(*uint16)(unsafe.Pointer(&pb))
		_, _, e = unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	} else {
		sa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
		sa.Port = *(*uint16)(unsafe.Pointer(&pb))
		_, _, e = unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	}
	return errnoErr(e)
}
