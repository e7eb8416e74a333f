package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// jsonDoc is a JSON document read where a rule set looks, and no
// further: the rule sets' matcher and rewriter work on its exact bytes.
// The whole document is checked once (valid JSON, valid UTF-8); after
// that an object's members, an array's elements and a string's text are
// read only when a rule asks for them, and every value keeps its byte
// span, so that a rewrite can delete exactly the bytes of an entry and
// leave every other byte as it was.
type jsonDoc struct {
	b []byte
	// What has been read, by the value's start: each object and array
	// is read once however many rules look at it.
	objs  []objMemo
	elems []elemMemo
	// Past memoScan entries, the memos are found through maps (a body
	// with many objects a rule reads).
	objIndex  map[int]objMemo
	elemIndex map[int][]jval
	// scratch is reused for the candidates of one rule.
	scratch []candidate
}

// memoScan is how many memos are searched in order before a map
// indexes them.
const memoScan = 16

type objMemo struct {
	at  int
	ms  []jmember
	err error
}

type elemMemo struct {
	at int
	es []jval
}

// jval is one value of a jsonDoc: the bytes b[s:e], without the
// whitespace around it.
type jval struct{ s, e int }

// jmember is one member of an object: its key (decoded: escapes read),
// the span of the key's string, and its value.
type jmember struct {
	key  string
	fold string // looseKey(key)
	keyS int
	val  jval
}

// errDocDepth is a document nested deeper than a rule set reads.
var errDocDepth = fmt.Errorf("nested deeper than %d", maxJSONDepth)

// newJSONDoc checks data: one JSON value (RFC 8259), whitespace around
// it, valid UTF-8, nested at most maxJSONDepth deep. It returns the
// document and its top value.
func newJSONDoc(data []byte) (*jsonDoc, jval, error) {
	if !utf8.Valid(data) {
		return nil, jval{}, errors.New("not valid UTF-8")
	}
	if !json.Valid(data) {
		// Say where, as ParseStrictJSON does.
		var v any
		err := json.Unmarshal(data, &v)
		if err == nil {
			err = errors.New("not valid JSON")
		}
		return nil, jval{}, err
	}
	if depthOver(data, maxJSONDepth) {
		return nil, jval{}, errDocDepth
	}
	d := &jsonDoc{b: data}
	s := skipWS(data, 0)
	return d, jval{s, d.skip(s)}, nil
}

// depthOver reports whether a valid document nests containers deeper
// than max.
func depthOver(b []byte, max int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i) - 1
		case '{', '[':
			if depth++; depth > max {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// stringEnd returns the index after the closing quote of the string that
// starts at b[i] (a valid document's).
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		j += k
		// The quote ends the string unless an odd run of backslashes
		// escapes it.
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
	return len(b)
}

// skip returns the end of the value that starts at b[i] (a valid
// document's).
func (d *jsonDoc) skip(i int) int {
	b := d.b
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && !strings.ContainsRune(" \t\r\n,]}", rune(b[j])) {
		j++
	}
	return j
}

// kind is the first byte of v: '{', '[', '"', 't', 'f', 'n', or a
// number's first character.
func (d *jsonDoc) kind(v jval) byte { return d.b[v.s] }

// isNull reports whether v is null.
func (d *jsonDoc) isNull(v jval) bool { return d.b[v.s] == 'n' }

// text returns v's text: a string's (escapes read), any other scalar's
// JSON text; "" for an object or array.
func (d *jsonDoc) text(v jval) string {
	switch d.b[v.s] {
	case '{', '[':
		return ""
	case '"':
		return d.str(v)
	}
	return string(d.b[v.s:v.e])
}

