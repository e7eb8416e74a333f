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
// downstream. bulk, if not nil, counts the bytes spliced.
func relay(client, upstream *net.TCPConn, bulk *bulkSched) (up, down int64) {
	done := make(chan int64, 1)
	go func() {
		n, _ := pipe(client, upstream, bulk)
		done <- n
	}()
	up, _ = pipe(upstream, client, bulk)
	down = <-done
	return up, down
}
