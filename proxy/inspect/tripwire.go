package inspect

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/doorman-net/doorman/conf"
)

// The response tripwire: on a host a rule set covers, a response body is
// read through a tripwire that scans it as it streams (server-sent
// events event by event, JSON with a streaming tokenizer) for evidence
// that a provider-side tool ran (the sets' evidence lines). When some
// appears the response ends there: an event stream loses that event and
// every one after it, a JSON body the bytes from the object that showed
// it on; the decision line says deny and names the evidence. A tool the
// rule set does not know yet is so cut off too, not silently used. In
// probe mode the evidence is only recorded.
//
// Nothing is buffered beyond one event (bounded by maxEvent) or one read.

// maxEvent bounds one server-sent event the tripwire holds while it
// reads it; a longer one is cut (it cannot be judged whole).
const maxEvent = 8 << 20

// errTripped ends a response that showed provider-side tool use.
var errTripped = errors.New("the response shows a provider-side tool")

// tripKind is how a response body is scanned.
type tripKind uint8

const (
	tripNone tripKind = iota // not scanned (not JSON, not an event stream)
	tripJSON
	tripSSE
)

// tripKindOf says how a response is scanned, by its media type.
func tripKindOf(resp *http.Response) tripKind {
	mt := mediaType(resp.Header.Get("Content-Type"))
	switch {
	case mt == "text/event-stream":
		return tripSSE
	case strings.Contains(mt, "json"):
		return tripJSON
	}
	return tripNone
}