// str decodes the string v.
func (d *jsonDoc) str(v jval) string {
	raw := d.b[v.s+1 : v.e-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	var s string
	if err := json.Unmarshal(d.b[v.s:v.e], &s); err != nil {
		return string(raw) // not reached: the document is valid
	}
	return s
}

// members returns the members of the object v, in order; an error if a
// key is given twice (what would a server read?).
func (d *jsonDoc) members(v jval) ([]jmember, error) {
	// Few objects are read per document, mostly in order: look from
	// the latest.
	if d.objIndex != nil {
		if m, ok := d.objIndex[v.s]; ok {
			return m.ms, m.err
		}
	} else {
		for i := len(d.objs) - 1; i >= 0; i-- {
			if d.objs[i].at == v.s {
				return d.objs[i].ms, d.objs[i].err
			}
		}
	}
	ms, err := d.readMembers(v)
	switch {
	case d.objIndex != nil:
		d.objIndex[v.s] = objMemo{v.s, ms, err}
	case len(d.objs) < memoScan:
		d.objs = append(d.objs, objMemo{v.s, ms, err})
	default:
		d.objIndex = make(map[int]objMemo, 16*memoScan)
		for _, o := range d.objs {
			d.objIndex[o.at] = o
		}
		d.objIndex[v.s] = objMemo{v.s, ms, err}
	}
	return ms, err
}

func (d *jsonDoc) readMembers(v jval) ([]jmember, error) {
	b := d.b
	var out []jmember
	i := skipWS(b, v.s+1)
	for i < v.e && b[i] != '}' {
		ke := stringEnd(b, i)
		key := d.str(jval{i, ke})
		j := skipWS(b, ke)
		j = skipWS(b, j+1) // ':'
		ve := d.skip(j)
		out = append(out, jmember{key: key, fold: looseKey(key), keyS: i, val: jval{j, ve}})
		i = skipWS(b, ve)
		if i < v.e && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	if err := checkDuplicateKeys(out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkDuplicateKeys refuses an object with a key given twice.
func checkDuplicateKeys(ms []jmember) error {
	if len(ms) <= 16 {
		for a := 1; a < len(ms); a++ {
			for c := 0; c < a; c++ {
				if ms[a].key == ms[c].key {
					return fmt.Errorf("key %q given twice in one object", ms[a].key)
				}
			}
		}
		return nil
	}
	seen := make(map[string]struct{}, len(ms))
	for _, m := range ms {
		if _, dup := seen[m.key]; dup {
			return fmt.Errorf("key %q given twice in one object", m.key)
		}
		seen[m.key] = struct{}{}
	}
	return nil
}

// elements returns the elements of the array v, in order.
func (d *jsonDoc) elements(v jval) []jval {
	if d.elemIndex != nil {
		if e, ok := d.elemIndex[v.s]; ok {
			return e
		}
	} else {
		for i := len(d.elems) - 1; i >= 0; i-- {
			if d.elems[i].at == v.s {
				return d.elems[i].es
			}
		}
	}
	e := d.readElements(v)
	switch {
	case d.elemIndex != nil:
		d.elemIndex[v.s] = e
	case len(d.elems) < memoScan:
		d.elems = append(d.elems, elemMemo{v.s, e})
	default:
		d.elemIndex = make(map[int][]jval, 16*memoScan)
		for _, m := range d.elems {
			d.elemIndex[m.at] = m.es
		}
		d.elemIndex[v.s] = e
	}
	return e
}

func (d *jsonDoc) readElements(v jval) []jval {
	b := d.b
	var out []jval
	i := skipWS(b, v.s+1)
	for i < v.e && b[i] != ']' {
		e := d.skip(i)
		out = append(out, jval{i, e})
		i = skipWS(b, e)
		if i < v.e && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return out
}

// span is a run of bytes a rewrite deletes.
type span struct{ s, e int }

// deleteElements returns the spans that delete the elements of array arr
// at the indexes in drop (sorted, distinct), commas with them, so that
// what is left is the array of the other elements, every byte of theirs
// and of the whitespace between them kept.
func deleteElements(elems []jval, drop []int) []span {
	var out []span
	n := len(elems)
	for k := 0; k < len(drop); {
		i := drop[k]
		j := i
		for k+1 < len(drop) && drop[k+1] == j+1 {
			k++
			j++
		}
		k++
		switch {
		case j < n-1: // a run followed by a kept element: up to its start
			out = append(out, span{elems[i].s, elems[j+1].s})
		case i > 0: // a run at the end: from the end of the kept element before it
			out = append(out, span{elems[i-1].e, elems[j].e})
		default: // every element
			out = append(out, span{elems[0].s, elems[n-1].e})
		}
	}
	return out
}

// deleteMembers is deleteElements for an object's members (each from its
// key to the end of its value).
func deleteMembers(ms []jmember, drop []int) []span {
	elems := make([]jval, len(ms))
	for i, m := range ms {
		elems[i] = jval{m.keyS, m.val.e}
	}
	return deleteElements(elems, drop)
}

// applyDeletions returns b without the bytes of spans; a span inside
// another is dropped with it.
func applyDeletions(b []byte, spans []span) []byte {
	slices.SortFunc(spans, func(x, y span) int {
		if x.s != y.s {
			return x.s - y.s
		}
		return y.e - x.e
	})
	out := make([]byte, 0, len(b))
	at := 0
	for _, sp := range spans {
		if sp.e <= at {
			continue // inside one already deleted
		}
		if sp.s < at {
			sp.s = at
		}
		out = append(out, b[at:sp.s]...)
		at = sp.e
	}
	return append(out, b[at:]...)
}
