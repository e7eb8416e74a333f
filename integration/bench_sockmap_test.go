package integration

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/integration/testnet"
)

// sockmapRelayEnv, set in the environment of this test binary, makes it a
// bare sockmap relay instead of a test run (see runSockmapRelay): the
// research prototype of issue 29's last pass, a relay whose data path
// stays in the kernel.
const sockmapRelayEnv = "DOORMAN_BENCH_SOCKMAP_RELAY"

// sockmapThrottleEnv, set as well, turns the sockmap relay's throttle on
// (see sockmapRelay); the benchmark runs without it.
const sockmapThrottleEnv = "DOORMAN_BENCH_SOCKMAP_THROTTLE"

// sockmapUnsupportedExit is the sockmap relay process's exit status when
// the kernel or the process's capabilities refuse the BPF it needs; the
// first line on its stdout then starts with "unsupported: ".
const sockmapUnsupportedExit = 3

func init() {
	if spec, ok := os.LookupEnv(sockmapRelayEnv); ok {
		os.Exit(runSockmapRelay(spec, os.Stdin, os.Stdout, os.Stderr))
	}
}

// sockmapRelay relays TCP connection pairs inside the kernel: each socket
// of a pair sits in two BPF sockhashes, and an SK_SKB stream-verdict
// program (no parser) attached to one of them redirects every skb that
// arrives on a socket to the egress of its peer. User space watches each
// socket for the end of its direction (EPOLLRDHUP, errors), forwards it as
// a shutdown once the kernel has handed every byte of that direction to
// the peer, closes the pair when both directions are done, and throttles
// a direction whose peer does not keep up (see check).
//
//   - peers (no program) holds each socket under its peer's socket
//     cookie: it is the redirect's target map.
//   - socks (the verdict program attached) holds each socket under its
//     own cookie: a socket's skbs are redirected while it is in socks.
//   - moved counts the bytes redirected from each socket.
//
// A socket enters socks only after both entries of its pair are in peers,
// so the program never runs on a socket whose peer it cannot find, and the
// upstream socket enters it before the client's, so that no answer can end
// it before it is in (see relay); data
// that arrived before that waits in the socket's receive queue and is
// redirected, in order, by the kick that follows the insertion (setting
// SO_RCVLOWAT calls the socket's data_ready callback, now the verdict's).
//
// The kernel gives an egress redirect no backpressure: the verdict takes
// each skb off the source's receive queue (so TCP opens the source's
// window again) and queues it, uncharged, on the peer's psock however
// long that queue is (and a redirected skb wakes no reader, so epoll
// cannot tell user space about it). The relay bounds it from user space:
// every sockmapTick it sweeps the pairs whose counters moved, and when a
// direction has more than sockmapHigh bytes redirected but not yet in the
// peer's send queue, its source leaves socks (its data then waits in its
// own receive queue and TCP closes its window, as with any slow reader)
// until the backlog is below sockmapLow; then it goes back and is kicked.
// The throttle is off unless throttle turns it on: taking a socket out of
// the verdict's map races with a verdict running on it (the kernel drops
// the skbs it reads once the program is gone), so it bounds the memory
// at the price of rare data loss, and the benchmark runs without it.
type sockmapRelay struct {
	peers, socks *ebpf.Map
	// moved counts, by socket cookie, the bytes the program redirected
	// from that socket to its peer's egress queue (the psock's, in front
	// of the peer's send buffer).
	moved *ebpf.Map
	prog  *ebpf.Program
	ep    int // epoll instance watching every relayed socket
	wake  int // eventfd in ep (as fd -2): a new pair wakes the watcher to sweep

	mu     sync.Mutex
	pairs  map[int32]*sockmapPair // by id: a closed pair's descriptor numbers may be reused at once
	nextID int32
	paused map[*sockmapPair]struct{}
	wg     sync.WaitGroup // the watcher
	// drainTimeout bounds how long a direction's end waits for the
	// kernel to hand its last bytes to the peer.
	drainTimeout time.Duration
	// high and low are the throttle's marks (sockmapHigh, sockmapLow);
	// high 0, the default, turns the throttle off (see throttle).
	high, low int64
	// pauses and resumes count the throttle's actions.
	pauses, resumes atomic.Int64
}

