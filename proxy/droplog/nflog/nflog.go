// Package nflog reads the packets that nftables' log statement sends to
// an NFLOG group (nfnetlink_log): it binds one group in the calling
// thread's network namespace and returns each logged packet's headers,
// mark, log prefix and interfaces.
//
// No library that is kept up and resolves in this module graph speaks
// NFLOG (github.com/florianl/go-nflog is not served by the module proxy
// doorman builds from), so the few messages are written here on top of
// mdlayher/netlink and ti-mo/netfilter's nfgenmsg header, which the
// module already uses for conntrack: one configuration message (bind the
// group, copy packets), then packet messages, each a flat list of
// attributes (linux/netfilter/nfnetlink_log.h).
package nflog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"
)

// Message types and attributes of subsystem NFNL_SUBSYS_ULOG, from
// linux/netfilter/nfnetlink_log.h.
const (
	subsysULOG = 4

	msgPacket = 0 // NFULNL_MSG_PACKET
	msgConfig = 1 // NFULNL_MSG_CONFIG

	attrPacketHdr = 1  // NFULA_PACKET_HDR: __be16 hw_protocol, u8 hook, u8 pad
	attrMark      = 2  // NFULA_MARK: __be32
	attrInDev     = 4  // NFULA_IFINDEX_INDEV: __be32
	attrOutDev    = 5  // NFULA_IFINDEX_OUTDEV: __be32
	attrPayload   = 9  // NFULA_PAYLOAD: from the network header on
	attrPrefix    = 10 // NFULA_PREFIX: NUL-terminated string

	attrCfgCmd  = 1 // NFULA_CFG_CMD: u8 command
	attrCfgMode = 2 // NFULA_CFG_MODE: __be32 copy_range, u8 copy_mode, u8 pad
	// NFULA_CFG_QTHRESH: __be32, how many packets the kernel batches
	// in one message (default 100, or a second's wait).
	attrCfgQThresh = 5

	cmdBind   = 1 // NFULNL_CFG_CMD_BIND
	cmdUnbind = 2 // NFULNL_CFG_CMD_UNBIND

	copyPacket = 2 // NFULNL_COPY_PACKET
)

// ReadBuffer is the socket's receive buffer: what the kernel holds for
// the reader before it drops log messages (never packets: a log message
// that does not fit is lost, and the socket's next read says so).
const ReadBuffer = 1 << 20

// Packet is one logged packet.
type Packet struct {
	// Family is the nftables family of the table whose rule logged it
	// (unix.NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_BRIDGE, ...).
	Family uint8
	// Group is the NFLOG group it was logged to.
	Group uint16
	// HWProto is its ethertype (0x0800 IPv4, 0x86dd IPv6, 0x0806 ARP),
	// and Hook the netfilter hook it was logged at.
	HWProto uint16
	Hook    uint8
	// Mark is the packet's mark when it was logged.
	Mark uint32
	// Prefix is the log statement's prefix.
	Prefix string
	// InDev and OutDev are the indexes of its input and output
	// interfaces, 0 if none.
	InDev, OutDev uint32
	// Payload is the packet from its network header on, cut at the log
	// statement's snaplen.
	Payload []byte
}

// ErrLost is returned (wrapped) by Receive when the kernel dropped log
// messages because the socket's buffer was full.
var ErrLost = errors.New("nflog: log messages lost: the socket's buffer was full")

// Conn is a socket bound to one NFLOG group.
type Conn struct {
	c     *netlink.Conn
	group uint16
}

// Open binds group in the calling thread's network namespace and asks
// for each packet's first bytes (as many as the logging rule's snaplen).
// It needs CAP_NET_ADMIN there. A group bound by another socket fails
// with an error that wraps unix.EBUSY.
func Open(group uint16) (*Conn, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("nflog: open a netfilter socket: %w", err)
	}
	if err := c.SetReadBuffer(ReadBuffer); err != nil {
		c.Close()
		return nil, fmt.Errorf("nflog: set the read buffer: %w", err)
	}
	// A lost message is an error to read, not a silent gap.
	if err := c.SetOption(netlink.NoENOBUFS, false); err != nil {
		c.Close()
		return nil, fmt.Errorf("nflog: set NETLINK_NO_ENOBUFS: %w", err)
	}
	n := &Conn{c: c, group: group}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode[0:4], 0xffff)
	mode[4] = copyPacket
	if err := n.config(
		netfilter.Attribute{Type: attrCfgCmd, Data: []byte{cmdBind}},
		netfilter.Attribute{Type: attrCfgMode, Data: mode},
		// Each packet at once: a line per drop as it happens, not a
		// second later.
		netfilter.Attribute{Type: attrCfgQThresh, Data: binary.BigEndian.AppendUint32(nil, 1)},
	); err != nil {
		c.Close()
		return nil, fmt.Errorf("nflog: bind group %d: %w", group, err)
	}
	return n, nil
}

