package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of a body the proxy parses.
const maxJSONDepth = 256

// JSONPath finds values in a JSON document. Its text form is keys joined
// by '.', each key optionally followed by "[]" (every element of an
// array) or "[N]" (element N, from 0), as often as the arrays nest:
//
//	model              the top-level key "model"
//	tools[].type       "type" of every element of the array "tools"
//	messages[0].role   "role" of the first element of "messages"
//	[].id              "id" of every element of a top-level array
//
// Keys are matched exactly (case-sensitive) and hold no '.', '[', ']',
// '=', '"', whitespace or control characters.
type JSONPath struct {
	steps []jsonStep
	text  string
}

// jsonStep is one key, or one array step (index -1: every element).
type jsonStep struct {
	key   string
	array bool
	index int
}

// String is the path's text form.
func (p JSONPath) String() string { return p.text }

// ParseJSONPath parses the text form of a JSON path.
func ParseJSONPath(s string) (JSONPath, error) {
	p := JSONPath{text: s}
	if s == "" {
		return p, errors.New("empty JSON path")
	}
	rest := s
	first := true
	for {
		// A key, unless the path starts with an array step.
		i := strings.IndexAny(rest, ".[")
		key := rest
		if i >= 0 {
			key = rest[:i]
		}
		if key == "" && !(first && strings.HasPrefix(rest, "[")) {
			return JSONPath{}, fmt.Errorf("JSON path %q: empty key", s)
		}
		if key != "" {
			if err := checkJSONKey(key); err != nil {
				return JSONPath{}, fmt.Errorf("JSON path %q: %v", s, err)
			}
			p.steps = append(p.steps, jsonStep{key: key})
		}
		first = false
		if i < 0 {
			return p, nil
		}
		rest = rest[i:]
		for strings.HasPrefix(rest, "[") {
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return JSONPath{}, fmt.Errorf("JSON path %q: '[' without ']'", s)
			}
			inner := rest[1:end]
			step := jsonStep{array: true, index: -1}
			if inner != "" {
				n, err := strconv.Atoi(inner)
				if err != nil || n < 0 || strconv.Itoa(n) != inner {
					return JSONPath{}, fmt.Errorf("JSON path %q: [%s]: want [] or an index such as [0]", s, inner)
				}
				step.index = n
			}
			p.steps = append(p.steps, step)
			rest = rest[end+1:]
		}
		if rest == "" {
			return p, nil
		}
		if rest[0] != '.' {
			return JSONPath{}, fmt.Errorf("JSON path %q: want '.' after ']'", s)
		}
		rest = rest[1:]
	}
}

func checkJSONKey(k string) error {
	for _, r := range k {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(".[]=\" \t#", r) {
			return fmt.Errorf("key %q: a key holds no %q", k, r)
		}
	}
	if !utf8.ValidString(k) {
		return fmt.Errorf("key %q: not valid UTF-8", k)
	}
	return nil
}

// Match reports whether the path finds, in the document v (as
// ParseStrictJSON returns it), a value glob matches: a string by its
// text, a number by its JSON text, true, false and null by those words;
// an object or array only the glob "*", which matches any value there is.
// Keys match exactly, and only where no other key of the same object
// differs from them in case alone (an origin that reads keys in any case
// could read the other): allow rules match so.
func (p JSONPath) Match(v any, glob string) bool {
	return p.walk(v, 0, glob, false)
}

// MatchFold is Match with keys compared case-folded, every key of an
// object that folds to the path's key tried: deny rules match so, since
// origins such as Go's encoding/json read "TOOLS" or "toolſ" as "tools".
func (p JSONPath) MatchFold(v any, glob string) bool {
	return p.walk(v, 0, glob, true)
}

func (p JSONPath) match(v any, glob string, loose bool) bool { return p.walk(v, 0, glob, loose) }

func (p JSONPath) walk(v any, i int, glob string, loose bool) bool {
	if i == len(p.steps) {
		return matchJSONValue(v, glob)
	}
	st := p.steps[i]
	if !st.array {
		obj, ok := v.(jsonObject)
		if !ok {
			return false
		}
		if !loose {
			child, ok := obj[st.key]
			if !ok {
				return false
			}
			want := fold(st.key)
			for k := range obj {
				if k != st.key && fold(k) == want {
					return false
				}
			}
			return p.walk(child, i+1, glob, loose)
		}
		want := fold(st.key)
		for k, child := range obj {
			if fold(k) == want && p.walk(child, i+1, glob, loose) {
				return true
			}
		}
		return false
	}
	arr, ok := v.([]any)
	if !ok {
		return false
	}
	if st.index >= 0 {
		return st.index < len(arr) && p.walk(arr[st.index], i+1, glob, loose)
	}
	for _, e := range arr {
		if p.walk(e, i+1, glob, loose) {
			return true
		}
	}
	return false
}

// matchDoc is match on a document read lazily (see jsonDoc): the same
// walk, over only the objects and arrays on the path, so that judging a
// body costs its size and a few words per container, not a tree of it
// (a 1 MiB body of small arrays took some 28 MiB as map[string]any and
// []any). An object on the path with a key given twice is an error: what
// would a server read?
func (p JSONPath) matchDoc(d *jsonDoc, v jval, glob string, loose bool) (bool, error) {
	return p.walkDoc(d, v, 0, glob, loose)
}