// The throttle's marks: bytes of one direction redirected to the peer's
// psock but not yet in its send queue.
const (
	sockmapHigh = 1 << 20
	sockmapLow  = 256 << 10
	// sockmapTick is how often the watcher sweeps the pairs.
	sockmapTick = 2 * time.Millisecond
)

// sockmapPair is one relayed connection: two sockets and each direction's
// state; direction i runs from fd[i] to fd[1-i]. base[i] is what fd[i]'s
// send queue had been given when the kernel took over (what user space
// wrote to it, and its SYN if it was the dialer: TCP_INFO's bytes_acked
// counts that), read[i] what user space read from it; the accounting
// subtracts both.
type sockmapPair struct {
	id     int32 // the epoll events' data, with the side in Pad
	fd     [2]int
	cookie [2]uint64
	base   [2]uint64
	read   [2]uint64

	mu     sync.Mutex
	paused [2]bool // direction i's source is out of socks
	// seen[i] is moved[i] at the last sweep; copied[i] counts what user
	// space relayed itself at direction i's end (see end).
	seen, copied [2]uint64
	ending       [2]bool // direction i saw its end and is draining
	done         [2]bool // direction i forwarded its FIN
	closed       bool
	// onClose, if set, runs once the pair's sockets are closed; err is
	// why the pair ended early, nil after two clean half-closes.
	onClose func(err error)
}

// newSockmapRelay loads the maps and the program and attaches it: this is
// the capability probe. It fails if the kernel lacks sockhash or SK_SKB
// support or the process may not load BPF (CAP_BPF and CAP_NET_ADMIN, or
// CAP_SYS_ADMIN).
func newSockmapRelay() (*sockmapRelay, error) {
	r := &sockmapRelay{pairs: map[int32]*sockmapPair{}, paused: map[*sockmapPair]struct{}{}, ep: -1, wake: -1,
		drainTimeout: 30 * time.Second}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	var err error
	spec := func(name string) *ebpf.MapSpec {
		return &ebpf.MapSpec{Name: name, Type: ebpf.SockHash, KeySize: 8, ValueSize: 4, MaxEntries: 1 << 16}
	}
	if r.peers, err = ebpf.NewMap(spec("doorman_peers")); err != nil {
		return nil, fmt.Errorf("sockhash: %w", err)
	}
	if r.socks, err = ebpf.NewMap(spec("doorman_socks")); err != nil {
		return nil, fmt.Errorf("sockhash: %w", err)
	}
	if r.moved, err = ebpf.NewMap(&ebpf.MapSpec{Name: "doorman_moved", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 1 << 16}); err != nil {
		return nil, fmt.Errorf("hash map: %w", err)
	}
	// An empty skb (a bare FIN: TCP has already taken note of it) is
	// dropped: queued for the peer's egress it would fail there as a
	// zero-length send, which breaks the peer's psock with EPIPE.
	// Everything else: bpf_sk_redirect_hash(skb, peers, &cookie(skb's
	// socket), 0), SK_PASS with the skb queued for the peer's egress, or
	// SK_DROP if the socket has no peer (it was closed); after a
	// redirect, moved[cookie] += skb->len (if the relay made the entry).
	insns := asm.Instructions{
		asm.LoadMem(asm.R7, asm.R1, 0, asm.Word), // skb->len
		asm.JNE.Imm(asm.R7, 0, "redirect"),
		asm.Mov.Imm(asm.R0, 0), // SK_DROP
		asm.Return(),
		asm.Mov.Reg(asm.R6, asm.R1).WithSymbol("redirect"),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, r.peers.FD()),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 0), // no BPF_F_INGRESS: the peer's egress
		asm.FnSkRedirectHash.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.JNE.Imm(asm.R8, 1, "out"), // not SK_PASS
		asm.LoadMapPtr(asm.R1, r.moved.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.StoreXAdd(asm.R0, asm.R7, asm.DWord),
		asm.Mov.Reg(asm.R0, asm.R8).WithSymbol("out"),
		asm.Return(),
	}
	if r.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "doorman_relay", Type: ebpf.SkSKB, Instructions: insns, License: "GPL"}); err != nil {
		return nil, fmt.Errorf("SK_SKB program: %w", err)
	}
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: r.socks.FD(), Program: r.prog, Attach: ebpf.AttachSkSKBStreamVerdict}); err != nil {
		return nil, fmt.Errorf("attach the stream verdict: %w", err)
	}
	if r.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	if r.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if err := unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, r.wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -2}); err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	ok = true
	r.wg.Go(r.watch)
	return r, nil
}

