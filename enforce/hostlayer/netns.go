package hostlayer

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsGetNSType is NS_GET_NSTYPE of linux/nsfs.h (ioctl_ns(2)).
const nsGetNSType = 0xb703

// lockTimeout bounds how long Apply, Remove and Check wait for another
// process that changes the layer in the same namespace.
const lockTimeout = 10 * time.Second

// errNotNetNS marks a path that exists but is not a network namespace,
// e.g. a leftover mount point of a namespace that was already deleted.
var errNotNetNS = errors.New("not a network namespace")

// runtimeNS is the runtime's network namespace, opened and locked, with an
// nftables connection and a netlink handle bound to it. The calling thread
// never changes namespace for either.
type runtimeNS struct {
	path string
	file *os.File
	nft  *nftables.Conn
	link *netlink.Handle
}

// openRuntimeNS opens the namespace at path and takes the layer's lock in
// it: exclusive to change the layer, shared to read it.
func openRuntimeNS(path string, exclusive bool) (_ *runtimeNS, err error) {
	f, err := openNetNSFile(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := lock(f, exclusive); err != nil {
		return nil, err
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())), nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables connection into %s: %w", path, err)
	}
	h, err := newRouteHandle(f)
	if err != nil {
		conn.CloseLasting()
		return nil, fmt.Errorf("netlink handle in %s: %w", path, err)
	}
	return &runtimeNS{path: path, file: f, nft: conn, link: h}, nil
}

// Close releases the lock and closes everything.
func (n *runtimeNS) Close() error {
	n.link.Close()
	err := n.nft.CloseLasting()
	return errors.Join(err, n.file.Close()) // closing the file drops the lock
}

// openNetNSFile opens path and checks that it is a network namespace.
func openNetNSFile(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), nsGetNSType)
	if err != nil || typ != unix.CLONE_NEWNET {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, errNotNetNS)
	}
	return f, nil
}

// newRouteHandle returns a netlink handle in the namespace of f for
// rtnetlink only, all the layer asks of it. (netlink.NewHandleAt without
// families also opens NETLINK_XFRM and NETLINK_NETFILTER sockets, and
// closing a netfilter socket waits for nf_tables to free what recent
// batches deleted, an RCU grace period: about 10 ms.)
func newRouteHandle(f *os.File) (*netlink.Handle, error) {
	return netlink.NewHandleAt(netns.NsHandle(int(f.Fd())), unix.NETLINK_ROUTE)
}

// lock takes flock(2) on the namespace file. Every path to one namespace
// (/proc/PID/ns/net, a bind mount under /var/run/netns) is the same nsfs
// inode, so the lock serializes every doorman process that changes the
// layer in that namespace, whatever mount namespace it runs in.
func lock(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	deadline := time.Now().Add(lockTimeout)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		case time.Now().After(deadline):
			return fmt.Errorf("lock %s: another process has held it for %v", f.Name(), lockTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// isNotExist reports whether err says that a namespace, table, chain, set
// or interface is not there. The kernel answers ENOENT for a missing table
// or chain, and ENODEV for a missing interface.
func isNotExist(err error) bool {
	var notFound netlink.LinkNotFoundError
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) ||
		errors.Is(err, unix.ENODEV) || errors.As(err, &notFound)
}
