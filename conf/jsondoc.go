package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// jsonDoc is a JSON document read where a rule set looks, and no
// further: the rule sets' matcher and rewriter work on its exact bytes.
// The whole document is checked once (valid JSON, valid UTF-8) and, in
// one more pass, every object and array is indexed by its span; after
// that an object's members, an array's elements and a string's text are
// read only when a rule asks for them, without reading again the bytes
// of the values they hold, and every value keeps its byte span, so that
// a rewrite can delete exactly the bytes of an entry and leave every
// other byte as it was.
type jsonDoc struct {
	b []byte
	// conts are the document's objects and arrays in the order they
	// start (see index).
	conts []container
	// What has been read: each object and array is read once however
	// many rules look at it (container.memo indexes these).
	objs  []objMemo
	elems [][]jval
	// at is the container found last: reads go mostly forward.
	at int
	// mslab and eslab hold the members and elements read, each
	// object's and array's a run of them (fewer, larger allocations;
	// see carve); mtmp and etmp are where they are read into first.
	mslab, mtmp []jmember
	eslab, etmp []jval
	// keys are the keys read without escapes, with their folding, by
	// their bytes: an agent's body repeats a few keys many times.
	keys map[string]internedKey
	// keysRead counts the keys read before keys is made.
	keysRead int
	// The first containers, members, elements and memos of a document
	// are held here: a small request is read in one allocation.
	contsBuf [24]container
	mslabBuf [16]jmember
	mtmpBuf  [16]jmember
	eslabBuf [8]jval
	etmpBuf  [16]jval
	objsBuf  [8]objMemo
	elemsBuf [4][]jval
}

// internedKey is a key as read and as folded (looseKey).
type internedKey struct{ key, fold string }

// maxInterned bounds the keys a document keeps in jsonDoc.keys.
const maxInterned = 4096

// container is one object or array: its span b[s:e], and 1 + the index
// of what was read of it in objs or elems (0: not read yet).
type container struct {
	s, e, memo int32
}

type objMemo struct {
	ms  []jmember
	err error
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

// MaxJSONContainers is how many objects and arrays a body judged by
// request rules or a rule set may hold. A rule set's walk costs some
// hundreds of bytes for each container on its paths (a candidate, its
// members or elements): without a bound, 1 MiB of "{}," under tools[]
// took 150 MiB, and a 32 MiB body gigabytes, in a proxy whose cgroup
// holds 256 MiB. Real requests hold a few thousand (a long conversation
// with tool schemas); a body with more cannot be read: deny rules and
// enforcing rule sets refuse it.
const MaxJSONContainers = 1 << 17

// errDocContainers is a document with more than MaxJSONContainers
// objects and arrays.
var errDocContainers = fmt.Errorf("more than %d objects and arrays", MaxJSONContainers)

// JSONContainerBound is an upper bound of the objects and arrays body
// holds, at most MaxJSONContainers+1: its '{' and '[' bytes, strings'
// included. It costs a pass of bytes.Count, and is what judging the
// body may cost, for a caller that bounds what judgements in flight cost.
func JSONContainerBound(body []byte) int {
	n := bytes.Count(body, []byte{'{'})
	if n <= MaxJSONContainers {
		n += bytes.Count(body, []byte{'['})
	}
	return min(n, MaxJSONContainers+1)
}

// newJSONDoc checks data: one JSON value (RFC 8259), whitespace around
// it, valid UTF-8, nested at most maxJSONDepth deep. It returns the
// document and its top value.
func newJSONDoc(data []byte) (*jsonDoc, jval, error) {
	if !utf8.Valid(data) {
		return nil, jval{}, errors.New("not valid UTF-8")
	}
	d := docPool.Get().(*jsonDoc)
	d.b = data
	d.mslab, d.eslab, d.objs, d.elems = d.mslabBuf[:0], d.eslabBuf[:0], d.objsBuf[:0], d.elemsBuf[:0]
	d.mtmp, d.etmp = d.mtmpBuf[:0], d.etmpBuf[:0]
	if !d.index(maxJSONDepth) {
		tooMany := len(d.conts) > MaxJSONContainers
		d.release()
		if tooMany {
			return nil, jval{}, errDocContainers
		}
		// Not JSON, or nested too deep: say which, and where, as
		// ParseStrictJSON does.
		if json.Valid(data) {
			return nil, jval{}, errDocDepth
		}
		var v any
		err := json.Unmarshal(data, &v)
		if err == nil {
			err = errors.New("not valid JSON")
		}
		return nil, jval{}, err
	}
	s := skipWS(data, 0)
	return d, jval{s, d.skip(s)}, nil
}

// docPool holds cleared jsonDocs: a document's inline buffers (about
// 3 KB) would otherwise be allocated, and collected, for every request
// a rule set judges.
var docPool = sync.Pool{New: func() any { return new(jsonDoc) }}

// release clears d, dropping every reference it holds, and returns it
// to docPool. Nothing read from d may be used after: its members and
// elements are held in d's buffers (the strings read from it stay
// valid).
func (d *jsonDoc) release() {
	*d = jsonDoc{}
	docPool.Put(d)
}

// index reads the document once: it reports whether it is what
// json.Valid accepts (one JSON value, whitespace around it) with
// containers nested at most max deep and at most MaxJSONContainers of
// them, and fills conts with the span of every object and array, in the
// order they start.
func (d *jsonDoc) index(max int) bool {
	b := d.b
	if len(b) > 1<<31-1 {
		return false // not reached: bodies are read up to 32 MiB
	}
	// At most as many containers as '{' and '[' bytes (strings hold
	// some): one allocation.
	if n := JSONContainerBound(b); n > len(d.contsBuf) {
		d.conts = make([]container, 0, n)
	} else {
		d.conts = d.contsBuf[:0]
	}
	var stack [32]int32
	open := stack[:0] // indexes in conts of the containers not closed
	i := skipWS(b, 0)
	// A value starts at b[i] (an object's first key read: see key).
value:
	for {
		if i >= len(b) {
			return false
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(open) >= max {
				return false
			}
			open = append(open, int32(len(d.conts)))
			d.conts = append(d.conts, container{s: int32(i)})
			if len(d.conts) > MaxJSONContainers {
				return false // newJSONDoc says why
			}
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']': empty
				break
			}
			if c == '{' {
				if i = scanKey(b, i); i < 0 {
					return false
				}
			}
			continue value
		case '"':
			if i = scanString(b, i); i < 0 {
				return false
			}
		case 't':
			if !bytes.HasPrefix(b[i:], []byte("true")) {
				return false
			}
			i += 4
		case 'f':
			if !bytes.HasPrefix(b[i:], []byte("false")) {
				return false
			}
			i += 5
		case 'n':
			if !bytes.HasPrefix(b[i:], []byte("null")) {
				return false
			}
			i += 4
		default:
			if i = scanNumber(b, i); i < 0 {
				return false
			}
		}
		// After a value (or at a close): close containers until a
		// comma leads to the next value.
		for {
			i = skipWS(b, i)
			if len(open) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := &d.conts[open[len(open)-1]]
			switch c := b[i]; {
			case c == ',':
				i = skipWS(b, i+1)
				if b[top.s] == '{' {
					if i = scanKey(b, i); i < 0 {
						return false
					}
				}
				continue value
			case c == b[top.s]+2: // '}' for '{', ']' for '['
				top.e = int32(i + 1)
				open = open[:len(open)-1]
				i++
			default:
				return false
			}
		}
	}
}

