package relayloop

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/internal/rawsys"
)

// Options configures a Loop.
type Options struct {
	// Written, if set, is called with the bytes of each splice into a
	// destination, from the loop's goroutine (the proxy's bulk
	// detector; see proxy/sched.go). It must not block.
	Written func(n int64)
	// MaxPipes bounds the pipes in use at once (two descriptors each;
	// 0: no bound). A direction that has bytes to move while all are in
	// use waits for one, its source unread meanwhile, so that a process
	// can size its descriptors for its connections: two each, plus
	// 2*MaxPipes (and as many again for the pool of free ones).
	MaxPipes int
}

// Result is what a pair carried, given to its done function.
type Result struct {
	// AToB and BToA are the bytes each direction delivered.
	AToB, BToA int64
	// BEndedFirst reports that b's end of stream (EOF or an error) came
	// before a's.
	BEndedFirst bool
	// Aborted reports that the pair was closed by Abort or Close, or by
	// the loop's own Close, rather than by its endpoints.
	Aborted bool
}

// Loop relays pairs of connected TCP sockets (see the package doc). Its
// methods are safe for concurrent use.
type Loop struct {
	opts   Options
	epfd   int
	wakefd int      // eventfd: commands are queued
	ep     *os.File // epfd, registered in the runtime's netpoller
	rc     syscall.RawConn

	mu       sync.Mutex
	pairs    map[uint32]*Pair
	watchers map[uint32]*Watcher
	nextID   uint32
	queue    []command
	closed   bool

	// Only the loop's goroutine touches these.
	events []unix.EpollEvent
	// relook: the batch being handled woke a level-triggered watcher,
	// so the set is looked at again before the loop parks.
	relook bool
	// batchBytes counts the bytes the batch being handled delivered.
	batchBytes int64
	pipes      []*pipe // empty pipes for the next direction that needs one
	inUse      int     // pipes held by directions
	// waiting are the directions waiting for a pipe, oldest first.
	waiting []waiter
	done    chan struct{}
}

// wakeID is the epoll data of the loop's eventfd; pairs get ids from 1.
const wakeID = 0

// MaxFreePipes bounds the pool of empty pipes a loop keeps (two
// descriptors each) beside the Options.MaxPipes in use.
const MaxFreePipes = 64

// waiter is a direction waiting for a pipe: the one reading from side src
// of p.
type waiter struct {
	p   *Pair
	src int
}

type command struct {
	pair  *Pair
	abort bool   // a reset; false: a graceful close
	stop  bool   // the loop's Close
	fn    func() // Run's
}

// padWatcher marks a Watcher's events (a pair's carry its side, 0 or 1).
const padWatcher = 2

// New starts a loop. An error means the loop cannot run here (no epoll
// or eventfd, or the runtime cannot poll an epoll descriptor); the caller
// relays some other way.
func New(opts Options) (*Loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("relay loop: epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("relay loop: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: wakeID}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("relay loop: epoll_ctl: %w", err)
	}
	// Non-blocking, so that os.NewFile hands it to the netpoller; the
	// loop only ever calls epoll_wait with a zero timeout.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("relay loop: %w", err)
	}
	ep := os.NewFile(uintptr(epfd), "relayloop-epoll")
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		unix.Close(wakefd)
		return nil, fmt.Errorf("relay loop: %w", err)
	}
	l := &Loop{
		opts: opts, epfd: epfd, wakefd: wakefd, ep: ep, rc: rc,
		pairs:    make(map[uint32]*Pair),
		watchers: make(map[uint32]*Watcher),
		nextID:   wakeID + 1,
		events:   make([]unix.EpollEvent, 128),
		done:     make(chan struct{}),
	}
	// A file the netpoller refused would make the loop spin; find out
	// now, while the caller can still fall back.
	if err := ep.SetReadDeadline(time.Time{}); err != nil {
		ep.Close()
		unix.Close(wakefd)
		return nil, fmt.Errorf("relay loop: the runtime cannot poll an epoll descriptor: %w", err)
	}
	go l.run()
	return l, nil
}

// ErrClosed is returned by Add after Close.
var ErrClosed = errors.New("relay loop closed")