// close stops the watcher, aborts the pairs still relayed and releases
// the maps and the program.
func (r *sockmapRelay) close() {
	if r.ep >= 0 {
		// A socket pair that wakes the watcher makes it see the end.
		if sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
			unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, sv[0], &unix.EpollEvent{Events: unix.EPOLLHUP, Fd: -1})
			unix.Close(sv[1])
			r.wg.Wait()
			unix.Close(sv[0])
		}
		r.mu.Lock()
		var left []*sockmapPair
		for _, p := range r.pairs {
			left = append(left, p)
		}
		r.mu.Unlock()
		for _, p := range left {
			r.closePair(p, errors.New("the relay closed"))
		}
		unix.Close(r.ep)
		r.ep = -1
	}
	if r.wake >= 0 {
		unix.Close(r.wake)
		r.wake = -1
	}
	if r.prog != nil {
		r.prog.Close()
	}
	for _, m := range []*ebpf.Map{r.socks, r.peers, r.moved} {
		if m != nil {
			m.Close()
		}
	}
}

// throttle turns the throttle on with the marks sockmapHigh and
// sockmapLow; it must be called before the first relay.
func (r *sockmapRelay) throttle() {
	r.high, r.low = sockmapHigh, sockmapLow
}

// socketCookie is the kernel's cookie of the socket fd.
func socketCookie(fd int) (uint64, error) {
	v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("SO_COOKIE: %w", err)
	}
	return v, nil
}

// relay hands the connected TCP sockets a and b (descriptors this relay
// now owns) to the kernel. read is what user space already read from
// each of them (a ClientHello a proxy sniffed, say); what it wrote to
// them (that ClientHello, forwarded) it must have written before.
func (r *sockmapRelay) relay(a, b int, read [2]uint64, onClose func(error)) error {
	p := &sockmapPair{fd: [2]int{a, b}, read: read, onClose: onClose}
	for i, fd := range p.fd {
		var err error
		if p.cookie[i], err = socketCookie(fd); err != nil {
			return err
		}
		if p.base[i], err = sockmapSent(fd); err != nil {
			return err
		}
	}
	// The pair stays locked until it is set up: an end or an error the
	// watcher sees meanwhile waits, so that nothing closes the
	// descriptors (whose numbers a new socket could then take) under
	// the setup.
	p.mu.Lock()
	defer p.mu.Unlock()
	r.mu.Lock()
	r.nextID = max(r.nextID+1, 1) // 1 up, wrapping past negative numbers: -1 and -2 are the watcher's own
	p.id = r.nextID
	r.pairs[p.id] = p
	r.mu.Unlock()
	fail := func(err error) error {
		p.closed = true // the caller closes the descriptors
		r.mu.Lock()
		delete(r.pairs, p.id)
		r.mu.Unlock()
		for i, fd := range p.fd {
			unix.EpollCtl(r.ep, unix.EPOLL_CTL_DEL, fd, nil)
			r.moved.Delete(p.cookie[i])
		}
		return err
	}
	// The counters and both redirect targets first, then the two
	// sources, then the watch, then the kicks.
	for i, fd := range p.fd {
		if err := r.moved.Update(p.cookie[i], uint64(0), ebpf.UpdateAny); err != nil {
			return fail(fmt.Errorf("moved map: %w", err))
		}
		if err := r.peers.Update(p.cookie[1-i], uint32(fd), ebpf.UpdateNoExist); err != nil {
			return fail(fmt.Errorf("peers map: %w", err))
		}
	}
	// b (the upstream, which speaks second) first: once a is in socks
	// its bytes flow to b's server, whose answer could otherwise end b
	// (data and FIN) before b is in socks, and the kernel takes only
	// established sockets. A socket it refuses all the same (a
	// server that spoke first and closed) starts paused: user space
	// carries that direction at its end (copyTail).
	for _, i := range []int{1, 0} {
		err := r.socks.Update(p.cookie[i], uint32(p.fd[i]), ebpf.UpdateNoExist)
		if errors.Is(err, unix.EOPNOTSUPP) && sockmapPastEstablished(p.fd[i]) {
			p.paused[i] = true
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("socks map: %w", err))
		}
	}
	for i, fd := range p.fd {
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET, Fd: p.id, Pad: int32(i)}
		if err := unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fail(fmt.Errorf("epoll: %w", err))
		}
	}
	for i, fd := range p.fd {
		if p.paused[i] {
			continue
		}
		if err := sockmapKick(fd); err != nil {
			return fail(err)
		}
	}
	unix.Write(r.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	return nil
}

