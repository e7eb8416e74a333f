package nft

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
)

func TestPrefixMask(t *testing.T) {
	for _, tc := range []struct {
		bits, size int
		want       []byte
	}{
		{0, 4, []byte{0, 0, 0, 0}},
		{8, 4, []byte{255, 0, 0, 0}},
		{20, 4, []byte{255, 255, 240, 0}},
		{31, 4, []byte{255, 255, 255, 254}},
		{32, 4, []byte{255, 255, 255, 255}},
		{33, 16, []byte{255, 255, 255, 255, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		if got := prefixMask(tc.bits, tc.size); !bytes.Equal(got, tc.want) {
			t.Errorf("prefixMask(%d, %d) = %v, want %v", tc.bits, tc.size, got, tc.want)
		}
	}
}

// kinds names the expressions of a match by type, for comparisons of
// their shape.
func kinds(exprs []expr.Any) []string {
	var out []string
	for _, e := range exprs {
		switch c := e.(type) {
		case *expr.Cmp:
			out = append(out, map[expr.CmpOp]string{expr.CmpOpEq: "eq", expr.CmpOpNeq: "neq",
				expr.CmpOpGte: "gte", expr.CmpOpLte: "lte"}[c.Op])
		case *expr.Meta:
			out = append(out, "meta")
		case *expr.Payload:
			out = append(out, "payload")
		case *expr.Bitwise:
			out = append(out, "bitwise")
		case *expr.Range:
			out = append(out, "range")
		default:
			out = append(out, "other")
		}
	}
	return out
}

// TestEncodings holds the two encodings of one match apart (see the
// package doc): what differs between them is what Check sees.
func TestEncodings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		match []expr.Any
		want  string
	}{
		{"DaddrPrefix of a full-length prefix", DaddrPrefix(netip.MustParsePrefix("203.0.113.7/32")), "meta eq payload eq"},
		{"DaddrPrefix of a shorter one", DaddrPrefix(netip.MustParsePrefix("2001:db8::/32")), "meta eq payload bitwise eq"},
		{"DaddrPrefix of /0", DaddrPrefix(netip.MustParsePrefix("0.0.0.0/0")), "meta eq"},
		{"DaddrMasked of a full-length prefix", DaddrMasked(netip.MustParsePrefix("203.0.113.7/32")), "meta eq payload bitwise eq"},
		{"DaddrMasked of /0", DaddrMasked(netip.MustParsePrefix("::/0")), "meta eq payload bitwise eq"},
		{"SaddrMasked", SaddrMasked(netip.MustParsePrefix("198.51.100.0/24")), "meta eq payload bitwise eq"},
		{"Daddr", Daddr(netip.MustParseAddr("2001:db8::53")), "meta eq payload eq"},
		{"DportRange of one port", DportRange(53, 53), "payload eq"},
		{"DportRange", DportRange(1000, 2000), "payload range"},
		{"DportBetween of one port", DportBetween(53, 53), "payload gte lte"},
		{"IPLengthRange", IPLengthRange(false, EchoIPv4MinLen, EchoIPv4MaxLen), "payload range"},
		{"IPLengthBetween", IPLengthBetween(true, EchoIPv6MinLen, EchoIPv6MaxLen), "payload gte lte"},
		{"L4ProtoNot", L4ProtoNot(1, 58), "meta neq neq"},
		{"ICMPTypeNot", ICMPTypeNot(133, 135, 143), "payload neq neq neq"},
		{"OifNameNot", OifNameNot("br0"), "meta neq"},
	} {
		if got := strings.Join(kinds(tc.match), " "); got != tc.want {
			t.Errorf("%s = %v, want %s", tc.name, got, tc.want)
		}
	}

	// The fields each family's address is read from.
	for _, tc := range []struct {
		name   string
		match  []expr.Any
		offset uint32
		len    uint32
	}{
		{"ip daddr", Daddr(netip.MustParseAddr("203.0.113.53")), 16, 4},
		{"ip6 daddr", DaddrMasked(netip.MustParsePrefix("2001:db8::/64")), 24, 16},
		{"ip saddr", SaddrMasked(netip.MustParsePrefix("198.51.100.0/24")), 12, 4},
		{"ip6 saddr", SaddrMasked(netip.MustParsePrefix("2001:db8::/64")), 8, 16},
	} {
		p := tc.match[2].(*expr.Payload)
		if p.Base != expr.PayloadBaseNetworkHeader || p.Offset != tc.offset || p.Len != tc.len {
			t.Errorf("%s loads %+v, want network header offset %d length %d", tc.name, p, tc.offset, tc.len)
		}
	}
	if name := OifName("lo")[1].(*expr.Cmp).Data; len(name) != IfNameSize || !bytes.Equal(name, []byte("lo\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")) {
		t.Errorf("oifname data = %q, want %d bytes padded with zeros", name, IfNameSize)
	}
}
