package hostlayer

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// lockTimeout bounds how long Apply, Remove and Check wait for another
// process that changes the layer in the same namespace.
const lockTimeout = 10 * time.Second

// runtimeNS is the runtime's network namespace, opened and locked, with an
// nftables connection and a netlink handle bound to it. The calling thread
// never changes namespace for either.
type runtimeNS struct {
	*nft.NetNS
	path string
	link *netlink.Handle
}

// openRuntimeNS opens the namespace at path and takes the layer's lock in
// it: exclusive to change the layer, shared to read it.
func openRuntimeNS(path string, exclusive bool) (_ *runtimeNS, err error) {
	ns, err := nft.OpenNetNS(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ns.Close()
		}
	}()
	if err := lock(ns.File, exclusive); err != nil {
		return nil, err
	}
	h, err := newRouteHandle(ns.File)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", path, err)
	}
	return &runtimeNS{NetNS: ns, path: path, link: h}, nil
}

// Close releases the lock and closes everything.
func (n *runtimeNS) Close() error {
	n.link.Close()
	return n.NetNS.Close() // closing the file drops the lock
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

// linkNotFound reports whether err says that an interface (or the
// namespace) is not there: the kernel answers ENODEV for a missing
// interface, and package netlink says so in a type of its own.
func linkNotFound(err error) bool {
	var notFound netlink.LinkNotFoundError
	return nft.IsNotExist(err) || errors.Is(err, unix.ENODEV) || errors.As(err, &notFound)
}