// sockmapPastEstablished tells whether fd's TCP connection got its
// peer's FIN (or went further), which is why a sockmap refuses it.
func sockmapPastEstablished(fd int) bool {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	return err == nil && ti.State != unix.BPF_TCP_ESTABLISHED
}

// sockmapKick makes the kernel run the verdict on what waits in fd's
// receive queue: setting SO_RCVLOWAT calls the socket's data_ready.
func sockmapKick(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1); err != nil {
		return fmt.Errorf("kick: %w", err)
	}
	return nil
}

// watch handles the sockets' ends and errors until close wakes it with
// fd -1, and sweeps the pairs every sockmapTick while there are any.
func (r *sockmapRelay) watch() {
	evs := make([]unix.EpollEvent, 256)
	last := time.Now()
	for {
		r.mu.Lock()
		timeout := -1
		if len(r.pairs) > 0 && r.high > 0 {
			timeout = max(1, int(time.Until(last.Add(sockmapTick))/time.Millisecond))
		}
		r.mu.Unlock()
		n, err := unix.EpollWait(r.ep, evs, timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range evs[:n] {
			if ev.Fd == -1 {
				return
			}
			if ev.Fd == -2 {
				var b [8]byte
				unix.Read(r.wake, b[:])
				continue
			}
			r.mu.Lock()
			p := r.pairs[ev.Fd]
			r.mu.Unlock()
			if p == nil || ev.Pad < 0 || ev.Pad > 1 {
				continue
			}
			i := int(ev.Pad)
			fd := p.fd[i]
			if ev.Events&unix.EPOLLERR != 0 {
				soErr, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
				r.closePair(p, fmt.Errorf("socket error: %w", unix.Errno(soErr)))
				continue
			}
			if ev.Events&unix.EPOLLRDHUP != 0 {
				r.end(p, i)
			}
		}
		if r.high > 0 && time.Since(last) >= sockmapTick {
			last = time.Now()
			r.sweep()
		}
	}
}

// sweep checks every direction whose counter moved since the last sweep,
// and every paused one.
func (r *sockmapRelay) sweep() {
	r.mu.Lock()
	pairs := make([]*sockmapPair, 0, len(r.pairs))
	for _, p := range r.pairs {
		pairs = append(pairs, p)
	}
	r.mu.Unlock()
	for _, p := range pairs {
		for i := range 2 {
			var moved uint64
			if err := r.moved.Lookup(p.cookie[i], &moved); err != nil {
				continue
			}
			p.mu.Lock()
			changed := moved != p.seen[i] || p.paused[i]
			p.seen[i] = moved
			p.mu.Unlock()
			if changed {
				r.check(p, i)
			}
		}
	}
}

// sockmapSent is what fd's send queue was given in all: TCP_INFO's
// bytes_acked plus what the queue holds, read in that order so that the
// sum may fall short of the truth, never exceed it.
func sockmapSent(fd int) (uint64, error) {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, err
	}
	q, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return 0, err
	}
	return ti.Bytes_acked + uint64(q), nil
}

