package proxy

import (
	"bytes"
	"io"
	"sync"
	"time"
)

// statusWatcher passes responses through to the client and, when armed,
// reports the status code of the next status line that starts a write (or
// follows a line break in one). The proxy arms it for an Upgrade request,
// so that it learns whether the server switched protocols before it stops
// checking the client's requests.
type statusWatcher struct {
	w    io.Writer
	bulk *bulkSched // counts the bytes written; nil: nothing counts

	mu     sync.Mutex
	armed  bool
	result chan int // buffered; one code per arming, 0 if the stream ended
}

func (s *statusWatcher) arm() {
	s.mu.Lock()
	s.armed = true
	s.result = make(chan int, 1)
	s.mu.Unlock()
}

func (s *statusWatcher) disarm() {
	s.mu.Lock()
	if s.armed {
		s.armed = false
		s.result <- 0
	}
	s.mu.Unlock()
}

// wait returns the status code seen since arm, or false on timeout or if
// the response stream ended first.
func (s *statusWatcher) wait(timeout time.Duration) (int, bool) {
	s.mu.Lock()
	ch := s.result
	s.mu.Unlock()
	select {
	case code := <-ch:
		return code, code != 0
	case <-time.After(timeout):
		return 0, false
	}
}

func (s *statusWatcher) Write(p []byte) (int, error) {
	s.mu.Lock()
	if s.armed {
		if code := firstStatus(p); code != 0 {
			s.armed = false
			s.result <- code
		}
	}
	s.mu.Unlock()
	n, err := s.w.Write(p)
	s.bulk.add(int64(n))
	return n, err
}

// firstStatus finds "HTTP/1.x NNN " at the start of p or of a line in it.
func firstStatus(p []byte) int {
	for i := 0; i < len(p); {
		if j := i + 13; j <= len(p) && bytes.HasPrefix(p[i:], []byte("HTTP/1.")) && p[i+8] == ' ' && p[i+12] == ' ' {
			code := 0
			for _, d := range p[i+9 : i+12] {
				if d < '0' || d > '9' {
					code = -1
					break
				}
				code = code*10 + int(d-'0')
			}
			if code == 101 || code >= 200 {
				return code
			}
		}
		nl := bytes.IndexByte(p[i:], '\n')
		if nl < 0 {
			break
		}
		i += nl + 1
	}
	return 0
}
