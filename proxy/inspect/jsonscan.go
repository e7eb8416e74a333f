package inspect

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/doorman-net/doorman/conf"
)

// jsonScanner reads a stream of JSON values (one document, or several
// separated by whitespace: NDJSON, a Gemini stream) as it arrives, a
// chunk at a time, holding no more of it than the member values evidence
// lines look at, and reports the first object whose members satisfy an
// evidence line (conf.EvidenceMatcher): as soon as its conditions are
// met, or, for a line with negated conditions, when the object closes.
type jsonScanner struct {
	ev *conf.EvidenceMatcher
	// off is the offset in the stream of the next byte Write reads.
	off   int64
	stack []scanFrame
	st    scanState
	// The string or scalar being read: its raw bytes when they are
	// wanted (a key, or a value evidence looks at), up to maxCapture.
	raw      []byte
	capture  bool
	overflow bool
	isKey    bool
	escape   bool
	// err is set once the stream is not JSON.
	err error
}

type scanState uint8

const (
	stValue  scanState = iota // a value may start (or a container close)
	stString                  // inside a string
	stScalar                  // inside a number or literal
	stAfter                   // after a value: ',' or a close
	stColon                   // after a key: ':'
)

// scanFrame is one open object or array.
type scanFrame struct {
	obj   bool
	start int64 // the offset of its '{' or '['
	// Objects: the members evidence looks at, the key being read and
	// whether its value is wanted.
	fields  []conf.EvidenceField
	key     string
	want    bool
	wantKey bool // the next string is a key
	// parent: the field of the enclosing object this container is the
	// value of (-1 none); empty until its first element.
	parent int
	empty  bool
	// hit: the object showed evidence already (reported once).
	hit bool
	// changed: fields changed since the last early match.
	changed bool
}

// maxCapture bounds the text of a key or wanted value kept.
const maxCapture = 512

// maxScanDepth bounds nesting.
const maxScanDepth = 512

var errNotJSON = errors.New("response is not JSON")

// scanHit is evidence found: the line, and the offset in the stream of
// the object that showed it.
type scanHit struct {
	ev    conf.SetEvidence
	start int64
}

// Write scans p and returns the hits in it, in order. After an error
// (the stream is not JSON) it scans nothing more.
func (s *jsonScanner) Write(p []byte) ([]scanHit, error) {
	if s.err != nil {
		return nil, s.err
	}
	var hits []scanHit
	hit := func(h *scanHit) {
		if h != nil {
			hits = append(hits, *h)
		}
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch s.st {
		case stString:
			if !s.escape {
				// Up to the next quote or backslash: kept if wanted.
				k := quoteOrBackslash(p[i:])
				if k < 0 {
					s.keepRun(p[i:])
					i = len(p) - 1
					continue
				}
				s.keepRun(p[i : i+k])
				i += k
				c = p[i]
			}
			if s.escape {
				s.escape = false
				s.keep(c)
				continue
			}
			switch c {
			case '\\':
				s.escape = true
				s.keep(c)
			case '"':
				s.st = stAfter
				hit(s.endString())
			default:
				s.keep(c)
			}
		case stScalar:
			if isScalarByte(c) {
				s.keep(c)
				continue
			}
			s.st = stAfter
			hit(s.endScalar())
			if s.err != nil {
				return hits, s.err
			}
			i-- // read c again, after the value
		case stColon:
			switch c {
			case ' ', '\t', '\r', '\n':
			case ':':
				s.st = stValue
			default:
				return hits, s.fail()
			}
		case stValue, stAfter:
			switch c {
			case ' ', '\t', '\r', '\n':
				continue
			case '}', ']':
				if len(s.stack) == 0 {
					return hits, s.fail()
				}
				f := &s.stack[len(s.stack)-1]
				if f.obj != (c == '}') || (s.st == stValue && !f.empty) || (f.obj && f.wantKey && !f.empty) {
					return hits, s.fail() // a close after ',' or ':'
				}
				if f.obj && s.ev != nil && len(f.fields) > 0 && !f.hit {
					// Unchanged since the last early match: only
					// lines with a negated condition are left.
					var ev conf.SetEvidence
					var ok bool
					if f.changed {
						ev, ok = s.ev.Match(f.fields, true)
					} else {
						ev, ok = s.ev.MatchNegated(f.fields)
					}
					if ok {
						hits = append(hits, scanHit{ev: ev, start: f.start})
					}
				}
				s.stack = s.stack[:len(s.stack)-1]
				s.st = stAfter
				continue
			case ',':
				if s.st != stAfter || len(s.stack) == 0 {
					return hits, s.fail()
				}
				f := &s.stack[len(s.stack)-1]
				if f.obj {
					f.wantKey = true
				}
				s.st = stValue
				continue
			}
			if s.st == stAfter && len(s.stack) > 0 {
				return hits, s.fail() // two values without a comma
			}
			hit(s.beginValue(c, s.off+int64(i)))
			if s.err != nil {
				return hits, s.err
			}
		}
	}
	s.off += int64(len(p))
	return hits, nil
}

