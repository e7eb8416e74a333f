// Package realdst finds where the host really sends a TCP connection it
// originated: the source of the reply tuple of the connection's conntrack
// entry, which differs from the address connect(2) was given when a nat
// OUTPUT rule (a DNAT, as kube-proxy installs for a service's cluster,
// external and load-balancer addresses) rewrote the destination.
//
// The socket's own view (getpeername) never shows the rewrite, and
// SO_ORIGINAL_DST answers the other question (where a redirected
// connection was going before the redirect). The conntrack entry does:
// one ctnetlink GET by the connection's original tuple, its reply tuple's
// source is the real destination.
//
// A Table is one netlink socket kept open for the process's life. Each
// lookup is one sendto and one recvfrom on it, made without the Go
// runtime's system-call bookkeeping (the relay loop calls it), into a
// buffer the Table owns, with no allocation, the request and the reply
// encoded and read here: the kernel answers a GET within the sendto, so
// the recvfrom never waits. ti-mo/conntrack, which package directlog uses
// for events, has a Conn.Get, but it cannot serve here: it asks for an
// acknowledgement, and the kernel (6.18 here) flags a GET's answer as part
// of a multipart message, whose end mdlayher/netlink then waits for and
// never gets, so the first lookup hangs; and each lookup would cost a
// peek and a read per message through the Go runtime's netpoller.
package realdst

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Netlink and ctnetlink constants (linux/netfilter/nfnetlink.h,
// linux/netfilter/nfnetlink_conntrack.h).
const (
	nfnlSubsysCTNetlink = 1
	ctMsgNew            = 0
	ctMsgGet            = 1

	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaTupleIP    = 1
	ctaTupleProto = 2
	ctaIPv4Src    = 1
	ctaIPv4Dst    = 2
	ctaIPv6Src    = 3
	ctaIPv6Dst    = 4
	ctaProtoNum   = 1
	ctaProtoSrc   = 2
	ctaProtoDst   = 3

	nlaNested   = 0x8000
	nlaTypeMask = 0x3fff

	nlmsgHdrLen = 16
	nfgenLen    = 4
)

// bufSize holds a GET's reply: a conntrack entry is a few hundred bytes.
const bufSize = 4096

// Table looks connections up in the conntrack table of the network
// namespace it was opened in. Its methods are safe for concurrent use.
type Table struct {
	mu     sync.Mutex
	fd     int
	seq    uint32
	req    [128]byte
	buf    [bufSize]byte
	closed bool
}

// Open opens a ctnetlink socket in the calling thread's network namespace
// (the one the connections to look up are made in) and checks that the
// kernel answers it: an error says why the table cannot be read
// (ctnetlink not available, or no CAP_NET_ADMIN in the namespace).
func Open() (*Table, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("conntrack netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("conntrack netlink socket: bind: %w", err)
	}
	t := &Table{fd: fd}
	// A tuple no connection has: the kernel says there is no such entry,
	// or why it will not say.
	zero := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if _, _, err := t.Destination(zero, zero); err != nil {
		t.Close()
		return nil, fmt.Errorf("conntrack lookup: %w", err)
	}
	return t, nil
}

// Close closes the table's socket.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	return unix.Close(t.fd)
}

// ErrClosed is the error of a lookup in a closed Table.
var ErrClosed = errors.New("conntrack table closed")

// Destination returns the real destination of the TCP connection from
// local to remote (as the socket sees them: getsockname and the address
// it connected to): remote itself, unless the host rewrote it, when
// rewritten is true. A connection conntrack does not track (no rule in
// the namespace uses conntrack, so no NAT rule can have rewritten it)
// is remote, not rewritten.
func (t *Table) Destination(local, remote netip.AddrPort) (real netip.AddrPort, rewritten bool, err error) {
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	if local.Addr().Is4() != remote.Addr().Is4() {
		return remote, false, fmt.Errorf("local %v and remote %v are of different families", local, remote)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return remote, false, ErrClosed
	}
	t.seq++
	req := encodeGet(t.req[:0], t.seq, local, remote)
	if err := sendto(t.fd, req); err != nil {
		return remote, false, os.NewSyscallError("sendto", err)
	}
	for {
		n, err := recvfrom(t.fd, t.buf[:])
		if err != nil {
			return remote, false, os.NewSyscallError("recvfrom", err)
		}
		if n > len(t.buf) {
			return remote, false, fmt.Errorf("conntrack reply of %d bytes is longer than %d", n, len(t.buf))
		}
		found, src, seq, err := decodeReply(t.buf[:n], remote.Addr().Is4())
		if seq != t.seq {
			continue // an earlier request's reply: not this one's
		}
		switch {
		case errors.Is(err, unix.ENOENT):
			return remote, false, nil
		case err != nil:
			return remote, false, err
		case !found:
			return remote, false, errors.New("conntrack reply without a reply tuple")
		}
		return src, src != remote, nil
	}
}

