package integration

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ports of the streaming servers the buffer tests start on apiName's
// address in the fake internet.
const (
	streamPort = 7001 // writes zeros until the client goes
	bulkPort   = 7002 // writes bulkSize zeros, then closes
)

// startStreamServers starts, in the bed's internet, a server on
// apiAddr4:streamPort that sends zeros to every connection until it is
// closed (it never reads), and one on apiAddr4:bulkPort that sends size
// zeros and closes. They stop at the test's end.
func (b *floodBed) startStreamServers(size int64) {
	b.tb.Helper()
	var lns []net.Listener
	err := b.net.InetNS().Do(func() error {
		for _, port := range []int{streamPort, bulkPort} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(apiAddr4, uint16(port)).String())
			if err != nil {
				return err
			}
			lns = append(lns, ln)
		}
		return nil
	})
	if err != nil {
		b.tb.Fatalf("stream servers: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	serve := func(ln net.Listener, send func(net.Conn)) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					c.Close()
				}()
				send(c)
			})
		}
	}
	zeros := make([]byte, 64<<10)
	wg.Go(func() {
		serve(lns[0], func(c net.Conn) {
			// Its own queue small: what this test measures is the
			// proxy's, and the host's TCP memory is everyone's.
			c.(*net.TCPConn).SetWriteBuffer(64 << 10)
			for {
				if _, err := c.Write(zeros); err != nil {
					return
				}
			}
		})
	})
	wg.Go(func() {
		serve(lns[1], func(c net.Conn) {
			io.CopyN(c, zeroReader{}, size)
			// A close with the ClientHello unread would be a reset,
			// which may overtake the last bytes.
			c.(*net.TCPConn).CloseWrite()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.Copy(io.Discard, c)
		})
	})
	b.tb.Cleanup(func() {
		for _, ln := range lns {
			ln.Close()
		}
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// zeroReader reads zeros, endlessly.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// held is what one process's sockets and pipes hold: the bytes queued
// in its TCP sockets (SO_MEMINFO: the receive queues' rmem_alloc and the
// send queues' wmem_queued, as the kernel charges them) and in its pipes
// (FIONREAD, alias TIOCINQ).
type held struct {
	recv, send, pipes int64
	sockets           int
}

func (h held) total() int64 { return h.recv + h.send + h.pipes }

func (h held) String() string {
	return fmt.Sprintf("%d KiB (receive queues %d KiB, send queues %d KiB, pipes %d KiB, %d TCP sockets)",
		h.total()>>10, h.recv>>10, h.send>>10, h.pipes>>10, h.sockets)
}

// heldBy measures what process pid's sockets and pipes hold, through
// duplicates of its descriptors (pidfd_getfd).
func heldBy(pid int) (held, error) {
	var h held
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return h, err
	}
	defer unix.Close(pidfd)
	dir := filepath.Join("/proc", itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return h, err
	}
	pipes := map[string]bool{}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var target int
		if _, err := fmtSscan(e.Name(), &target); err != nil {
			continue
		}
		isPipe := strings.HasPrefix(link, "pipe:")
		if !isPipe && !strings.HasPrefix(link, "socket:") || isPipe && pipes[link] {
			continue
		}
		fd, err := unix.PidfdGetfd(pidfd, target, 0)
		if err != nil {
			continue // closed meanwhile
		}
		if isPipe {
			if n, err := unix.IoctlGetInt(fd, unix.TIOCINQ); err == nil {
				pipes[link] = true
				h.pipes += int64(n)
			}
			unix.Close(fd)
			continue
		}
		if proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err == nil && proto == unix.IPPROTO_TCP {
			var mi [unix.SK_MEMINFO_VARS]uint32
			l := uint32(unsafe.Sizeof(mi))
			_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
				uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&l)), 0)
			if errno == 0 {
				h.sockets++
				h.recv += int64(mi[unix.SK_MEMINFO_RMEM_ALLOC])
				h.send += int64(mi[unix.SK_MEMINFO_WMEM_QUEUED])
			}
		}
		unix.Close(fd)
	}
	return h, nil
}

// peakHeld samples what pid holds every 250 ms for d and returns the
// sample with the most in its sockets.
func peakHeld(tb testing.TB, pid int, d time.Duration) held {
	tb.Helper()
	var peak held
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		h, err := heldBy(pid)
		if err != nil {
			tb.Fatalf("what proxy %d holds: %v", pid, err)
		}
		if h.recv+h.send >= peak.recv+peak.send {
			peak = h
		}
	}
	return peak
}