// backlog is how many bytes of direction i the program redirected that
// are not yet in fd[1-i]'s send queue (they wait in its psock), and how
// many it redirected in all.
func (r *sockmapRelay) backlog(p *sockmapPair, i int) (backlog int64, moved uint64, err error) {
	if err := r.moved.Lookup(p.cookie[i], &moved); err != nil {
		return 0, 0, fmt.Errorf("moved map: %w", err)
	}
	sent, err := sockmapSent(p.fd[1-i])
	if err != nil {
		return 0, 0, err
	}
	return int64(moved) - int64(sent-p.base[1-i]), moved, nil
}

// check throttles direction i: it takes the source out of socks when the
// backlog passes r.high and puts it back (and kicks it) when the backlog
// fell below r.low.
func (r *sockmapRelay) check(p *sockmapPair, i int) {
	if r.high == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	b, _, err := r.backlog(p, i)
	if err != nil {
		return // the pair is going; its end or error event closes it
	}
	switch {
	case !p.paused[i] && b > r.high:
		if err := r.socks.Delete(p.cookie[i]); err != nil {
			return
		}
		p.paused[i] = true
		r.pauses.Add(1)
		r.mu.Lock()
		r.paused[p] = struct{}{}
		r.mu.Unlock()
	case p.paused[i] && b < r.low && !p.ending[i]:
		if err := r.socks.Update(p.cookie[i], uint32(p.fd[i]), ebpf.UpdateNoExist); err != nil {
			return
		}
		p.paused[i] = false
		r.resumes.Add(1)
		if !p.paused[1-i] {
			r.mu.Lock()
			delete(r.paused, p)
			r.mu.Unlock()
		}
		sockmapKick(p.fd[i])
	}
}

// drained tells whether the kernel has handed every byte of direction i
// (fd[i] got its peer's FIN) to fd[1-i]'s send queue: whether the
// program redirected all that fd[i] received (TCP_INFO bytes_received,
// which counts the FIN as one, less what user space read itself), and
// fd[1-i]'s send queue was given all of that.
func (r *sockmapRelay) drained(p *sockmapPair, i int) (bool, error) {
	ti, err := unix.GetsockoptTCPInfo(p.fd[i], unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return false, err
	}
	b, moved, err := r.backlog(p, i)
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	copied := p.copied[i]
	p.mu.Unlock()
	return moved+copied == ti.Bytes_received-1-p.read[i] && b <= 0, nil
}

// copyTail relays in user space what waits in the receive queue of a
// direction's paused source after its FIN (the kernel refuses to put a
// socket that is no longer established back into a sockmap): once the
// peer's psock handed all it holds to the peer's send queue, it reads
// fd[i] to its end and writes that to fd[1-i].
func (r *sockmapRelay) copyTail(p *sockmapPair, i int, deadline time.Time) error {
	for {
		b, _, err := r.backlog(p, i)
		if err != nil {
			return err
		}
		if b <= 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the peer's psock still holds %d bytes", b)
		}
		time.Sleep(time.Millisecond)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(p.fd[i], buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read the tail: %w", err)
		}
		if n == 0 {
			return nil
		}
		for w := buf[:n]; len(w) > 0; {
			m, err := unix.Write(p.fd[1-i], w)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fmt.Errorf("write the tail: %w", err)
			}
			w = w[m:]
		}
		p.mu.Lock()
		p.copied[i] += uint64(n)
		p.mu.Unlock()
	}
}

