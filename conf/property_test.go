package conf

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestRandomEntriesRoundTrip builds entries from fragments that stress the
// grammar (IDNA mappings, dots that are not '.', brackets, prefixes,
// ports) and checks every accepted one with the fuzz targets' round-trip
// property. It is deterministic; the fuzz targets explore further.
func TestRandomEntriesRoundTrip(t *testing.T) {
	frags := []string{
		"a", "Z", "x", "0", "1", "9", "255", "256", "ff", "::", ":", ".", "..", "*", "*.", "[", "]", "/", "/8", "/32",
		"/96", "/104", "/128", "-", "_", "%", "ü", "ß", "ς", "İ", "ﬀ", "\u200d", "\u200c", "\u00ad", "。", "．", "１", "ｘ",
		"xn--", "xn--bcher-kva", "xn--a", "ffff", "::ffff:", "0x", "443", "65535", "65536", "\u0661", "\u05d0", "ا",
		"\u0300", "\ufffd", "\u2488", "\u2024", "㍱", "K", "Å", "ǅ", "ⅷ", "ⓐ", "ẞ", "\uff61", ".com", "example",
		"ℶ", "\u05d0\u05d1", "\u0660", "\u06f1", "\u0301", "\u200f", "\u0647\u0645", "\u0915\u094d", "ｶ", "\u3099",
	}
	iterations := 100_000
	if testing.Short() {
		iterations = 10_000
	}
	r := rand.New(rand.NewPCG(1, 2))
	valid := 0
	for range iterations {
		var b strings.Builder
		for k := r.IntN(8) + 1; k > 0; k-- {
			b.WriteString(frags[r.IntN(len(frags))])
		}
		e, err := ParseEntry(b.String())
		if err != nil {
			continue
		}
		valid++
		checkEntryRoundTrip(t, e)
		if t.Failed() {
			return
		}
	}
	if valid < iterations/20 {
		t.Errorf("only %d of %d random entries were valid; the generator tests too little", valid, iterations)
	}
}