// Add relays between the connected, non-blocking TCP sockets a and b,
// which the loop now owns: it closes them when the pair ends, and then
// calls done with what the pair carried, from the loop's goroutine (done
// must not block for long: every pair waits meanwhile). Bytes already
// queued on either socket are relayed first. On error the loop owns
// nothing and done is never called.
func (l *Loop) Add(a, b int, done func(Result)) (*Pair, error) {
	p, err := l.newPair(a, b, done, nil, nil)
	if err != nil {
		return nil, err
	}
	// Registration reports what is ready already (edge-triggered epoll
	// queues an event for a ready descriptor when it is added), so bytes
	// that arrived before Add are not missed.
	for side := range 2 {
		ev := unix.EpollEvent{Events: eventsRead, Fd: int32(p.id), Pad: int32(side)}
		if err := rawsys.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, p.fd[side], &ev); err != nil {
			if side == 1 {
				rawsys.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, p.fd[0], nil)
			}
			l.mu.Lock()
			delete(l.pairs, p.id)
			l.mu.Unlock()
			return nil, fmt.Errorf("relay loop: epoll_ctl: %w", err)
		}
	}
	return p, nil
}

// newPair makes a pair of a and b and gives it an id. The watchers wa and
// wb, if not nil, are the registrations of a and b it takes over (see
// AddWatched).
func (l *Loop) newPair(a, b int, done func(Result), wa, wb *Watcher) (*Pair, error) {
	p := &Pair{loop: l, fd: [2]int{a, b}, done: done, firstEnd: -1, adopted: [2]*Watcher{wa, wb}}
	p.dir[0].src, p.dir[1].src = 0, 1
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	p.id = l.newID()
	l.pairs[p.id] = p
	for side, w := range p.adopted {
		if w != nil {
			w.pair, w.side = p, side
		}
	}
	return p, nil
}

// endIfDone ends p once both its directions have.
func (l *Loop) endIfDone(p *Pair) {
	if !p.ended && p.dir[0].finished && p.dir[1].finished {
		l.end(p, false)
	}
}

// newID returns an id for a pair or watcher; l.mu is held.
func (l *Loop) newID() uint32 {
	for {
		id := l.nextID
		l.nextID++
		if id == wakeID {
			continue
		}
		if _, ok := l.pairs[id]; ok {
			continue
		}
		if _, ok := l.watchers[id]; ok {
			continue
		}
		return id
	}
}

// Len returns the number of pairs the loop holds.
func (l *Loop) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pairs)
}

// Close aborts every pair (each done function still runs) and stops the
// loop. It waits until the loop's goroutine has returned.
func (l *Loop) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.post(command{stop: true})
	<-l.done
	return nil
}

// The interest of a socket whose outgoing direction can take bytes, and of
// one whose outgoing direction waits for its destination (its arrivals
// would only wake the loop for nothing). EPOLLOUT stays in both: it fires
// once the socket's send buffer, full before, has room again.
const (
	eventsRead   = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
	eventsMasked = unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
)

// post queues c for the loop's goroutine and wakes it.
func (l *Loop) post(c command) {
	l.mu.Lock()
	l.queue = append(l.queue, c)
	l.mu.Unlock()
	one := [8]byte{1}
	for {
		_, err := unix.Write(l.wakefd, one[:])
		if err != unix.EINTR {
			return // EAGAIN: the counter is full, a wake is pending
		}
	}
}

// relookBytes: a batch that delivered this many bytes or more is followed
// by another look at the set before the loop parks (see run).
const relookBytes = 64 << 10

// run is the loop's goroutine. It runs inside one RawConn.Read of the
// epoll descriptor for as long as the loop lives: Read clears what the
// runtime's poller has reported when it starts, so a loop that returned
// from it after each batch would have to call epoll_wait once more before
// it parks, to find what arrived while the batch was handled. Inside one
// Read, whatever arrives meanwhile is reported to the runtime's poller
// (each new event in the loop's epoll set wakes the runtime's watch on
// the set), and the park returns at once. A batch of a few events (new
// connections, small exchanges) parks without another epoll_wait, which
// would mostly find nothing. Another look is taken after a batch that
// filled the events buffer, woke a level-triggered watcher (whose
// readiness the set keeps without waking anyone), or moved bulk data
// (relookBytes): while it spliced, more has most likely arrived, and one
// epoll_wait finds it for less than a park and a wake through the
// runtime's scheduler.
func (l *Loop) run() {
	defer close(l.done)
	defer l.ep.Close()
	defer unix.Close(l.wakefd)
	// Read returns once a stop was posted, or with an error if the
	// descriptor was closed under it (only Close closes it, after a
	// stop); either way every pair left is ended.
	l.rc.Read(func(uintptr) bool {
		for {
			n, err := rawsys.EpollWait(l.epfd, l.events)
			if err == unix.EINTR {
				continue
			}
			if n <= 0 {
				return false // park until the runtime's poller says more
			}
			l.relook, l.batchBytes = false, 0
			if l.dispatch(l.events[:n]) {
				return true
			}
			l.serveWaiting()
			if n < len(l.events) && !l.relook && l.batchBytes < relookBytes {
				return false
			}
		}
	})
	l.stop()
}

