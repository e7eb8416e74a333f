package inspect

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"
)

// The seed corpora live in testdata/fuzz/FuzzJSONScanner and
// testdata/fuzz/FuzzTripwire.

// FuzzJSONScanner checks that the streaming scanner never panics, and
// finds in a stream split in two what it finds in it whole.
func FuzzJSONScanner(f *testing.F) {
	ev := closedBookEvidence(f, "api.anthropic.com")
	f.Fuzz(func(t *testing.T, body string, split uint16) {
		var whole jsonScanner
		whole.ev = ev
		all, errWhole := whole.Write([]byte(body))
		i := int(split) % (len(body) + 1)
		var s jsonScanner
		s.ev = ev
		h1, err1 := s.Write([]byte(body[:i]))
		var h2 []scanHit
		var err2 error
		if err1 == nil {
			h2, err2 = s.Write([]byte(body[i:]))
		}
		if (errWhole == nil) != (err1 == nil && err2 == nil) {
			t.Fatalf("split at %d: errors %v / %v %v", i, errWhole, err1, err2)
		}
		if errWhole != nil {
			return
		}
		hits := append(h1, h2...)
		if len(hits) != len(all) {
			t.Fatalf("split at %d: %d hits, whole %d", i, len(hits), len(all))
		}
		for k := range hits {
			if hits[k].ev.ID != all[k].ev.ID || hits[k].start != all[k].start {
				t.Fatalf("split at %d: hit %d differs", i, k)
			}
		}
	})
}

// FuzzTripwire checks that the tripwire never panics, forwards only a
// prefix of what it read, forwards it all when it does not trip, and in
// probe mode forwards everything, however the stream arrives; and that a
// tripwire reused after another response (as the proxy's pool reuses
// them) reads it as a new one does.
func FuzzTripwire(f *testing.F) {
	ev := closedBookEvidence(f, "api.openai.com")
	f.Fuzz(func(t *testing.T, body string, sse, oneByte bool) {
		kind, other := tripJSON, tripSSE
		if sse {
			kind, other = tripSSE, tripJSON
		}
		for _, probe := range []bool{false, true} {
			src := func() io.Reader {
				var src io.Reader = bytes.NewReader([]byte(body))
				if oneByte {
					src = iotest.OneByteReader(src)
				}
				return src
			}
			tw := new(tripwire)
			tw.reset(src(), kind, ev, probe)
			got, err := io.ReadAll(tw)
			// The same response through a tripwire that read it as the
			// other kind, then as this kind in the other mode, cleared
			// after each.
			used := new(tripwire)
			used.reset(src(), other, ev, !probe)
			io.ReadAll(used)
			used.clear()
			used.reset(src(), kind, ev, !probe)
			io.ReadAll(used)
			used.clear()
			used.reset(src(), kind, ev, probe)
			got2, err2 := io.ReadAll(used)
			if !bytes.Equal(got, got2) || err != err2 || used.why != tw.why || !slices.Equal(used.seen, tw.seen) || !slices.Equal(used.lines, tw.lines) {
				t.Fatalf("probe %v: a reused tripwire forwarded %q (%v, %q, %q), a new one %q (%v, %q, %q)",
					probe, got2, err2, used.why, used.seen, got, err, tw.why, tw.seen)
			}
			if !bytes.HasPrefix([]byte(body), got) {
				t.Fatalf("probe %v: forwarded %q, not a prefix of %q", probe, got, body)
			}
			tripped := errors.Is(err, errTripped)
			if err != nil && !tripped {
				t.Fatalf("probe %v: %v", probe, err)
			}
			if (probe || !tripped) && string(got) != body {
				t.Fatalf("probe %v, tripped %v: forwarded %q of %q", probe, tripped, got, body)
			}
			if tripped && probe {
				t.Fatal("probe tripped")
			}
		}
	})
}
