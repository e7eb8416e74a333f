package nflog

import (
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/netfilter"
)

// packetMessage is a packet message as the kernel sends it.
func packetMessage(t testing.TB, group uint16, attrs []netfilter.Attribute) netlink.Message {
	t.Helper()
	m, err := netfilter.MarshalNetlink(netfilter.Header{SubsystemID: subsysULOG, MessageType: msgPacket, Family: netfilter.ProtoIPv4, ResourceID: group}, attrs)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParseMessage(t *testing.T) {
	mark := binary.BigEndian.AppendUint32(nil, 3)
	indev := binary.BigEndian.AppendUint32(nil, 7)
	m := packetMessage(t, 0xd001, []netfilter.Attribute{
		{Type: attrPacketHdr, Data: []byte{0x08, 0x00, 0, 0}},
		{Type: attrMark, Data: mark},
		{Type: attrInDev, Data: indev},
		{Type: attrPrefix, Data: []byte("table inet doorman-host\x00")},
		{Type: attrPayload, Data: []byte{0x45, 0}},
	})
	p, ok, err := ParseMessage(m)
	if err != nil || !ok {
		t.Fatalf("ParseMessage: %v %v", ok, err)
	}
	if p.Group != 0xd001 || p.HWProto != 0x0800 || p.Mark != 3 || p.InDev != 7 || p.Prefix != "table inet doorman-host" || len(p.Payload) != 2 || p.Family != uint8(netfilter.ProtoIPv4) {
		t.Errorf("parsed %+v", p)
	}
	m.Header.Type = netlink.HeaderType(subsysULOG<<8 | msgConfig)
	if _, ok, _ := ParseMessage(m); ok {
		t.Error("a config message parsed as a packet")
	}
	bad := packetMessage(t, 1, []netfilter.Attribute{{Type: attrMark, Data: []byte{1}}})
	if _, _, err := ParseMessage(bad); err == nil {
		t.Error("a 1-byte mark parsed")
	}
}

func FuzzParseMessage(f *testing.F) {
	m := packetMessage(f, 0xd001, []netfilter.Attribute{
		{Type: attrPacketHdr, Data: []byte{0x08, 0x00, 0, 0}},
		{Type: attrMark, Data: []byte{0, 0, 0, 3}},
		{Type: attrPrefix, Data: []byte("x\x00")},
		{Type: attrPayload, Data: []byte{0x45, 0}},
	})
	f.Add(m.Data)
	f.Fuzz(func(t *testing.T, data []byte) {
		msg := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(subsysULOG<<8 | msgPacket)}, Data: data}
		_, _, _ = ParseMessage(msg)
	})
}
