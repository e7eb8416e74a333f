package enforce

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// nsGetNSType is NS_GET_NSTYPE of linux/nsfs.h (ioctl_ns(2)).
const nsGetNSType = 0xb703

// errNotNetNS marks a path that exists but is not a network namespace,
// e.g. a leftover mount point of a namespace that was already deleted.
var errNotNetNS = errors.New("not a network namespace")

// netNS is an open network namespace file and an nftables connection
// bound to that namespace.
type netNS struct {
	file *os.File
	conn *nftables.Conn
}

// openNetNS opens the namespace at path and a lasting nftables connection
// in it. The connection is made with nftables.WithNetNSFd: the calling
// thread never changes namespace.
func openNetNS(path string) (*netNS, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), nsGetNSType)
	if err != nil || typ != unix.CLONE_NEWNET {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, errNotNetNS)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())), nftables.AsLasting())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netlink connection into %s: %w", path, err)
	}
	return &netNS{file: f, conn: conn}, nil
}

func (n *netNS) Close() error {
	err := n.conn.CloseLasting()
	return errors.Join(err, n.file.Close())
}

// table is doorman's table, as nftables names it.
func table() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
}

// isNotExist reports whether err says that a namespace, table or chain is
// not there. The kernel answers ENOENT for a missing table or chain.
func isNotExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT)
}