func (p JSONPath) walkDoc(d *jsonDoc, v jval, i int, glob string, loose bool) (bool, error) {
	if i == len(p.steps) {
		return matchDocValue(d, v, glob), nil
	}
	st := p.steps[i]
	if !st.array {
		if d.kind(v) != '{' {
			return false, nil
		}
		// The members are read into d's scratch (no memo: a walk reads
		// an object once), and what the walk goes on to is copied out
		// before it does, since the next object's read reuses it.
		ms, err := d.scanMembers(v)
		if err != nil {
			return false, err
		}
		want := fold(st.key)
		var buf [2]jval
		next := buf[:0]
		for k := range ms {
			switch {
			case !loose && ms[k].key == st.key:
				next = append(next, ms[k].val)
			case fold(ms[k].key) == want:
				if !loose {
					return false, nil // another key the host may read as this one
				}
				next = append(next, ms[k].val)
			}
		}
		for _, c := range next {
			if ok, err := p.walkDoc(d, c, i+1, glob, loose); ok || err != nil {
				return ok, err
			}
		}
		return false, nil
	}
	if d.kind(v) != '[' {
		return false, nil
	}
	b := d.b
	n := 0
	for e := skipWS(b, v.s+1); e < v.e && b[e] != ']'; n++ {
		end := d.skip(e)
		if st.index < 0 || st.index == n {
			if ok, err := p.walkDoc(d, jval{e, end}, i+1, glob, loose); ok || err != nil || st.index == n {
				return ok, err
			}
		}
		e = skipWS(b, end)
		if e < v.e && b[e] == ',' {
			e = skipWS(b, e+1)
		}
	}
	return false, nil
}

// matchDocValue is matchJSONValue for a value of a jsonDoc: a string by
// its text, a number, true, false and null by their JSON text, an object
// or array only by "*".
func matchDocValue(d *jsonDoc, v jval, glob string) bool {
	if glob == "*" {
		return true
	}
	switch d.kind(v) {
	case '{', '[':
		return false
	}
	return Glob(glob, d.text(v))
}

func matchJSONValue(v any, glob string) bool {
	if glob == "*" {
		return true
	}
	switch x := v.(type) {
	case string:
		return Glob(glob, x)
	case json.Number:
		return Glob(glob, x.String())
	case bool:
		return Glob(glob, strconv.FormatBool(x))
	case nil:
		return Glob(glob, "null")
	}
	return false
}

// jsonObject is a JSON object as ParseStrictJSON returns it (an alias,
// so that what json.Decoder makes of an object is one).
type jsonObject = map[string]any

// ParseStrictJSON parses one JSON document more strictly than
// encoding/json: it must be valid UTF-8, hold one value and nothing after
// it but whitespace, nest at most 256 deep, and no object may have a key
// twice. What a body rule reads must be what the server reads; a key given
// twice is read as its first value by some parsers and its last by others,
// which would let a request say one thing to doorman and another to the
// host. Numbers are kept as json.Number, objects as map[string]any.
func ParseStrictJSON(data []byte) (any, error) {
	if v, ok := parseStrictFast(data); ok {
		return v, nil
	}
	return parseStrictTokens(data)
}

// parseStrictFast is ParseStrictJSON for a document that passes: one
// json.Decoder.Decode (a token at a time costs several times as much),
// then a check that the rules hold. ok is false whenever the document
// might not pass, and parseStrictTokens says why.
//
// A key given twice is seen by counting: in a valid document every ':'
// outside a string separates one member of an object, so the objects'
// maps hold as many keys as there are colons only if no object has a
// key twice.
func parseStrictFast(data []byte) (v any, ok bool) {
	if !utf8.Valid(data) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	end := int(dec.InputOffset())
	if len(bytes.TrimLeft(data[end:], " \t\r\n")) != 0 {
		return nil, false
	}
	colons, open, inString := 0, 0, false
	for i := 0; i < end; i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '}', ']':
			open--
			continue
		}
		// Anything else is a value or part of one, at depth open.
		if open > maxJSONDepth {
			return nil, false
		}
		switch c {
		case '"':
			inString = true
		case ':':
			colons++
		case '{', '[':
			open++
		}
	}
	return v, colons == countKeys(v)
}

// countKeys is the number of keys of all objects in v.
func countKeys(v any) int {
	n := 0
	switch v := v.(type) {
	case jsonObject:
		n += len(v)
		for _, e := range v {
			n += countKeys(e)
		}
	case []any:
		for _, e := range v {
			n += countKeys(e)
		}
	}
	return n
}

// parseStrictTokens is ParseStrictJSON a token at a time: it names the
// first thing that breaks a rule.
func parseStrictTokens(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := strictValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func strictValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	t, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, errors.New("no JSON value")
		}
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := jsonObject{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				if _, dup := obj[k]; dup {
					return nil, fmt.Errorf("key %q given twice in one object", k)
				}
				v, err := strictValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := strictValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	}
	return t, nil
}