// streamUnread opens n connections from s to the streaming server's
// address (no name: the proxy dials the address an address entry admits,
// without a lookup), each sending a line, reading the first bytes of the
// stream and then nothing (once one does not get them, the rest read
// nothing at all). It returns how many got their first bytes.
func (s *floodSandbox) streamUnread(n int, first int64) int {
	s.b.tb.Helper()
	conns := make([]*net.TCPConn, 0, n)
	s.b.tb.Cleanup(func() { closeAll(conns) })
	read, full := 0, false
	for range n {
		c, err := s.ns.DialTCP(netip.AddrPortFrom(apiAddr4, streamPort).String())
		if err != nil {
			continue
		}
		conns = append(conns, c)
		// Past the budget a new connection gets a segment or two,
		// not its first bytes: no need to wait long for them.
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("stream, please\n")); err != nil {
			continue
		}
		if full {
			continue
		}
		if _, err := io.CopyN(io.Discard, c, first); err == nil {
			read++
		} else {
			full = true // the budget is taken: the rest only ask
		}
	}
	return read
}

// bulk reads size bytes from the bulk server through s's proxy.
func (s *floodSandbox) bulk(size int64) (int64, error) {
	c, err := s.ns.DialTCP(netip.AddrPortFrom(apiAddr4, bulkPort).String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Write(s.b.hello); err != nil {
		return 0, err
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := io.Copy(io.Discard, c)
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes of %d", n, size)
	}
	return n, err
}

// proxyOf returns the pid of the one worker serving s.
func (s *floodSandbox) proxyOf() int {
	s.b.tb.Helper()
	pids := proxiesFor(s.rt.ContainerID)
	if len(pids) != 1 {
		s.b.tb.Fatalf("proxies of %s: %v", s.rt.ContainerID, pids)
	}
	return pids[0]
}

// memoryCgroupOf returns the v1 memory cgroup directory of process pid,
// or "" where the memory controller is not v1's.
func memoryCgroupOf(pid int) string {
	data, _ := os.ReadFile(filepath.Join("/proc", itoa(pid), "cgroup"))
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && strings.Contains(","+f[1]+",", ",memory,") {
			return filepath.Join("/sys/fs/cgroup/memory", f[2])
		}
	}
	return ""
}

// cgroupValue reads a number from a cgroup file ("" if absent).
func cgroupValue(dir, file string) string {
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// A sandbox whose connections to an allowed host that streams data are
// read for a while and then never again (as a workload that wants to tie
// up the host's memory would: its proxy's buffers grow with the reading,
// then fill) holds in its proxy's sockets no more than its budget of
// bytes in flight (limits.bufferBytes), however many connections it
// opens: the kernel charges the proxy's sockets to its cgroup, whose TCP
// limit is the budget, and stops queueing more there. A neighbour's bulk
// transfer meanwhile completes, and its proxy's sockets never meet their
// own limit.
func TestBuffersUnreadStreams(t *testing.T) {
	b := newFloodBed(t, "")
	const budget = 8 << 20
	const bulkSize = 64 << 20
	b.startStreamServers(bulkSize)
	hog := b.sandboxAllowing(map[string]any{"bufferBytes": budget}, apiAddr4.String()+":"+itoa(streamPort))
	neighbour := b.sandbox(nil)
	pid := hog.proxyOf()
	hogCgroup, neighbourCgroup := memoryCgroupOf(pid), memoryCgroupOf(neighbour.proxyOf())

	opened := 0
	for _, n := range []int{25, 50, 100} {
		read := hog.streamUnread(n-opened, 256<<10)
		opened = n
		h := peakHeld(t, pid, 3*time.Second)
		t.Logf("%d streams (%d more of which read their first 256 KiB), then not read at all: the proxy holds at most %v", n, read, h)
		// The budget, and what the kernel takes whatever the limit: a
		// socket whose receive queue is empty is given a segment (up
		// to 64 KiB here, where segments are a veth's), and one whose
		// send queue is below its buffer a segment to send.
		if sockets := h.recv + h.send; sockets > budget+int64(n)*128<<10 {
			t.Fatalf("%d unread streams: the proxy's sockets hold %d KiB, over the budget of %d KiB", n, sockets>>10, budget>>10)
		}
	}
	if hogCgroup != "" {
		t.Logf("the hog's cgroup: TCP limit %s, peak %s, limit reached %s times", cgroupValue(hogCgroup, "memory.kmem.tcp.limit_in_bytes"),
			cgroupValue(hogCgroup, "memory.kmem.tcp.max_usage_in_bytes"), cgroupValue(hogCgroup, "memory.kmem.tcp.failcnt"))
	}
	start := time.Now()
	if n, err := neighbour.bulk(bulkSize); err != nil {
		t.Fatalf("the neighbour's bulk transfer: %v (%d bytes)", err, n)
	}
	t.Logf("the neighbour's %d MiB took %v", bulkSize>>20, time.Since(start).Round(time.Millisecond))
	if neighbourCgroup != "" {
		if f := cgroupValue(neighbourCgroup, "memory.kmem.tcp.failcnt"); f != "0" {
			t.Errorf("the neighbour's sockets met their limit %s times", f)
		}
		t.Logf("the neighbour's cgroup: TCP peak %s of %s", cgroupValue(neighbourCgroup, "memory.kmem.tcp.max_usage_in_bytes"),
			cgroupValue(neighbourCgroup, "memory.kmem.tcp.limit_in_bytes"))
	}
}
