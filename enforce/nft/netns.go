package nft

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
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
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())), nftables.AsLasting())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("nftables connection into %s: %w", path, err)
	}
	return &NetNS{File: f, Conn: conn}, nil
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