// dispatch handles one batch of events; it returns true when the loop must
// stop.
func (l *Loop) dispatch(evs []unix.EpollEvent) (stop bool) {
	for i := range evs {
		ev := &evs[i]
		id := uint32(ev.Fd)
		if id == wakeID {
			if l.commands() {
				stop = true
			}
			continue
		}
		if ev.Pad == padWatcher {
			l.mu.Lock()
			w := l.watchers[id]
			l.mu.Unlock()
			if w == nil || w.stopped {
				continue
			}
			if w.pair == nil {
				if w.events&unix.EPOLLET == 0 {
					l.relook = true
				}
				if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
					w.input = true
				}
				w.fn(w, ev.Events)
				continue
			}
			l.pairEvent(w.pair, w.side, ev.Events)
			continue
		}
		l.mu.Lock()
		p := l.pairs[id]
		l.mu.Unlock()
		if p == nil || p.ended {
			continue // ended earlier in this batch
		}
		l.pairEvent(p, int(ev.Pad), ev.Events)
	}
	return stop
}

// pairEvent handles events on side of p.
func (l *Loop) pairEvent(p *Pair, side int, events uint32) {
	if p.ended {
		return
	}
	in := events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	out := events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0
	if in {
		l.move(p, side)
	}
	// Every event reports EPOLLOUT while the socket has room; it matters
	// only to a direction waiting for this socket.
	if out && !p.ended && p.dir[1-side].inPipe > 0 {
		l.move(p, 1-side)
	}
	l.endIfDone(p)
}

// commands runs the queued commands; it returns true on a stop.
func (l *Loop) commands() (stop bool) {
	var buf [8]byte
	unix.Read(l.wakefd, buf[:])
	l.mu.Lock()
	q := l.queue
	l.queue = nil
	l.mu.Unlock()
	for _, c := range q {
		switch {
		case c.stop:
			stop = true
		case c.fn != nil:
			c.fn()
		case !c.pair.ended:
			c.pair.result.Aborted = true
			l.end(c.pair, c.abort)
		}
	}
	return stop
}

// stop ends every pair left, as aborted.
func (l *Loop) stop() {
	l.mu.Lock()
	all := make([]*Pair, 0, len(l.pairs))
	for _, p := range l.pairs {
		all = append(all, p)
	}
	l.mu.Unlock()
	for _, p := range all {
		if !p.ended {
			p.result.Aborted = true
			l.end(p, true)
		}
	}
	for _, pp := range l.pipes {
		pp.close()
	}
	l.pipes = nil
}

// errPipeBudget means MaxPipes pipes are in use.
var errPipeBudget = errors.New("relay loop: every pipe is in use")

// getPipe returns an empty pipe from the pool or a new one, counted in
// use.
func (l *Loop) getPipe() (*pipe, error) {
	if l.opts.MaxPipes > 0 && l.inUse >= l.opts.MaxPipes {
		return nil, errPipeBudget
	}
	if n := len(l.pipes); n > 0 {
		pp := l.pipes[n-1]
		l.pipes = l.pipes[:n-1]
		l.inUse++
		return pp, nil
	}
	pp, err := newPipe()
	if err != nil {
		return nil, err
	}
	l.inUse++
	return pp, nil
}

// releasePipe takes back a pipe getPipe gave: into the pool if it is
// empty and the pool has room, else it is closed.
func (l *Loop) releasePipe(pp *pipe, empty bool) {
	l.inUse--
	if empty && len(l.pipes) < MaxFreePipes {
		l.pipes = append(l.pipes, pp)
		return
	}
	pp.close()
}

// serveWaiting runs the directions waiting for a pipe while pipes are
// free, oldest first.
func (l *Loop) serveWaiting() {
	for len(l.waiting) > 0 && (l.opts.MaxPipes <= 0 || l.inUse < l.opts.MaxPipes) {
		w := l.waiting[0]
		l.waiting[0] = waiter{}
		l.waiting = l.waiting[1:]
		d := &w.p.dir[w.src]
		if w.p.ended || !d.waitingPipe {
			continue
		}
		d.waitingPipe = false
		l.move(w.p, w.src)
		l.endIfDone(w.p)
	}
	if len(l.waiting) == 0 && cap(l.waiting) > 1024 {
		l.waiting = nil
	}
}
