package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// icmpPayloadLen is the payload every ICMP request carries: enough for a
// tunnel (ptunnel-ng, hans) to be worth it.
const icmpPayloadLen = 1000

// ICMP types (RFC 792, 950, 4443).
const (
	icmpEchoReply      = 0
	icmpEcho           = 8
	icmpTimestamp      = 13
	icmpTimestampReply = 14
	icmpInfo           = 15
	icmpInfoReply      = 16
	icmpMask           = 17
	icmpMaskReply      = 18
	icmpv6Echo         = 128
	icmpv6EchoReply    = 129
)

var icmpNames = map[int]string{
	icmpEchoReply: "echo reply", icmpEcho: "echo", icmpTimestamp: "timestamp", icmpTimestampReply: "timestamp reply",
	icmpInfo: "information", icmpInfoReply: "information reply", icmpMask: "address-mask", icmpMaskReply: "address-mask reply",
}

// icmpMessage is an ICMP message of type typ with identifier id, sequence
// 1, and a payload padded to icmpPayloadLen; the checksum is filled in for
// ICMP (IPv4) and left to the kernel for ICMPv6, which sums the
// pseudo-header.
func icmpMessage(typ byte, id uint16, attempt string, v6 bool) []byte {
	b := make([]byte, 8+icmpPayloadLen)
	b[0] = typ
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], 1)
	copy(b[8:], payload(attempt))
	if !v6 {
		binary.BigEndian.PutUint16(b[2:], checksum(b, 0))
	}
	return b
}

// icmpSocket opens an ICMP socket of type typ (SOCK_RAW, or SOCK_DGRAM
// for a ping socket) with a receive timeout.
func icmpSocket(v6 bool, typ int, timeout time.Duration) (int, error) {
	family, proto := unix.AF_INET, unix.IPPROTO_ICMP
	if v6 {
		family, proto = unix.AF_INET6, unix.IPPROTO_ICMPV6
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, err
	}
	tv := unix.NsecToTimeval((timeout / 4).Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return fd, nil
}

func sockaddr(a netip.Addr) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Addr: a.As16()}
}

// icmpTo sends ICMP requests with padded payloads to dst: over IPv4 echo,
// timestamp, information and address-mask requests through a raw socket
// and an echo request through a ping socket; over IPv6 echo requests
// through both. It then waits cfg.timeout for what comes back from dst.
func icmpTo(t *tally, cfg *config, dst netip.Addr, attempt string) {
	v6 := dst.Is6()
	what := "ICMP"
	if v6 {
		what = "ICMPv6"
	}
	types := []byte{icmpEcho, icmpTimestamp, icmpInfo, icmpMask}
	if v6 {
		types = []byte{icmpv6Echo}
	}
	replies := counted{}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, sock := range []struct {
		name string
		typ  int
	}{{"raw", unix.SOCK_RAW}, {"ping", unix.SOCK_DGRAM}} {
		fd, err := icmpSocket(v6, sock.typ, cfg.timeout)
		if err != nil {
			t.fail(fmt.Sprintf("%s %s socket", what, sock.name), err)
			continue
		}
		fds = append(fds, fd)
		sent := 0
		for _, typ := range types {
			if sock.typ == unix.SOCK_DGRAM && typ != icmpEcho && typ != icmpv6Echo {
				continue // ping sockets send echo requests only
			}
			msg := icmpMessage(typ, uint16(os.Getpid()), attempt, v6)
			if err := unix.Sendto(fd, msg, 0, sockaddr(dst)); err != nil {
				t.fail(fmt.Sprintf("%s %s %s request to %s", what, sock.name, icmpTypeName(typ, v6), dst), err)
				continue
			}
			t.wrote(len(msg))
			sent++
		}
		if sent > 0 {
			t.note("%s %s socket: %d requests of %d payload bytes to %s sent", what, sock.name, sent, icmpPayloadLen, dst)
		}
	}
	// Replies from dst, on either socket.
	deadline := time.Now().Add(cfg.timeout)
	buf := make([]byte, 65536)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, fd := range fds {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				n, from, err := unix.Recvfrom(fd, buf[i*32768:i*32768+32768], 0)
				if err != nil || n < 8 {
					continue
				}
				msg := buf[i*32768 : i*32768+n]
				var src netip.Addr
				switch sa := from.(type) {
				case *unix.SockaddrInet4:
					src = netip.AddrFrom4(sa.Addr)
				case *unix.SockaddrInet6:
					src = netip.AddrFrom16(sa.Addr)
				}
				if src != dst {
					continue
				}
				if !v6 && msg[0]>>4 == 4 { // a raw IPv4 socket delivers the IP header
					hl := int(msg[0]&0x0f) * 4
					if hl+8 > n {
						continue
					}
					msg = msg[hl:]
				}
				mu.Lock()
				replies.add(fmt.Sprintf("%s with %d payload bytes", icmpTypeName(msg[0], v6), len(msg)-8))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if lines := replies.lines(); len(lines) > 0 {
		t.note("from %s: %s", dst, strings.Join(lines, ", "))
	} else if len(fds) > 0 {
		t.note("nothing came back from %s", dst)
	}
}

func icmpTypeName(typ byte, v6 bool) string {
	if v6 {
		switch typ {
		case icmpv6Echo:
			return "echo"
		case icmpv6EchoReply:
			return "echo reply"
		}
		return fmt.Sprintf("type %d", typ)
	}
	if n, ok := icmpNames[int(typ)]; ok {
		return n
	}
	return fmt.Sprintf("type %d", typ)
}

// pingGroupRange is the sysctl that opens ping sockets to the groups in it.
func pingGroupRange() string {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ping_group_range")
	if err != nil {
		return "unreadable: " + describe(err)
	}
	return strings.Join(strings.Fields(string(data)), " ")
}

// icmpAll runs icmpTo for every address at once and gathers the tallies.
func icmpAll(cfg *config, attempt string, dsts []netip.Addr) row {
	var t tally
	t.note("ping_group_range %s", pingGroupRange())
	if len(dsts) == 0 {
		t.note("skipped: no targets")
		return t.row(attempt)
	}
	results := make([]tally, len(dsts))
	var wg sync.WaitGroup
	for i, dst := range dsts {
		wg.Go(func() { icmpTo(&results[i], cfg, dst, attempt) })
	}
	wg.Wait()
	for _, r := range results {
		t.sent += r.sent
		t.errs = append(t.errs, r.errs...)
		t.detail = append(t.detail, r.detail...)
	}
	return t.row(attempt)
}

func tryICMP(cfg *config) row {
	dsts := []netip.Addr{cfg.denied4}
	if cfg.denied6.IsValid() {
		dsts = append(dsts, cfg.denied6)
	}
	return icmpAll(cfg, "icmp", dsts)
}

func tryICMPLAN(cfg *config) row {
	dsts := append([]netip.Addr(nil), cfg.lan...)
	for _, a := range []netip.Addr{cfg.neighbour4, cfg.neighbour6} {
		if a.IsValid() {
			dsts = append(dsts, a)
		}
	}
	return icmpAll(cfg, "icmp-lan", dsts)
}
