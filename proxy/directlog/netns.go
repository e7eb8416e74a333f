package directlog

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// NetNSOf returns the network namespace that socket c was created in
// (ioctl SIOCGSKNS), as an open file the caller closes. The proxy's
// listeners were created inside the sandbox's namespace, so this names the
// sandbox without a path that could have been reused since.
func NetNSOf(c syscall.Conn) (*os.File, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("network namespace of socket: %w", err)
	}
	nsfd := -1
	var ioctlErr error
	err = raw.Control(func(fd uintptr) {
		nsfd, ioctlErr = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS)
	})
	if err == nil {
		err = ioctlErr
	}
	if err != nil {
		return nil, fmt.Errorf("network namespace of socket (SIOCGSKNS): %w", err)
	}
	unix.CloseOnExec(nsfd)
	return os.NewFile(uintptr(nsfd), "netns"), nil
}
