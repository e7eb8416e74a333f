package relayloop

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/internal/rawsys"
)

// Watcher is a descriptor the loop watches for its caller, who keeps
// owning it (see Watch).
type Watcher struct {
	loop   *Loop
	id     uint32
	fd     int
	fn     func(w *Watcher, events uint32)
	events uint32 // what fd is watched for (Watch, Modify)
	// input: an event said fd had bytes, an end or an error to read
	// (see AddWatched).
	input   bool
	stopped bool
	// pair and side: the pair whose side took the registration over
	// (AddWatched); its events go there.
	pair *Pair
	side int
}

// PairEvents is what a Watcher's descriptor must be watched for to be
// handed to AddWatched: what a pair's side is watched for.
const PairEvents = eventsRead

// AddWatched relays between the sockets a and b watch, as Add does, taking
// over their registrations (with PairEvents): no epoll_ctl(2), and from now
// on their events go to the pair, not to the watchers' functions. Bytes
// queued on a socket whose watcher was told of input are relayed at once
// (that event will not come again); a socket whose watcher never was has
// nothing queued that the pair will not hear of, edge-triggered, and is
// not read until it does. Call it from the loop's goroutine (from a
// watcher's fn or Run).
func (l *Loop) AddWatched(a, b *Watcher, done func(Result)) (*Pair, error) {
	p, err := l.newPair(a.fd, b.fd, done, a, b)
	if err != nil {
		return nil, err
	}
	if a.input {
		l.move(p, 0)
	}
	if b.input && !p.ended {
		l.move(p, 1)
	}
	l.endIfDone(p)
	return p, nil
}

// Watch adds fd to the loop's epoll set with events (EPOLLIN and the
// like; level-triggered unless events has EPOLLET) and from then on calls
// fn with w and what is ready, from the loop's goroutine, until Stop (fn
// may run before Watch has returned). fn must not
// block: every pair waits meanwhile. The loop never reads, writes or closes
// fd: the caller does, from fn or Run.
func (l *Loop) Watch(fd int, events uint32, fn func(w *Watcher, events uint32)) (*Watcher, error) {
	w := &Watcher{loop: l, fd: fd, fn: fn, events: events}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	w.id = l.newID()
	l.watchers[w.id] = w
	l.mu.Unlock()
	ev := unix.EpollEvent{Events: events, Fd: int32(w.id), Pad: padWatcher}
	if err := rawsys.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.mu.Lock()
		delete(l.watchers, w.id)
		l.mu.Unlock()
		return nil, fmt.Errorf("relay loop: epoll_ctl: %w", err)
	}
	return w, nil
}

// Modify changes the events w waits for. Call it from the loop's
// goroutine (from fn or Run).
func (w *Watcher) Modify(events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(w.id), Pad: padWatcher}
	if err := rawsys.EpollCtl(w.loop.epfd, unix.EPOLL_CTL_MOD, w.fd, &ev); err != nil {
		return err
	}
	w.events = events
	return nil
}

// Stop takes w's descriptor out of the loop's epoll set; fn is not called
// again, not even for events of the batch being handled. Call it from the
// loop's goroutine (from fn or Run), before the descriptor is closed or
// handed to Add.
func (w *Watcher) Stop() {
	if w.stopped {
		return
	}
	w.stopped = true
	rawsys.EpollCtl(w.loop.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
	w.loop.mu.Lock()
	delete(w.loop.watchers, w.id)
	w.loop.mu.Unlock()
}

// Stopped reports whether Stop was called, or the pair that took w's
// registration over has ended. Call it from the loop's goroutine.
func (w *Watcher) Stopped() bool { return w.stopped }

// Run runs fn on the loop's goroutine, soon, in the order Run was called.
// After Close it never runs.
func (l *Loop) Run(fn func()) { l.post(command{fn: fn}) }