// encodeGet appends to b a ctnetlink GET of the TCP entry whose original
// tuple is local -> remote, with sequence number seq.
func encodeGet(b []byte, seq uint32, local, remote netip.AddrPort) []byte {
	family, srcType, dstType := byte(unix.AF_INET), uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
	if !remote.Addr().Is4() {
		family, srcType, dstType = unix.AF_INET6, ctaIPv6Src, ctaIPv6Dst
	}
	b = binary.NativeEndian.AppendUint32(b, 0) // length, below
	b = binary.NativeEndian.AppendUint16(b, nfnlSubsysCTNetlink<<8|ctMsgGet)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // port id: the kernel's
	b = append(b, family, unix.NFNETLINK_V0, 0, 0)
	tuple := len(b)
	b = attrHeader(b, ctaTupleOrig|nlaNested)
	ip := len(b)
	b = attrHeader(b, ctaTupleIP|nlaNested)
	la, ra := local.Addr().As16(), remote.Addr().As16()
	if remote.Addr().Is4() {
		b = attrBytes(b, srcType, la[12:])
		b = attrBytes(b, dstType, ra[12:])
	} else {
		b = attrBytes(b, srcType, la[:])
		b = attrBytes(b, dstType, ra[:])
	}
	b = endAttr(b, ip)
	proto := len(b)
	b = attrHeader(b, ctaTupleProto|nlaNested)
	var num [1]byte
	var sport, dport [2]byte
	num[0] = unix.IPPROTO_TCP
	binary.BigEndian.PutUint16(sport[:], local.Port())
	binary.BigEndian.PutUint16(dport[:], remote.Port())
	b = attrBytes(b, ctaProtoNum, num[:])
	b = attrBytes(b, ctaProtoSrc, sport[:])
	b = attrBytes(b, ctaProtoDst, dport[:])
	b = endAttr(b, proto)
	b = endAttr(b, tuple)
	binary.NativeEndian.PutUint32(b[0:4], uint32(len(b)))
	return b
}

// attrHeader appends a netlink attribute header of type typ whose length
// endAttr fills in.
func attrHeader(b []byte, typ uint16) []byte {
	b = binary.NativeEndian.AppendUint16(b, 0)
	return binary.NativeEndian.AppendUint16(b, typ)
}

// endAttr sets the length of the attribute that starts at start to what
// follows it in b.
func endAttr(b []byte, start int) []byte {
	binary.NativeEndian.PutUint16(b[start:], uint16(len(b)-start))
	return b
}

// attrBytes appends an attribute of type typ holding v, padded to four
// bytes.
func attrBytes(b []byte, typ uint16, v []byte) []byte {
	start := len(b)
	b = attrHeader(b, typ)
	b = append(b, v...)
	b = endAttr(b, start)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// decodeReply reads the first netlink message of b: an error (the
// kernel's errno as a unix.Errno; ENOENT for no entry), or a conntrack
// entry, whose reply tuple's source it returns. seq is the message's
// sequence number.
func decodeReply(b []byte, v4 bool) (found bool, src netip.AddrPort, seq uint32, err error) {
	if len(b) < nlmsgHdrLen {
		return false, src, 0, fmt.Errorf("conntrack reply of %d bytes", len(b))
	}
	length := int(binary.NativeEndian.Uint32(b[0:4]))
	typ := binary.NativeEndian.Uint16(b[4:6])
	seq = binary.NativeEndian.Uint32(b[8:12])
	if length < nlmsgHdrLen || length > len(b) {
		return false, src, seq, fmt.Errorf("conntrack reply: message length %d of %d bytes", length, len(b))
	}
	body := b[nlmsgHdrLen:length]
	switch {
	case typ == unix.NLMSG_ERROR:
		if len(body) < 4 {
			return false, src, seq, errors.New("conntrack reply: short error message")
		}
		if e := int32(binary.NativeEndian.Uint32(body[0:4])); e != 0 {
			return false, src, seq, unix.Errno(-e)
		}
		return false, src, seq, errors.New("conntrack reply: an acknowledgement, no entry")
	case typ != nfnlSubsysCTNetlink<<8|ctMsgNew:
		return false, src, seq, fmt.Errorf("conntrack reply of message type %#x", typ)
	case len(body) < nfgenLen:
		return false, src, seq, errors.New("conntrack reply: short message")
	}
	reply, ok := findAttr(body[nfgenLen:], ctaTupleReply)
	if !ok {
		return false, src, seq, nil
	}
	ipAttrs, okIP := findAttr(reply, ctaTupleIP)
	protoAttrs, okProto := findAttr(reply, ctaTupleProto)
	if !okIP || !okProto {
		return false, src, seq, errors.New("conntrack reply: reply tuple without address or ports")
	}
	srcType, size := uint16(ctaIPv4Src), 4
	if !v4 {
		srcType, size = ctaIPv6Src, 16
	}
	a, okA := findAttr(ipAttrs, srcType)
	p, okP := findAttr(protoAttrs, ctaProtoSrc)
	if !okA || len(a) != size || !okP || len(p) != 2 {
		return false, src, seq, errors.New("conntrack reply: reply tuple without its source")
	}
	addr, _ := netip.AddrFromSlice(a)
	return true, netip.AddrPortFrom(addr, binary.BigEndian.Uint16(p)), seq, nil
}

// findAttr returns the payload of the first attribute of type typ among
// the attributes in b.
func findAttr(b []byte, typ uint16) ([]byte, bool) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		t := binary.NativeEndian.Uint16(b[2:4]) & nlaTypeMask
		if l < 4 || l > len(b) {
			return nil, false
		}
		if t == typ {
			return b[4:l], true
		}
		l = (l + 3) &^ 3
		if l > len(b) {
			return nil, false
		}
		b = b[l:]
	}
	return nil, false
}

// sendto sends b to the kernel on the netlink socket fd.
func sendto(fd int, b []byte) error {
	sa := unix.RawSockaddrNetlink{Family: unix.AF_NETLINK}
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0,
		uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	if e != 0 {
		return e
	}
	return nil
}

// recvfrom reads one message from fd into b without waiting, returning its
// whole length (MSG_TRUNC), which may be more than len(b).
func recvfrom(fd int, b []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