// fail records that the stream is not JSON.
func (s *jsonScanner) fail() error {
	s.err = errNotJSON
	return s.err
}

func isScalarByte(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || c == '-' || c == '+' || c == '.' || c == 'E'
}

// keep adds c to the text of the string or scalar being read.
func (s *jsonScanner) keep(c byte) {
	if !s.capture && s.st != stScalar {
		return
	}
	if len(s.raw) >= maxCapture {
		s.overflow = true
		return
	}
	s.raw = append(s.raw, c)
}

// quoteOrBackslash is the index of the first '"' or '\\' in b, or -1.
func quoteOrBackslash(b []byte) int {
	q := bytes.IndexByte(b, '"')
	if q < 0 {
		q = len(b)
	}
	if e := bytes.IndexByte(b[:q], '\\'); e >= 0 {
		return e
	}
	if q == len(b) {
		return -1
	}
	return q
}

// keepRun adds the bytes b of the string being read to its text, as
// keep would one by one.
func (s *jsonScanner) keepRun(b []byte) {
	if !s.capture || len(b) == 0 {
		return
	}
	if room := maxCapture - len(s.raw); len(b) > room {
		b = b[:max(room, 0)]
		s.overflow = true
	}
	s.raw = append(s.raw, b...)
}

// beginValue starts a value (or, in an object where one is due, a key)
// with its first byte c at offset at.
func (s *jsonScanner) beginValue(c byte, at int64) *scanHit {
	// A key or value makes its container non-empty.
	hit := s.markParent()
	var f *scanFrame
	if len(s.stack) > 0 {
		f = &s.stack[len(s.stack)-1]
	}
	if f != nil && f.obj {
		if f.wantKey {
			if c != '"' {
				s.fail()
				return hit
			}
			f.wantKey = false
			s.st, s.isKey, s.capture, s.overflow, s.raw = stString, true, true, false, s.raw[:0]
			return hit
		}
	}
	want := f != nil && f.obj && f.want
	switch c {
	case '{', '[':
		if len(s.stack) >= maxScanDepth {
			s.fail()
			return hit
		}
		parent := -1
		if want {
			parent = len(f.fields) - 1
			f.want = false
		}
		// A frame popped at this depth leaves its fields' buffer for
		// the next one.
		var fields []conf.EvidenceField
		if n := len(s.stack); n < cap(s.stack) {
			fields = s.stack[:n+1][n].fields[:0]
		}
		s.stack = append(s.stack, scanFrame{obj: c == '{', start: at, wantKey: c == '{', parent: parent, empty: true, fields: fields})
		s.st = stValue
	case '"':
		s.st, s.isKey, s.capture, s.overflow, s.raw = stString, false, want, false, s.raw[:0]
	default:
		if !('0' <= c && c <= '9') && c != '-' && c != 't' && c != 'f' && c != 'n' {
			s.fail()
			return hit
		}
		s.st, s.isKey, s.capture, s.overflow = stScalar, false, want, false
		s.raw = append(s.raw[:0], c)
	}
	return hit
}

// markParent notes that the innermost container has an element: the
// field it is the value of is then there (an early match may follow).
func (s *jsonScanner) markParent() *scanHit {
	n := len(s.stack)
	if n == 0 {
		return nil
	}
	f := &s.stack[n-1]
	if !f.empty {
		return nil
	}
	f.empty = false
	if f.parent < 0 || n < 2 {
		return nil
	}
	return s.setField(&s.stack[n-2], f.parent, "", true)
}

