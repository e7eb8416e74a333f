package droplog

import (
	"encoding/hex"
	"testing"
)

func TestParseFlow(t *testing.T) {
	for _, c := range []struct {
		name    string
		hwProto uint16
		hex     string
		src     string
		dst     string
		proto   string
		icmp    int
	}{
		{"udp4", etherIPv4, "45000020000000004011000" + "0" + "0a000002cb00710d" + "9c4027 0f", "10.0.0.2:40000", "203.0.113.13:9999", "udp", -1},
		{"tcp4 with options", etherIPv4, "460000200000000040060000" + "0a000002cb00710d" + "00000000" + "04d2 0050", "10.0.0.2:1234", "203.0.113.13:80", "tcp", -1},
		{"icmp echo", etherIPv4, "45000020000000004001000" + "0" + "0a000002cb00710d" + "0800", "10.0.0.2", "203.0.113.13", "icmp", 8},
		{"later fragment", etherIPv4, "45000020000020014011000" + "0" + "0a000002cb00710d" + "9c40270f", "10.0.0.2", "203.0.113.13", "udp", -1},
		{"udp6 behind hop-by-hop", etherIPv6, "600000000010" + "00" + "40" + "20010db8000000000000000000000002" + "20010db8000000000000000000000009" +
			"1100000000000000" + "0035 0035", "[2001:db8::2]:53", "[2001:db8::9]:53", "udp", -1},
		{"icmpv6 router advert", etherIPv6, "6000000000083aff" + "fe800000000000000000000000000002" + "ff020000000000000000000000000001" + "8600", "fe80::2", "ff02::1", "icmpv6", 134},
		{"arp", etherARP, "0001080006040001" + "020000000002" + "0a000002" + "000000000000" + "0a000001", "10.0.0.2", "10.0.0.1", "arp", -1},
		{"lldp", 0x88cc, "", "", "", "ethertype-0x88cc", -1},
	} {
		b, err := hex.DecodeString(stripSpaces(c.hex))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		f, err := ParseFlow(c.hwProto, b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if src, dst := f.endpoint(f.Src, f.SrcPort), f.endpoint(f.Dst, f.DstPort); src != c.src || dst != c.dst || f.Proto != c.proto || f.ICMPType != c.icmp {
			t.Errorf("%s: %s -> %s %s icmp %d, want %s -> %s %s icmp %d", c.name, src, dst, f.Proto, f.ICMPType, c.src, c.dst, c.proto, c.icmp)
		}
	}
	for _, bad := range []string{"", "45", "65000000", "4100002000000000401100000a000002cb00710d"} {
		b, _ := hex.DecodeString(bad)
		if _, err := ParseFlow(etherIPv4, b); err == nil {
			t.Errorf("ParseFlow(%s) took a malformed ipv4 header", bad)
		}
	}
}

func stripSpaces(s string) string {
	out := make([]byte, 0, len(s))
	for i := range len(s) {
		if s[i] != ' ' {
			out = append(out, s[i])
		}
	}
	return string(out)
}

func FuzzParseFlow(f *testing.F) {
	f.Add(uint16(etherIPv4), []byte("E\x00\x00 \x00\x00\x00\x00@\x11\x00\x00\n\x00\x00\x02\xcb\x00q\r\x9c@'\x0f"))
	f.Add(uint16(etherIPv6), make([]byte, 48))
	f.Add(uint16(etherARP), make([]byte, 28))
	f.Fuzz(func(t *testing.T, hw uint16, b []byte) {
		fl, err := ParseFlow(hw, b)
		if err != nil {
			return
		}
		if fl.Proto == "" {
			t.Errorf("no protocol for %x", b)
		}
		_ = Line("s", "r", fl).Attrs()
	})
}
