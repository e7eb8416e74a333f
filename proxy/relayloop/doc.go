// Package relayloop relays established TCP connections, many at once, from
// one goroutine and without a goroutine, a buffer or a pipe per connection.
//
// Why: a proxy that gives each relayed connection two goroutines (one per
// direction) pays for them on every connection and for as long as it
// lives. Each goroutine's stack (grown to 8 KiB by the dial and the splice
// calls that run on it), its net.Conn and poller state and a pipe per
// direction made an idle relayed connection cost the proxy 15-17 KiB, four
// times HAProxy's; and every segment that crossed the relay parked one
// goroutine and woke another through the Go scheduler and netpoller. A
// sandbox's proxy runs with one Go P, so those goroutines never ran in
// parallel anyway.
//
// A Loop owns the two sockets of each Pair as bare file descriptors,
// registered edge-triggered in an epoll instance of its own. That epoll
// descriptor is itself registered in the Go runtime's netpoller, so the
// loop's goroutine parks like any other while nothing is ready, and no
// thread is blocked in epoll_wait. When a socket becomes readable the loop
// splices what it holds into a pipe and from the pipe into the other
// socket, until one of them says EAGAIN: the bytes never enter user space.
// Pipes come from a pool and go back to it as soon as a direction has
// nothing in flight, so an idle pair holds no pipe, only its small Pair.
// While a destination cannot take more, the source's readiness is masked
// (EPOLL_CTL_MOD) so that its arrivals do not wake the loop for nothing;
// the destination's EPOLLOUT unmasks it.
//
// A direction ends when its source reaches EOF (or fails) and its pipe is
// empty, and then the destination gets a FIN (shutdown SHUT_WR), so half
// closes pass through as they do between the endpoints; a pair ends when
// both directions have. Its done function then gets the bytes each
// direction carried and which side ended first.
//
// The loop also watches descriptors for its caller (Watch, with Run for
// work to do on the loop's goroutine): the proxy accepts, sniffs and dials
// there, and AddWatched makes a pair of two watched sockets by taking
// their registrations over. Options.MaxPipes bounds the pipes in use, so
// that the descriptors a process needs are two a connection plus a fixed
// number.
//
// Only the loop's goroutine reads, writes or closes a pair's descriptors.
// Other goroutines ask: Abort (close both now, with a reset), Close (close
// both now, gracefully), IdleFor (TCP_INFO, under the pair's lock, never
// on a descriptor already closed).
package relayloop
