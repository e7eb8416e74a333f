package testnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// ICMPRecorder counts the ICMP and ICMPv6 messages that reach a namespace,
// by type: echo, timestamp, information and address-mask requests carrying
// a tunnel's payload, router advertisements from a rogue router. Its raw
// sockets see a copy of every ICMP message the namespace receives for
// itself; the kernel answers them as it would anyway.
type ICMPRecorder struct {
	mu      sync.Mutex
	v4, v6  map[int]icmpCount
	sockets []*os.File
}

// icmpCount is what arrived of one type.
type icmpCount struct {
	messages int
	bytes    int // after the 8-byte ICMP header: the payload a tunnel carries
}

// RecordICMP starts counting the ICMP and ICMPv6 messages that reach x,
// on every interface, or only on iface if it is not "" (a bridge, say, so
// that the machine's own uplink in the root namespace does not count). It
// stops at t's cleanup.
func (x *Netns) RecordICMP(t testing.TB, iface string) *ICMPRecorder {
	t.Helper()
	r := &ICMPRecorder{v4: map[int]icmpCount{}, v6: map[int]icmpCount{}}
	err := x.Do(func() error {
		for _, s := range []struct {
			family, proto int
		}{{unix.AF_INET, unix.IPPROTO_ICMP}, {unix.AF_INET6, unix.IPPROTO_ICMPV6}} {
			fd, err := unix.Socket(s.family, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, s.proto)
			if err != nil {
				return fmt.Errorf("raw socket for protocol %d: %w", s.proto, err)
			}
			if iface != "" {
				if err := unix.BindToDevice(fd, iface); err != nil {
					unix.Close(fd)
					return fmt.Errorf("bind the raw socket to %s: %w", iface, err)
				}
			}
			// Non-blocking, so that os.File polls it and Close ends a Read.
			r.sockets = append(r.sockets, os.NewFile(uintptr(fd), fmt.Sprintf("icmp-%d", s.proto)))
		}
		return nil
	})
	if err != nil {
		r.close()
		t.Fatalf("testnet: RecordICMP in %s: %v", x.Name(), err)
	}
	var wg sync.WaitGroup
	for i, f := range r.sockets {
		wg.Go(func() { r.read(f, i == 1) })
	}
	t.Cleanup(func() {
		r.close()
		wg.Wait()
	})
	return r
}

func (r *ICMPRecorder) close() {
	for _, f := range r.sockets {
		f.Close()
	}
}

// read counts the messages on one raw socket until it is closed. An IPv4
// raw socket delivers the IP header too; an IPv6 one only the ICMPv6
// message.
func (r *ICMPRecorder) read(f *os.File, v6 bool) {
	buf := make([]byte, 65536)
	for {
		n, err := f.Read(buf)
		if errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		msg := buf[:n]
		if !v6 {
			if n < 20 || int(msg[0]&0x0f)*4 > n {
				continue
			}
			hl := int(msg[0]&0x0f) * 4
			if total := int(binary.BigEndian.Uint16(msg[2:])); total >= hl && total < n {
				msg = msg[:total]
			}
			msg = msg[hl:]
		}
		if len(msg) < 8 {
			continue
		}
		r.mu.Lock()
		m := r.v4
		if v6 {
			m = r.v6
		}
		c := m[int(msg[0])]
		c.messages++
		c.bytes += len(msg) - 8
		m[int(msg[0])] = c
		r.mu.Unlock()
	}
}

// ICMP is the number of ICMP (IPv4) messages of type typ that arrived,
// and the bytes they carried after the 8-byte ICMP header.
func (r *ICMPRecorder) ICMP(typ int) (messages, bytes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v4[typ].messages, r.v4[typ].bytes
}

// ICMPv6 is ICMP for ICMPv6 messages of type typ.
func (r *ICMPRecorder) ICMPv6(typ int) (messages, bytes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v6[typ].messages, r.v6[typ].bytes
}