// end forwards the end of direction i once it is drained: it shuts
// fd[1-i] down for writing, and closes the pair when both directions are
// done. A paused direction is resumed by check meanwhile.
func (r *sockmapRelay) end(p *sockmapPair, i int) {
	p.mu.Lock()
	if p.ending[i] || p.closed {
		p.mu.Unlock()
		return
	}
	p.ending[i] = true
	p.mu.Unlock()
	go func() {
		deadline := time.Now().Add(r.drainTimeout)
		p.mu.Lock()
		paused := p.paused[i]
		p.mu.Unlock()
		if paused {
			if err := r.copyTail(p, i, deadline); err != nil {
				r.closePair(p, fmt.Errorf("drain: %w", err))
				return
			}
		}
		wait := 20 * time.Microsecond
		for {
			ok, err := r.drained(p, i)
			if err != nil {
				r.closePair(p, fmt.Errorf("drain: %w", err))
				return
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				ti, _ := unix.GetsockoptTCPInfo(p.fd[i], unix.IPPROTO_TCP, unix.TCP_INFO)
				b, moved, _ := r.backlog(p, i)
				r.closePair(p, fmt.Errorf("drain: the kernel did not hand direction %d's last bytes on within %v (received %d, redirected %d, backlog %d, paused %v)",
					i, r.drainTimeout, ti.Bytes_received, moved, b, p.paused))
				return
			}
			time.Sleep(wait)
			wait = min(2*wait, 5*time.Millisecond)
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		unix.Shutdown(p.fd[1-i], unix.SHUT_WR)
		p.done[i] = true
		both := p.done[0] && p.done[1]
		p.mu.Unlock()
		if both {
			r.closePair(p, nil)
		}
	}()
}

// closePair closes both sockets (which takes them out of the sockhashes)
// and drops their counters, once.
func (r *sockmapRelay) closePair(p *sockmapPair, why error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	r.mu.Lock()
	delete(r.pairs, p.id)
	delete(r.paused, p)
	r.mu.Unlock()
	for i, fd := range p.fd {
		unix.EpollCtl(r.ep, unix.EPOLL_CTL_DEL, fd, nil)
		if why != nil {
			// An abort: reset the peer rather than end it cleanly.
			unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		}
		unix.Close(fd)
		r.moved.Delete(p.cookie[i])
	}
	if p.onClose != nil {
		p.onClose(why)
	}

}

// dump describes each pair's directions: for the tests' failures.
func (r *sockmapRelay) dump() string {
	r.mu.Lock()
	var pairs []*sockmapPair
	for _, p := range r.pairs {
		pairs = append(pairs, p)
	}
	r.mu.Unlock()
	var out []string
	for _, p := range pairs {
		for i := range 2 {
			b, moved, err := r.backlog(p, i)
			ti, _ := unix.GetsockoptTCPInfo(p.fd[i], unix.IPPROTO_TCP, unix.TCP_INFO)
			q, _ := unix.IoctlGetInt(p.fd[1-i], unix.SIOCOUTQ)
			inq, _ := unix.IoctlGetInt(p.fd[i], unix.SIOCINQ)
			p.mu.Lock()
			out = append(out, fmt.Sprintf("direction %d: received %d, in its queue %d, redirected %d, backlog %d (%v), peer's send queue %d (base %d), paused %v, ending %v",
				i, ti.Bytes_received, inq, moved, b, err, q, p.base[1-i], p.paused[i], p.ending[i]))
			p.mu.Unlock()
		}
	}
	return strings.Join(out, "; ")
}

// count is how many sockets each map holds (its keys: a sockhash with
// 4-byte values cannot be read back from user space).
func (r *sockmapRelay) count() (peers, socks int, err error) {
	if peers, err = sockmapKeys(r.peers); err != nil {
		return 0, 0, err
	}
	socks, err = sockmapKeys(r.socks)
	return peers, socks, err
}

// sockmapKeys counts m's keys.
func sockmapKeys(m *ebpf.Map) (int, error) {
	n := 0
	var key any // nil: the first key
	for {
		var next uint64
		if err := m.NextKey(key, &next); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return n, nil
			}
			return 0, err
		}
		n++
		key = next
	}
}