// scanKey reads an object's key and its colon at b[i]: the index of
// the value after them, or -1 if they are not there.
func scanKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = scanString(b, i); i < 0 {
		return -1
	}
	if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipWS(b, i+1)
}

// scanString reads the string at b[i] (its quote): the index after its
// closing quote, or -1 if it is not a JSON string (a control character,
// an escape JSON has not, no end).
func scanString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1
		case c < 0x20:
			return -1
		case c == '\\':
			if j++; j >= len(b) {
				return -1
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return -1
				}
				for _, h := range b[j+1 : j+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				j += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// scanNumber reads the number at b[i]: the index after it, or -1 if
// none starts there (RFC 8259: -? (0 | [1-9][0-9]*) (.[0-9]+)?
// ([eE][+-]?[0-9]+)?).
func scanNumber(b []byte, i int) int {
	digits := func(i int) int { // at least one digit at b[i]: the index after them, or -1
		j := i
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	default:
		if b[i] < '1' || b[i] > '9' {
			return -1
		}
		i = digits(i)
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}

// find returns the index in conts of the container that starts at s, or
// -1.
func (d *jsonDoc) find(s int) int {
	if d.at < len(d.conts) && int(d.conts[d.at].s) == s {
		return d.at
	}
	if d.at+1 < len(d.conts) && int(d.conts[d.at+1].s) == s {
		d.at++
		return d.at
	}
	k, ok := slices.BinarySearchFunc(d.conts, s, func(c container, s int) int { return int(c.s) - s })
	if !ok {
		return -1
	}
	d.at = k
	return k
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
		if k := d.find(i); k >= 0 {
			return int(d.conts[k].e)
		}
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
	k := d.find(v.s)
	if k >= 0 && d.conts[k].memo > 0 {
		m := d.objs[d.conts[k].memo-1]
		return m.ms, m.err
	}
	ms, err := d.readMembers(v)
	if k >= 0 {
		d.objs = append(d.objs, objMemo{ms, err})
		d.conts[k].memo = int32(len(d.objs))
	}
	return ms, err
}

func (d *jsonDoc) readMembers(v jval) ([]jmember, error) {
	ms, err := d.scanMembers(v)
	if len(ms) == 0 || err != nil {
		return nil, err
	}
	return carve(&d.mslab, ms), nil
}

// scanMembers returns the members of the object v, in order, in d's
// scratch (valid until the next read of an object): for a walk that reads
// each object once and keeps nothing of it. An error if a key is given
// twice.
func (d *jsonDoc) scanMembers(v jval) ([]jmember, error) {
	b := d.b
	d.mtmp = d.mtmp[:0]
	i := skipWS(b, v.s+1)
	for i < v.e && b[i] != '}' {
		ke := stringEnd(b, i)
		key, fold := d.key(jval{i, ke})
		j := skipWS(b, ke)
		j = skipWS(b, j+1) // ':'
		ve := d.skip(j)
		d.mtmp = append(d.mtmp, jmember{key: key, fold: fold, keyS: i, val: jval{j, ve}})
		i = skipWS(b, ve)
		if i < v.e && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	if err := checkDuplicateKeys(d.mtmp); err != nil {
		return nil, err
	}
	return d.mtmp, nil
}

// maxSlab is how many members or elements a new slab is made for at
// most, unless one object or array needs more: slabs start small (a
// small body reads a few objects) and double.
const maxSlab = 1024

// carve copies src (not empty) into the slab, starting a new one when
// it has no room left: the runs carved before stay where they are.
func carve[T any](slab *[]T, src []T) []T {
	c := *slab
	if cap(c)-len(c) < len(src) {
		c = make([]T, 0, max(len(src), min(2*cap(c), maxSlab), 8))
	}
	start := len(c)
	c = append(c, src...)
	*slab = c
	return c[start:len(c):len(c)]
}

// key decodes the key k and folds it (looseKey).
func (d *jsonDoc) key(k jval) (key, fold string) {
	raw := d.b[k.s+1 : k.e-1]
	if bytes.IndexByte(raw, '\\') >= 0 {
		key = d.str(k)
		return key, looseKey(key)
	}
	if ik, ok := commonKeys[string(raw)]; ok {
		return ik.key, ik.fold
	}
	if ik, ok := d.keys[string(raw)]; ok {
		return ik.key, ik.fold
	}
	key = string(raw)
	fold = looseKey(key)
	// A small body reads a few keys: a map for them would cost more
	// than it saves.
	if d.keys == nil {
		if d.keysRead++; d.keysRead < internAfter {
			return key, fold
		}
		d.keys = make(map[string]internedKey)
	}
	if len(d.keys) < maxInterned {
		d.keys[key] = internedKey{key, fold}
	}
	return key, fold
}

// internAfter is how many keys outside commonKeys a document reads
// before it interns them.
const internAfter = 16

// commonKeys are keys model API requests commonly hold, as a body spells
// them, with their folding: read without allocating. Only read.
var commonKeys = func() map[string]internedKey {
	m := map[string]internedKey{}
	for _, k := range []string{
		// Anthropic Messages
		"model", "max_tokens", "messages", "role", "content", "type", "text", "tools", "name",
		"description", "input_schema", "properties", "required", "items", "enum", "stream", "system",
		"tool_choice", "tool_use_id", "id", "input", "cache_control", "temperature", "top_p", "top_k",
		"metadata", "user_id", "stop_sequences", "thinking", "budget_tokens", "source", "media_type",
		"data", "url", "citations", "is_error", "signature", "mcp_servers", "container", "requests",
		"custom_id", "params", "service_tier", "context_management", "betas", "title", "context",
		// OpenAI Responses and Chat Completions
		"instructions", "previous_response_id", "store", "include", "reasoning", "effort", "summary",
		"parallel_tool_calls", "response_format", "json_schema", "schema", "strict", "parameters",
		"function", "arguments", "call_id", "output", "tool_calls", "max_output_tokens",
		"max_completion_tokens", "n", "seed", "user", "prompt", "web_search_options", "server_url",
		"server_label", "connector_id", "network_policy", "image_url", "detail", "file_id",
		// Gemini
		"contents", "parts", "systemInstruction", "system_instruction", "generationConfig",
		"generation_config", "functionDeclarations", "function_declarations", "toolConfig",
		"tool_config", "functionCall", "functionResponse", "response", "safetySettings",
		"category", "threshold", "inlineData", "inline_data", "mimeType", "mime_type", "fileData",
		"file_data", "fileUri", "file_uri",
		// OpenRouter, Perplexity, Mistral
		"plugins", "disable_search", "agent_id", "prefix",
	} {
		m[k] = internedKey{k, looseKey(k)}
	}
	return m
}()

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
	k := d.find(v.s)
	if k >= 0 && d.conts[k].memo > 0 {
		return d.elems[d.conts[k].memo-1]
	}
	e := d.readElements(v)
	if k >= 0 {
		d.elems = append(d.elems, e)
		d.conts[k].memo = int32(len(d.elems))
	}
	return e
}

func (d *jsonDoc) readElements(v jval) []jval {
	b := d.b
	d.etmp = d.etmp[:0]
	i := skipWS(b, v.s+1)
	for i < v.e && b[i] != ']' {
		e := d.skip(i)
		d.etmp = append(d.etmp, jval{i, e})
		i = skipWS(b, e)
		if i < v.e && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	if len(d.etmp) == 0 {
		return nil
	}
	return carve(&d.eslab, d.etmp)
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
