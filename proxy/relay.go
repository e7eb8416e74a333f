package proxy

import (
	"errors"
	"io"
	"net"
)

// pipe copies src to dst until src reaches EOF or fails, then half-closes:
// dst gets a FIN so the other side sees the end of the stream while the
// opposite direction keeps flowing. The bytes never enter user space: they
// go through spliceCopy's pipe, or, where that cannot run, through io.Copy,
// which also splices between bare *net.TCPConn.
func pipe(dst, src *net.TCPConn, bulk *bulkSched) (int64, error) {
	n, err := spliceCopy(dst, src, bulk)
	if errors.Is(err, errNoSplice) {
		n, err = io.Copy(dst, src)
	}
	dst.CloseWrite()
	return n, err
}

// relay runs both directions of an established connection until both have
// ended, and returns the bytes sent upstream (client to server) and
// downstream, and whether the upstream's end of the stream came before the
// client's (then the upstream, not the proxy, closed first, and the
// proxy's end of the connection does not linger in TIME_WAIT). bulk, if
// not nil, counts the bytes spliced.
func relay(client, upstream *net.TCPConn, bulk *bulkSched) (up, down int64, upstreamFirst bool) {
	done := make(chan int64, 1)
	go func() {
		n, _ := pipe(client, upstream, bulk)
		done <- n
	}()
	up, _ = pipe(upstream, client, bulk)
	select {
	case down = <-done:
		upstreamFirst = true
	default:
		down = <-done
	}
	return up, down, upstreamFirst
}
