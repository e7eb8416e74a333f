package relayloop

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/internal/rawsys"
)

// Pair is two sockets the loop relays between: a (side 0) and b (side 1).
type Pair struct {
	loop *Loop
	id   uint32
	fd   [2]int
	done func(Result)

	// Only the loop's goroutine touches these.
	// adopted[i] is the Watcher whose registration side i took over
	// (see AddWatched), nil if Add registered it.
	adopted  [2]*Watcher
	dir      [2]direction // dir[i] moves side i's bytes to side 1-i
	masked   [2]bool      // side i's EPOLLIN is masked (see eventsMasked)
	firstEnd int          // the side whose stream ended first, -1 before
	ended    bool
	result   Result

	mu     sync.Mutex // guards closed against IdleFor
	closed bool
}

// direction is one way through a pair.
type direction struct {
	src      int   // the side it reads from; it writes to 1-src
	pipe     *pipe // nil while nothing is in flight
	inPipe   int   // bytes in pipe
	srcEnded bool  // the source reached EOF or failed
	srcRead  bool  // ... as a splice from it said (not for want of a destination)
	finished bool  // ended, and the destination got its FIN
	written  int64
	// waitingPipe: the direction has bytes to move and waits for a
	// pipe (see Options.MaxPipes), its source masked.
	waitingPipe bool
}

// Abort closes both sockets now, the client's side (a) with a reset, and
// ends the pair (its done function still runs, with Aborted set). It does
// not wait.
func (p *Pair) Abort() { p.loop.post(command{pair: p, abort: true}) }

// Close closes both sockets now, gracefully, and ends the pair (its done
// function still runs, with Aborted set). It does not wait.
func (p *Pair) Close() { p.loop.post(command{pair: p}) }

// IdleFor returns how long the pair has carried no byte either way, as the
// kernel counts it (TCP_INFO of both sockets), or 0 once it has ended or
// if the kernel cannot tell.
func (p *Pair) IdleFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	idle := time.Duration(-1)
	for _, fd := range p.fd {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return 0
		}
		d := time.Duration(min(info.Last_data_recv, info.Last_data_sent)) * time.Millisecond
		if idle < 0 || d < idle {
			idle = d
		}
	}
	return idle
}

// move runs the direction that reads from side src as far as the sockets
// let it without waiting.
func (l *Loop) move(p *Pair, src int) {
	d := &p.dir[src]
	if d.finished {
		return
	}
	dst := 1 - src
	for {
		if d.inPipe > 0 {
			n, err := rawSplice(d.pipe.r, p.fd[dst], d.inPipe)
			if n > 0 {
				d.inPipe -= int(n)
				d.written += n
				l.batchBytes += n
				if l.opts.Written != nil {
					l.opts.Written(n)
				}
				continue
			}
			switch err {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				// The destination is full: take what fits from
				// the source, then stop listening to it until
				// the destination drains (its EPOLLOUT).
				if !d.srcEnded && d.inPipe < d.pipe.size {
					l.fill(p, d)
				}
				if !d.srcEnded && !p.masked[src] {
					l.setInterest(p, src, eventsMasked)
				}
				return
			}
			// The destination failed: nothing more can reach it.
			l.finish(p, d, false)
			return
		}
		if d.srcEnded {
			l.finish(p, d, true)
			return
		}
		if p.masked[src] {
			l.setInterest(p, src, eventsRead)
		}
		if d.pipe == nil {
			pp, err := l.getPipe()
			if err != nil {
				if err == errPipeBudget || l.inUse > 0 {
					// Wait for a pipe to be released, the
					// source unread meanwhile.
					if !d.waitingPipe {
						d.waitingPipe = true
						l.waiting = append(l.waiting, waiter{p: p, src: src})
					}
					if !p.masked[src] {
						l.setInterest(p, src, eventsMasked)
					}
					return
				}
				// No pipe can be made and none will be freed:
				// reset the pair rather than truncate a stream.
				p.result.Aborted = true
				l.end(p, true)
				return
			}
			d.pipe = pp
		}
		if !l.fill(p, d) {
			// Nothing waiting: an idle direction holds no pipe.
			l.releasePipe(d.pipe, true)
			d.pipe = nil
			return
		}
	}
}

// fill moves what the source holds into the pipe, up to its room. It
// returns false if the source had nothing (EAGAIN).
func (l *Loop) fill(p *Pair, d *direction) bool {
	for {
		n, err := rawSplice(p.fd[d.src], d.pipe.w, d.pipe.size-d.inPipe)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil || n == 0:
			d.srcRead = true
			l.sourceEnded(p, d)
			return true
		}
		d.inPipe += int(n)
		d.pipe.grow(int(n))
		return true
	}
}

// sourceEnded records that d's source reached EOF or failed.
func (l *Loop) sourceEnded(p *Pair, d *direction) {
	d.srcEnded = true
	if p.firstEnd < 0 {
		p.firstEnd = d.src
	}
}

// finish ends direction d: the destination gets a FIN; if graceful is
// false its pipe's bytes are dropped (the destination failed).
//
// The FIN of the pair's last direction comes with the close that ends the
// pair at once (endIfDone): a socket whose own incoming stream was read to
// its end has nothing unread, so close sends a FIN after what is queued,
// as shutdown would have, and the pair saves that call. A socket with
// bytes left unread (its reader stopped for a failed destination) would
// send a reset instead: it gets its shutdown first, as before.
func (l *Loop) finish(p *Pair, d *direction, graceful bool) {
	d.finished = true
	if !d.srcEnded {
		l.sourceEnded(p, d)
	}
	if o := &p.dir[1-d.src]; !graceful || !o.finished || !o.srcRead {
		rawsys.Shutdown(p.fd[1-d.src], unix.SHUT_WR)
	}
	if d.pipe != nil {
		l.releasePipe(d.pipe, graceful && d.inPipe == 0)
		d.pipe, d.inPipe = nil, 0
	}
}

// setInterest changes what side's socket wakes the loop for.
func (l *Loop) setInterest(p *Pair, side int, events uint32) {
	ev := unix.EpollEvent{Events: events, Fd: int32(p.id), Pad: int32(side)}
	if w := p.adopted[side]; w != nil {
		ev.Fd, ev.Pad = int32(w.id), padWatcher
	}
	if rawsys.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, p.fd[side], &ev) == nil {
		p.masked[side] = events == eventsMasked
	}
}

// end closes both sockets and runs the pair's done function. abort closes
// side a with a reset (SO_LINGER 0).
func (l *Loop) end(p *Pair, abort bool) {
	p.ended = true
	l.mu.Lock()
	delete(l.pairs, p.id)
	for _, w := range p.adopted {
		if w != nil {
			w.stopped = true
			delete(l.watchers, w.id)
		}
	}
	l.mu.Unlock()
	for i := range p.dir {
		d := &p.dir[i]
		if d.pipe != nil {
			l.releasePipe(d.pipe, d.inPipe == 0)
			d.pipe = nil
		}
	}
	p.mu.Lock()
	if abort {
		unix.SetsockoptLinger(p.fd[0], unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	// Closing the last descriptor of each socket also takes it out of
	// the epoll set.
	rawsys.Close(p.fd[0])
	rawsys.Close(p.fd[1])
	p.closed = true
	p.mu.Unlock()
	p.result.AToB, p.result.BToA = p.dir[0].written, p.dir[1].written
	p.result.BEndedFirst = p.firstEnd == 1
	if p.done != nil {
		p.done(p.result)
	}
}
