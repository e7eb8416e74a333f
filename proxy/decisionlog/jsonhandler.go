package decisionlog

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// The decision log's JSON lines are encoded by a handler of its own rather
// than slog's JSONHandler, whose bytes it writes exactly: a proxy writes a
// line per connection and a DNS filter one per query, and slog's handler
// marshals every float (duration_ms) through encoding/json, by reflection,
// and the Logger records each call's program counter for a source the log
// never shows. A line whose attributes are all flat values (strings,
// integers, floats, booleans, times and durations: every decision line) is
// appended to a pooled buffer here; anything else (groups, values of other
// kinds, a time slog would refuse) goes to an slog.JSONHandler with the
// same attributes, writing to the same writer under the same lock, so that
// lines never interleave and their order is kept.

// NewJSONHandler returns a handler that writes each record to w as one
// JSON line, byte for byte as slog.NewJSONHandler(w, nil) would (level
// INFO and above, no source), in one call to w.Write.
func NewJSONHandler(w io.Writer) slog.Handler {
	lw := &lockedWriter{w: w}
	return &jsonHandler{w: lw, slow: slog.NewJSONHandler(lw, nil)}
}

// lockedWriter serializes the writes of a handler and of the handlers
// derived from it, fast and slow alike.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// jsonHandler is NewJSONHandler's handler.
type jsonHandler struct {
	w *lockedWriter
	// slow is slog's own handler with the same attributes and groups,
	// for what the fast path does not encode.
	slow slog.Handler
	// pre holds the attributes of WithAttrs, encoded, without a
	// leading comma; grouped says a group was opened (WithGroup): every
	// record then goes to slow.
	pre     []byte
	grouped bool
}

func (h *jsonHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo
}

func (h *jsonHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := &jsonHandler{w: h.w, slow: h.slow.WithAttrs(attrs), grouped: h.grouped}
	if h.grouped || len(attrs) == 0 {
		h2.pre = h.pre
		return h2
	}
	pre := append([]byte(nil), h.pre...)
	for _, a := range attrs {
		var ok bool
		if pre, ok = appendAttr(pre, a, len(pre) > 0); !ok {
			// Not flat: slog decides what such a value looks like,
			// for this handler's records and its descendants'.
			h2.grouped = true
			return h2
		}
	}
	h2.pre = pre
	return h2
}

func (h *jsonHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &jsonHandler{w: h.w, slow: h.slow.WithGroup(name), grouped: true}
}

// lineBufs holds the buffers lines are encoded into.
var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledLine bounds the buffers put back into lineBufs.
const maxPooledLine = 16 << 10

func (h *jsonHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.grouped {
		return h.slow.Handle(ctx, r)
	}
	bp := lineBufs.Get().(*[]byte)
	b, ok := h.appendRecord((*bp)[:0], r)
	if !ok {
		*bp = b[:0]
		lineBufs.Put(bp)
		return h.slow.Handle(ctx, r)
	}
	_, err := h.w.Write(b)
	if cap(b) <= maxPooledLine {
		*bp = b[:0]
		lineBufs.Put(bp)
	}
	return err
}

// appendRecord appends r as slog's JSON handler writes it, and a newline.
// It returns false, with b's contents undefined, for a record it cannot
// encode.
func (h *jsonHandler) appendRecord(b []byte, r slog.Record) ([]byte, bool) {
	b = append(b, '{')
	sep := false
	if !r.Time.IsZero() {
		t := r.Time.Round(0)
		if y := t.Year(); y < 0 || y >= 10000 {
			return b, false // slog writes an error into the line
		}
		b = append(b, `"time":"`...)
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
		sep = true
	}
	if sep {
		b = append(b, ',')
	}
	b = append(b, `"level":`...)
	b = appendString(b, r.Level.String())
	b = append(b, `,"msg":`...)
	b = appendString(b, r.Message)
	if len(h.pre) > 0 {
		b = append(b, ',')
		b = append(b, h.pre...)
	}
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		b, ok = appendAttr(b, a, true)
		return ok
	})
	if !ok {
		return b, false
	}
	return append(b, "}\n"...), true
}

// appendAttr appends a as `"key":value`, after a comma if comma is true.
// It returns false for an attribute that is not a flat value.
func appendAttr(b []byte, a slog.Attr, comma bool) ([]byte, bool) {
	if a.Key == "" {
		return b, false // slog drops empty attributes and inlines groups
	}
	v := a.Value
	if comma {
		b = append(b, ',')
	}
	b = appendString(b, a.Key)
	b = append(b, ':')
	switch v.Kind() {
	case slog.KindString:
		b = appendString(b, v.String())
	case slog.KindInt64:
		b = strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		b = strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindFloat64:
		f := v.Float64()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return b, false // slog writes an error
		}
		b = appendFloat(b, f)
	case slog.KindBool:
		b = strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		b = strconv.AppendInt(b, int64(v.Duration()), 10)
	case slog.KindTime:
		t := v.Time()
		if y := t.Year(); y < 0 || y >= 10000 {
			return b, false
		}
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	default:
		return b, false
	}
	return b, true
}

// appendFloat appends f as encoding/json writes a float64 (which is how
// slog's JSON handler writes one).
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendString appends s quoted and escaped as slog's JSON handler does:
// encoding/json's escaping without the HTML escapes, invalid UTF-8 as
// U+FFFD, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// logAttrs writes a record of level and msg with attrs to l, as
// l.LogAttrs does but without recording the caller's program counter
// (no handler of the decision log shows a source).
func logAttrs(ctx context.Context, l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	h := l.Handler()
	if ctx == nil {
		ctx = context.Background()
	}
	if !h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	_ = h.Handle(ctx, r)
}
