package conf

import (
	"strconv"
	"strings"
	"testing"
)

func TestNormalizeName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"example.com", "example.com"},
		{"Example.COM", "example.com"},
		{"example.com.", "example.com"},
		{"bücher.de", "xn--bcher-kva.de"},
		{"xn--bcher-kva.de", "xn--bcher-kva.de"},
		{"XN--BCHER-KVA.DE", "xn--bcher-kva.de"},
		{"ＥＸＡＭＰＬＥ．ｃｏｍ", "example.com"},
		{"例え.テスト", "xn--r8jz45g.xn--zckzah"},
		{"faß.de", "xn--fa-hia.de"}, // non-transitional: ß is kept
		{"_dmarc.example.com", "_dmarc.example.com"},
		{"a-b--c.example.com", "a-b--c.example.com"},
		{"-a.example.com", "-a.example.com"},
		{"localhost", "localhost"},
		{"203.0.113.7", "203.0.113.7"}, // a valid name; no entry matches it
		{name253, name253},
		{name253 + ".", name253},
		{strings.Repeat("a", 63), strings.Repeat("a", 63)},
	}
	for _, tt := range tests {
		got, err := NormalizeName(tt.in)
		if err != nil {
			t.Errorf("NormalizeName(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("NormalizeName(%q) = %q, want %q", tt.in, got, tt.want)
		}
		// Normalizing is idempotent.
		if again, err := NormalizeName(got); err != nil || again != got {
			t.Errorf("NormalizeName(%q) = %q, %v; want %q", got, again, err, got)
		}
	}
}

func TestNormalizeNameErrors(t *testing.T) {
	tests := []struct{ in, reason string }{
		{"", "empty name"},
		{".", "empty label"},
		{"..", "empty label"},
		{"example.com..", "empty label"},
		{".example.com", "empty label"},
		{"a..b", "empty label"},
		{name253 + "c", "longer than 253"},
		{strings.Repeat("a", 64), "longer than 63"},
		{strings.Repeat("ü", 60) + ".de", "longer than 63"}, // measured in ASCII form
		{"a b", "bad character ' '"},
		{"x.com:443", "bad character ':'"},
		{"x.com/", "give the host, not a URL"},
		{"*.example.com", "wildcard only allowed as the whole first label"},
		{"ex!ample.com", "bad character '!'"},
		{"a\u200db.com", "not a valid international name"},
		{"xn--abc.com", "not a valid international name"},
		{"x\xff.com", "not valid UTF-8"},
		{"0ℶ", "not a valid international name"}, // ASCII form xn--0-2hc would not read back
		{"xn--0-2hc", "not a valid international name"},
	}
	for _, tt := range tests {
		got, err := NormalizeName(tt.in)
		if err == nil {
			t.Errorf("NormalizeName(%q) = %q, want an error", tt.in, got)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, strconv.Quote(tt.in)+": ") || !strings.Contains(msg, tt.reason) {
			t.Errorf("NormalizeName(%q) error %q: want it to name the input and say %q", tt.in, msg, tt.reason)
		}
	}
}