// sockmapFD takes the descriptor of c out of Go's poller: it returns a
// duplicate and closes c.
func sockmapFD(c *net.TCPConn) (int, error) {
	f, err := c.File()
	c.Close()
	if err != nil {
		return -1, err
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

// runSockmapRelay is the bare sockmap relay: for each "listen>upstream"
// pair in spec (comma-separated addr:port), it accepts connections,
// dials upstream and hands both sockets to a sockmapRelay, without
// sniffing, policy, DNS or logging (and without its throttle unless
// sockmapThrottleEnv is set). It writes "ready" once listening (or
// "unsupported: why" and exits with sockmapUnsupportedExit if the kernel
// or its capabilities refuse the BPF) and exits when stdin closes.
func runSockmapRelay(spec string, stdin io.Reader, stdout, stderr io.Writer) int {
	r, err := newSockmapRelay()
	if err != nil {
		fmt.Fprintf(stdout, "unsupported: %v\n", err)
		return sockmapUnsupportedExit
	}
	if os.Getenv(sockmapThrottleEnv) != "" {
		r.throttle()
	}
	defer r.close()
	var lns []net.Listener
	for _, pair := range strings.Split(spec, ",") {
		listen, upstream, ok := strings.Cut(pair, ">")
		if !ok {
			fmt.Fprintf(stderr, "sockmap relay: %q: want listen>upstream\n", pair)
			return 2
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			fmt.Fprintf(stderr, "sockmap relay: %v\n", err)
			return 1
		}
		lns = append(lns, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				go func() {
					if err := sockmapRelayConn(r, c.(*net.TCPConn), upstream); err != nil {
						fmt.Fprintf(stderr, "sockmap relay: %v\n", err)
					}
				}()
			}
		}()
	}
	fmt.Fprintln(stdout, "ready")
	io.Copy(io.Discard, stdin)
	for _, ln := range lns {
		ln.Close()
	}
	return 0
}

// sockmapRelayConn dials upstream for c and hands the pair to r.
func sockmapRelayConn(r *sockmapRelay, c *net.TCPConn, upstream string) error {
	u, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		c.Close()
		return err
	}
	a, err := sockmapFD(c)
	if err != nil {
		u.Close()
		return err
	}
	b, err := sockmapFD(u.(*net.TCPConn))
	if err != nil {
		unix.Close(a)
		return err
	}
	if err := r.relay(a, b, [2]uint64{}, nil); err != nil {
		unix.Close(a)
		unix.Close(b)
		return err
	}
	return nil
}

// sockmapResearchEnv, set to 1, runs the sockmap relay: its tests, and
// its path in BenchmarkProxyRelay. It is off by default: a negative
// result (slower than every other relay, with no backpressure) kept so
// that it can be measured again, not a path doorman takes.
const sockmapResearchEnv = "DOORMAN_BENCH_SOCKMAP"

// startSockmapRelay starts the sockmap relay as a process of its own in
// where and in a cgroup of its own, like startBareRelay. It returns its
// pid, or 0 and why if it is not asked for (sockmapResearchEnv) or the
// kernel or the capabilities refuse the BPF.
func startSockmapRelay(b *testing.B, where *testnet.Netns, spec string) (int, string) {
	b.Helper()
	if os.Getenv(sockmapResearchEnv) != "1" {
		return 0, "a research prototype with a negative result (issue 29's fourth pass), run only with " + sockmapResearchEnv + "=1"
	}
	grp := benchCgroup(b, "sockmap-relay")
	r := startRelayProcess(b, where, "sockmap relay", sockmapRelayEnv+"="+spec)
	if why, ok := strings.CutPrefix(r.line, "unsupported: "); ok {
		r.stop()
		return 0, strings.TrimSpace(why)
	}
	if r.line != "ready\n" {
		r.stop()
		b.Fatalf("sockmap relay did not start (%q, %v): %s", r.line, r.err, r.stderr.String())
	}
	benchJoin(b, grp, r.pid)
	return r.pid, ""
}