// setField records a wanted member's value and tries an early match.
func (s *jsonScanner) setField(obj *scanFrame, i int, text string, present bool) *scanHit {
	if s.ev == nil || i < 0 || i >= len(obj.fields) {
		return nil
	}
	obj.fields[i].Text, obj.fields[i].Present = text, present
	obj.changed = true
	if obj.hit {
		return nil
	}
	obj.changed = false
	if ev, ok := s.ev.Match(obj.fields, false); ok {
		obj.hit = true
		return &scanHit{ev: ev, start: obj.start}
	}
	return nil
}

// endString finishes a string: a key names the next member; a wanted
// value is recorded.
func (s *jsonScanner) endString() *scanHit {
	if !s.isKey && !s.capture {
		return nil
	}
	f := &s.stack[len(s.stack)-1]
	if s.isKey {
		f.key, f.want = "", false
		if !s.overflow && s.ev != nil {
			if key, ok := s.ev.WantsRaw(s.raw); ok {
				f.key, f.want = key, true
				f.fields = append(f.fields, conf.EvidenceField{Key: key})
				f.changed = true
			}
		}
		s.st = stColon
		s.capture = false
		return nil
	}
	s.capture = false
	text := ""
	if !s.overflow {
		text = decodeJSONString(s.raw)
	}
	f.want = false
	return s.setField(f, len(f.fields)-1, text, len(s.raw) > 0)
}

// endScalar finishes a number or literal.
func (s *jsonScanner) endScalar() *scanHit {
	switch string(s.raw) {
	case "true", "false", "null":
	default:
		if len(s.raw) == 0 || !(s.raw[0] == '-' || ('0' <= s.raw[0] && s.raw[0] <= '9')) ||
			(!s.overflow && !json.Valid(s.raw)) {
			s.fail()
			return nil
		}
	}
	if !s.capture || len(s.stack) == 0 {
		return nil
	}
	s.capture = false
	f := &s.stack[len(s.stack)-1]
	f.want = false
	text := string(s.raw)
	return s.setField(f, len(f.fields)-1, text, text != "null" && text != "false")
}

// reset makes s ready for another stream, its buffers kept.
func (s *jsonScanner) reset() {
	ev, stack, raw := s.ev, s.stack[:0], s.raw[:0]
	*s = jsonScanner{ev: ev, stack: stack, raw: raw}
}

// end reports whether the stream ended where a value may: between
// top-level values.
func (s *jsonScanner) end() error {
	if s.err != nil {
		return s.err
	}
	if s.st == stScalar {
		s.st = stAfter
		s.endScalar()
		if s.err != nil {
			return s.err
		}
	}
	if len(s.stack) > 0 || s.st == stString || s.st == stColon {
		return errors.New("response ends inside a JSON value")
	}
	return s.err
}

// decodeJSONString reads the text of a string's raw bytes (between its
// quotes).
func decodeJSONString(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		if v, ok := commonValues[string(raw)]; ok {
			return v
		}
		return string(raw)
	}
	var out string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	if json.Unmarshal(q, &out) != nil {
		return string(raw)
	}
	return out
}

// commonValues are values of the members evidence looks at ("type") that
// the providers' responses repeat, read without allocating. Only read.
var commonValues = func() map[string]string {
	m := map[string]string{}
	for _, v := range []string{
		// Anthropic
		"message", "assistant", "text", "tool_use", "thinking", "message_start", "message_delta",
		"message_stop", "content_block_start", "content_block_delta", "content_block_stop", "text_delta",
		"input_json_delta", "thinking_delta", "signature_delta", "ping", "error", "end_turn",
		// OpenAI
		"response", "response.created", "response.in_progress", "response.completed",
		"response.output_item.added", "response.output_item.done", "response.content_part.added",
		"response.content_part.done", "response.output_text.delta", "response.output_text.done",
		"output_text", "function_call", "reasoning", "chat.completion", "chat.completion.chunk",
		"summary_text", "completed", "in_progress",
	} {
		m[v] = v
	}
	return m
}()
