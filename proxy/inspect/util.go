package inspect

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/doorman-net/doorman/conf"
)

// chanListener hands the sessions' TLS connections to the one HTTP server.
type chanListener struct {
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c over; false once the listener is closed.
func (l *chanListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }

// secretRecheck is how often a secret file is looked at for a change.
const secretRecheck = time.Second

// secretCache reads the secret files of injections, again when they
// change (looked at once a second at most).
type secretCache struct {
	mu      sync.Mutex
	entries map[string]*secretEntry
}

type secretEntry struct {
	data    []byte
	err     error
	stamp   string
	checked time.Time
}

func newSecretCache() *secretCache { return &secretCache{entries: map[string]*secretEntry{}} }

// get returns the secret in path. Its error names the file, never the
// content.
func (c *secretCache) get(path string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[path]
	now := time.Now()
	if e != nil && now.Sub(e.checked) < secretRecheck {
		return e.data, e.err
	}
	stamp := ""
	if fi, err := os.Stat(path); err == nil {
		stamp = fmt.Sprintf("%d/%v/%d", fi.ModTime().UnixNano(), fi.Mode(), fi.Size())
	}
	if e != nil && stamp != "" && stamp == e.stamp && e.err == nil {
		e.checked = now
		return e.data, nil
	}
	data, err := conf.ReadSecret(path)
	c.entries[path] = &secretEntry{data: data, err: err, stamp: stamp, checked: now}
	return data, err
}