// mediaType is the media type of a Content-Type value, as
// mime.ParseMediaType reads it ("" if it does not parse); the usual
// values of a model API's responses are read without parsing them.
func mediaType(ct string) string {
	switch ct {
	case "application/json", "text/event-stream":
		return ct
	case "application/json; charset=utf-8":
		return "application/json"
	case "text/event-stream; charset=utf-8":
		return "text/event-stream"
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt
}

// tripwire reads a response body through the scanner.
type tripwire struct {
	src   io.Reader
	kind  tripKind
	ev    *conf.EvidenceMatcher
	probe bool

	js    jsonScanner // tripJSON: the whole body
	off   int64       // tripJSON: offset of the next byte read from src
	event []byte      // tripSSE: the event being read (held)
	scan  int         // tripSSE: bytes of event already looked at
	line  int         // tripSSE: length of the current line so far
	cr    bool        // tripSSE: the last byte was a CR

	out    []byte      // released events, not yet returned
	outBuf []byte      // out's buffer, from its start
	evjs   jsonScanner // tripSSE: scans each event's data
	data   []byte      // tripSSE: an event's data
	err    error       // returned once out is drained

	// seen are the evidence IDs found (all of them in probe mode; the
	// one that tripped otherwise), what the ID's line said.
	seen  []string
	lines []string
	// why says why the response was cut when it was not evidence (an
	// event over maxEvent, a body that is not JSON).
	why string
	// whole is the buffer a JSON answer of known length is read into
	// (setRecord.readWhole).
	whole []byte
}

// tripwires holds tripwires no response uses any more, with their
// buffers (releaseTripwire): a model API host's every response is read
// through one.
var tripwires = sync.Pool{New: func() any { return new(tripwire) }}

// maxPooledBuf bounds a buffer a pooled tripwire keeps.
const maxPooledBuf = 64 << 10

func newTripwire(src io.Reader, kind tripKind, ev *conf.EvidenceMatcher, probe bool) *tripwire {
	t := tripwires.Get().(*tripwire)
	t.reset(src, kind, ev, probe)
	return t
}

// reset readies t, new or cleared, to read the response src, its
// buffers kept.
func (t *tripwire) reset(src io.Reader, kind tripKind, ev *conf.EvidenceMatcher, probe bool) {
	js, evjs := t.js, t.evjs
	js.reset()
	evjs.reset()
	js.ev = ev
	*t = tripwire{src: src, kind: kind, ev: ev, probe: probe, js: js, evjs: evjs,
		event: t.event[:0], outBuf: t.outBuf[:0], out: t.outBuf[:0], data: t.data[:0], whole: t.whole[:0]}
}

// clear drops everything t refers to but its buffers, and those that
// grew large: nothing of the response it read is left to the next.
func (t *tripwire) clear() {
	keep := func(b []byte) []byte {
		if cap(b) > maxPooledBuf {
			return nil
		}
		return b[:0]
	}
	js, evjs := t.js, t.evjs
	for _, s := range []*jsonScanner{&js, &evjs} {
		if cap(s.stack) > 64 {
			s.stack = nil
		}
		s.raw = keep(s.raw)
		s.ev = nil
	}
	*t = tripwire{js: js, evjs: evjs, event: keep(t.event), outBuf: keep(t.outBuf), data: keep(t.data), whole: keep(t.whole)}
}

// releaseTripwire returns t to the pool: nothing may use it after (the
// evidence it recorded, t.seen, stays the caller's: a reused tripwire
// starts a list of its own).
func releaseTripwire(t *tripwire) {
	t.clear()
	tripwires.Put(t)
}

// Read returns the bytes scanned and found clean. A JSON body is read
// into p and scanned there; an event stream's events are held until
// whole.
func (t *tripwire) Read(p []byte) (int, error) {
	for len(t.out) == 0 && t.err == nil {
		n, err := t.src.Read(p)
		if n > 0 {
			if t.kind != tripSSE {
				if keep, ok := t.scanJSON(p[:n]); ok || keep > 0 {
					if err != nil && t.err == nil {
						t.err = err
					}
					return keep, nil
				}
			} else {
				t.feedSSE(p[:n])
			}
		}
		if err != nil && t.err == nil {
			if err == io.EOF && t.kind == tripSSE && len(t.event) > 0 {
				// An event the stream ended inside: judged as it is.
				t.endEvent(len(t.event))
			}
			if t.err == nil {
				t.err = err
			}
		}
	}
	if len(t.out) > 0 {
		n := copy(p, t.out)
		if t.out = t.out[n:]; len(t.out) == 0 {
			t.out = t.outBuf[:0] // drained: its buffer serves the next events
		}
		return n, nil
	}
	return 0, t.err
}

// Close closes the source if it is a ReadCloser.
func (t *tripwire) Close() error {
	if c, ok := t.src.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// record notes evidence; it trips the wire unless probing.
func (t *tripwire) record(h scanHit) bool {
	if !contains(t.seen, h.ev.ID) {
		t.seen = append(t.seen, h.ev.ID)
		t.lines = append(t.lines, h.ev.Line)
	}
	if t.probe {
		return false
	}
	t.err = errTripped
	return true
}

// cut ends the response for a reason other than evidence (fails
// closed); in probe mode the rest goes unscanned.
func (t *tripwire) cut(why string) {
	if t.why == "" {
		t.why = why
	}
	if !t.probe {
		t.err = errTripped
	}
}

// scanJSON scans b, read into the caller's buffer: ok with all of it
// clean, else the bytes before the object that tripped the wire (or none,
// when the body is not JSON) with t.err set.
func (t *tripwire) scanJSON(b []byte) (keep int, ok bool) {
	start := t.off
	t.off += int64(len(b))
	if t.kind == tripNone || t.js.err != nil { // probe mode, after a body that is not JSON
		return len(b), true
	}
	hits, err := t.js.Write(b)
	for _, h := range hits {
		if t.record(h) {
			return int(max(h.start-start, 0)), false
		}
	}
	if err != nil {
		t.cut("the response is not JSON as it says")
		if !t.probe {
			return 0, false
		}
	}
	return len(b), true
}

// feedSSE holds b with the event being read, and judges every event it
// completes (a blank line ends one: two line ends in a row, each CRLF,
// LF or CR).
func (t *tripwire) feedSSE(b []byte) {
	t.event = append(t.event, b...)
	for i := t.scan; i < len(t.event); i++ {
		c := t.event[i]
		if t.cr && c == '\n' {
			t.cr = false
			continue
		}
		t.cr = c == '\r'
		if c != '\r' && c != '\n' {
			t.line++
			continue
		}
		if t.line > 0 {
			t.line = 0
			continue
		}
		// A blank line: the event is event[:end], with the LF of a
		// CRLF if it is here.
		end := i + 1
		if c == '\r' && end < len(t.event) && t.event[end] == '\n' {
			end++
			t.cr = false
		}
		if end > maxEvent {
			break
		}
		if !t.endEvent(end) {
			return
		}
		i = -1 // endEvent dropped the event's bytes
	}
	t.scan = len(t.event)
	if len(t.event) > maxEvent {
		t.cut("a server-sent event longer than the tripwire reads")
		if t.probe {
			t.out = append(t.out, t.event...)
			t.event, t.scan, t.kind = nil, 0, tripNone
		} else {
			t.event = nil
		}
	}
}

// endEvent judges event[:n]: released if clean; false if it tripped.
func (t *tripwire) endEvent(n int) bool {
	ev := t.event[:n]
	t.data = sseData(t.data[:0], ev)
	if data := t.data; len(data) > 0 {
		js := &t.evjs
		js.ev = t.ev
		js.reset()
		hits, err := js.Write(data)
		if err == nil {
			err = js.end()
		}
		for _, h := range hits {
			if t.record(h) {
				t.event = nil
				return false
			}
		}
		_ = err // data that is not JSON ("[DONE]") carries no object
	}
	t.out = append(t.out, ev...)
	if cap(t.out) > cap(t.outBuf) {
		t.outBuf = t.out[:0:cap(t.out)]
	}
	t.event = append(t.event[:0], t.event[n:]...)
	t.scan = 0
	return true
}

// sseData appends to data the data of an event: its data fields'
// values, one space after the colon dropped, joined by newlines; data
// empty if it has none or they do not hold a JSON object or array.
func sseData(data, ev []byte) []byte {
	has := false
	for len(ev) > 0 {
		i := bytes.IndexAny(ev, "\r\n")
		line := ev
		if i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		name, value, colon := bytes.Cut(line, []byte(":"))
		if !colon {
			value = nil
		}
		if string(name) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if has {
			data = append(data, '\n')
		}
		data = append(data, value...)
		has = true
	}
	t := bytes.TrimLeft(data, " \t\r\n")
	if len(t) == 0 || (t[0] != '{' && t[0] != '[') {
		return data[:0]
	}
	return data
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