// config sends one configuration message for the group and waits for
// its acknowledgement, skipping the packets that arrive meanwhile.
func (n *Conn) config(attrs ...netfilter.Attribute) error {
	m, err := netfilter.MarshalNetlink(netfilter.Header{
		SubsystemID: subsysULOG, MessageType: msgConfig,
		Family: netfilter.ProtoUnspec, ResourceID: n.group,
		Flags: netlink.Request | netlink.Acknowledge,
	}, attrs)
	if err != nil {
		return err
	}
	sent, err := n.c.Send(m)
	if err != nil {
		return err
	}
	if err := n.c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	defer n.c.SetReadDeadline(time.Time{})
	for {
		msgs, err := n.c.Receive()
		if err != nil {
			if isLost(err) {
				continue
			}
			return err
		}
		for _, r := range msgs {
			if r.Header.Type == netlink.Error && r.Header.Sequence == sent.Header.Sequence {
				return nil // an acknowledgement: errors came back as err
			}
		}
	}
}

// Close unbinds the group and closes the socket.
func (n *Conn) Close() error {
	// Closing alone unbinds too (the kernel releases a closed socket's
	// instances); the explicit unbind frees the group at once for a
	// successor that binds it before this socket is gone.
	_ = n.config(netfilter.Attribute{Type: attrCfgCmd, Data: []byte{cmdUnbind}})
	return n.c.Close()
}

// Receive returns the packets logged since the last call, waiting for at
// least one until deadline (then it returns none and an error wrapping
// os.ErrDeadlineExceeded). Messages that are not packets are skipped. An
// error wrapping ErrLost says the kernel dropped messages; reads go on.
func (n *Conn) Receive(deadline time.Time) ([]Packet, error) {
	if err := n.c.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	msgs, err := n.c.Receive()
	if err != nil {
		if isLost(err) {
			return nil, fmt.Errorf("%w (%v)", ErrLost, err)
		}
		return nil, err
	}
	out := make([]Packet, 0, len(msgs))
	for _, m := range msgs {
		p, ok, err := ParseMessage(m)
		if err != nil || !ok {
			continue // not a packet, or one the kernel should never send
		}
		out = append(out, p)
	}
	return out, nil
}

func isLost(err error) bool { return errors.Is(err, unix.ENOBUFS) }

// ParseMessage reads a packet message. ok is false for a message of
// another type; an error says the message is malformed.
func ParseMessage(m netlink.Message) (p Packet, ok bool, err error) {
	if uint16(m.Header.Type) != subsysULOG<<8|msgPacket {
		return Packet{}, false, nil
	}
	h, attrs, err := netfilter.UnmarshalNetlink(m)
	if err != nil {
		return Packet{}, false, fmt.Errorf("nflog: packet message: %w", err)
	}
	p = Packet{Family: uint8(h.Family), Group: h.ResourceID}
	for _, a := range attrs {
		switch a.Type {
		case attrPacketHdr:
			if len(a.Data) < 3 {
				return Packet{}, false, fmt.Errorf("nflog: packet header of %d bytes, want 4", len(a.Data))
			}
			p.HWProto, p.Hook = binary.BigEndian.Uint16(a.Data), a.Data[2]
		case attrMark, attrInDev, attrOutDev:
			if len(a.Data) != 4 {
				return Packet{}, false, fmt.Errorf("nflog: attribute %d of %d bytes, want 4", a.Type, len(a.Data))
			}
			v := binary.BigEndian.Uint32(a.Data)
			switch a.Type {
			case attrMark:
				p.Mark = v
			case attrInDev:
				p.InDev = v
			default:
				p.OutDev = v
			}
		case attrPayload:
			p.Payload = a.Data
		case attrPrefix:
			b := a.Data
			for i, c := range b {
				if c == 0 {
					b = b[:i]
					break
				}
			}
			p.Prefix = string(b)
		}
	}
	return p, true, nil
}
