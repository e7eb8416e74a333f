package nft

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nsGetNSType is NS_GET_NSTYPE of linux/nsfs.h (ioctl_ns(2)).
const nsGetNSType = 0xb703

// ErrNotNetNS marks a path that exists but is not a network namespace,
// e.g. a leftover mount point of a namespace that was already deleted.
var ErrNotNetNS = errors.New("not a network namespace")

// OpenNetNSFile opens the network namespace at path, or returns an error
// matching ErrNotNetNS if path is no network namespace.
func OpenNetNSFile(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), nsGetNSType)
	if err != nil || typ != unix.CLONE_NEWNET {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, ErrNotNetNS)
	}
	return f, nil
}

// NetNS is an open network namespace and a lasting nftables connection
// into it.
type NetNS struct {
	// File is the namespace, open.
	File *os.File
	// Conn is made with nftables.WithNetNSFd on File: the calling thread
	// never changes namespace.
	Conn *nftables.Conn
}

// OpenNetNS opens the network namespace at path (see OpenNetNSFile) and a
// lasting nftables connection into it.
func OpenNetNS(path string) (*NetNS, error) {
	f, err := OpenNetNSFile(path)
	if err != nil {
		return nil, err
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())), nftables.AsLasting(), nftables.WithSockOptions(bigReceiveBuffer))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("nftables connection into %s: %w", path, err)
	}
	return &NetNS{File: f, Conn: conn}, nil
}

// receiveBuffer is the receive buffer of a connection: google/nftables
// sends a batch whole and reads the kernel's acknowledgement of each of
// its messages after, so the acknowledgements of a batch wait in the
// buffer together, about a kilobyte each. The system default (net.core.
// rmem_default, 208 KiB on most systems) holds those of some 200
// messages; the first Apply of the host-side layer in a namespace sends
// more.
const receiveBuffer = 4 << 20

// bigReceiveBuffer sets the connection's receive buffer to receiveBuffer,
// past net.core.rmem_max where the caller may (CAP_NET_ADMIN, which every
// caller that changes rules holds), else as far as rmem_max allows.
func bigReceiveBuffer(c *netlink.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBuffer)
		if serr != nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, receiveBuffer)
		}
	}); err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("netlink socket: receive buffer: %w", serr)
	}
	return nil
}

// Close closes the connection and the namespace.
func (n *NetNS) Close() error {
	err := n.Conn.CloseLasting()
	return errors.Join(err, n.File.Close())
}

// IsNotExist reports whether err says that a namespace, table or chain is
// not there: the kernel answers ENOENT for a missing table or chain.
func IsNotExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT)
}
