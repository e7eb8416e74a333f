// Package strictjson decodes a configuration file's JSON into typed Go
// values so that every bad input is an error that names the key, by its
// full path ("limits.sniffTimeout", "listeners.tcp[0]"), the value, and
// why: a value of the wrong type, a value a field's own UnmarshalJSON or
// UnmarshalText refuses, an unknown key, a second JSON value after the
// first.
//
// It exists because encoding/json names neither: a json.Decoder with
// DisallowUnknownFields says `unknown field "x"` without saying where,
// its type errors name the Go type rather than the value, and it returns
// a field's own error ("time: invalid duration ...") without the key.
// Decoding follows encoding/json otherwise (it is what decodes each
// leaf): the same field names and tags, an exact key preferred and a
// key in another case accepted, null leaving a value as it is.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Error is one bad input: the key at Path (empty for the whole value)
// holds Value (its JSON, cut short when long), which is bad for the reason
// Why. An unknown key is reported at the path of its object, with the
// key's name as the value.
type Error struct {
	Path, Value, Why string
}

func (e *Error) Error() string {
	switch {
	case e.Path == "":
		return fmt.Sprintf("%s: %s", e.Value, e.Why)
	case e.Value == "":
		return fmt.Sprintf("%s: %s", e.Path, e.Why)
	}
	return fmt.Sprintf("%s %s: %s", e.Path, e.Value, e.Why)
}

// Decode decodes data, one JSON value, into v (a non-nil pointer),
// strictly. The keys' paths start with at ("" for the top level), as in
// "limits" for the value of a limits key. It reports every bad input, as
// *Error values joined (errors.Join); what decoded is left in v.
func Decode(at string, data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("strictjson: Decode needs a non-nil pointer, not %T", v)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return &Error{Path: at, Value: Compact(data), Why: "not JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		return &Error{Path: at, Value: Compact(data), Why: fmt.Sprintf("more than one JSON value (%s after the first)", Compact(rest))}
	}
	var errs []error
	decodeValue(at, raw, rv.Elem(), &errs)
	return errors.Join(errs...)
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodeValue decodes raw into v at path, appending what is bad to errs.
func decodeValue(path string, raw json.RawMessage, v reflect.Value, errs *[]error) {
	raw = bytes.TrimSpace(raw)
	bad := func(why string) { *errs = append(*errs, &Error{Path: path, Value: Compact(raw), Why: why}) }
	isNull := bytes.Equal(raw, []byte("null"))
	t := v.Type()
	if v.CanAddr() && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		if isNull && t.Kind() != reflect.Pointer {
			return
		}
		if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
			bad(why(err, t))
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		if isNull {
			v.SetZero()
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		decodeValue(path, raw, v.Elem(), errs)
	case reflect.Struct:
		if isNull {
			return
		}
		var obj map[string]json.RawMessage
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
			bad("want an object")
			return
		}
		fields := fieldsOf(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		given := map[string]string{} // field name -> the key that set it
		for _, k := range keys {
			f, ok := fields.find(k)
			if !ok {
				*errs = append(*errs, &Error{Path: path, Value: fmt.Sprintf("%q", k), Why: "unknown key; the keys are " + strings.Join(fields.names(), ", ")})
				continue
			}
			if other, dup := given[f.name]; dup {
				*errs = append(*errs, &Error{Path: join(path, f.name), Why: fmt.Sprintf("given twice, as %q and %q", other, k)})
				continue
			}
			given[f.name] = k
			decodeValue(join(path, f.name), obj[k], fieldByIndex(v, f.index), errs)
		}
	case reflect.Slice:
		if isNull {
			v.SetZero()
			return
		}
		if t.Elem().Kind() == reflect.Uint8 {
			// []byte is base64 in encoding/json.
			if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
				bad(why(err, t))
			}
			return
		}
		var elems []json.RawMessage
		if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
			bad("want " + describe(t))
			return
		}
		s := reflect.MakeSlice(t, len(elems), len(elems))
		for i, e := range elems {
			decodeValue(fmt.Sprintf("%s[%d]", path, i), e, s.Index(i), errs)
		}
		v.Set(s)
	case reflect.Map:
		if isNull {
			v.SetZero()
			return
		}
		if t.Key().Kind() != reflect.String {
			if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
				bad(why(err, t))
			}
			return
		}
		var obj map[string]json.RawMessage
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
			bad("want " + describe(t))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMapWithSize(t, len(obj)))
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			e := reflect.New(t.Elem()).Elem()
			decodeValue(join(path, k), obj[k], e, errs)
			v.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), e)
		}
	default:
		if isNull {
			return
		}
		if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
			bad(why(err, t))
		}
	}
}

// join is path followed by key.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// why says why decoding into a value of type t failed with err: what the
// value should have been, or the field's own reason.
func why(err error, t reflect.Type) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "want " + describe(t)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// describe names what a JSON value of type t is, for "want ...".
func describe(t reflect.Type) string {
	if reflect.PointerTo(t).Implements(textUnmarshalerType) && !reflect.PointerTo(t).Implements(unmarshalerType) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describe(t.Elem())
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array of " + plural(describe(t.Elem()))
	case reflect.Map:
		return "an object of " + plural(describe(t.Elem()))
	case reflect.Struct:
		return "an object"
	}
	return "a value of another type"
}

// plural turns "a string" into "strings", "an object" into "objects".
func plural(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "an "), "a ")
	switch {
	case s == "true or false":
		return "booleans"
	case strings.HasPrefix(s, "array of "), strings.HasPrefix(s, "object of "):
		return strings.Replace(s, " of ", "s of ", 1)
	}
	return s + "s"
}

// field is one JSON key of a struct: its name and where it is (through
// embedded structs).
type field struct {
	name  string
	index []int
}

type fieldList []field

// fieldsOf lists the keys of struct type t as encoding/json sees them:
// exported fields, named by their json tag or their Go name, "-" left
// out, untagged embedded structs flattened (their keys losing to the
// outer struct's of the same name).
func fieldsOf(t reflect.Type) fieldList {
	var out fieldList
	var walk func(t reflect.Type, index []int, depth int)
	seen := map[string]int{} // name -> depth it was found at
	walk = func(t reflect.Type, index []int, depth int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			idx := append(slices.Clone(index), i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				walk(ft, idx, depth+1)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if d, ok := seen[name]; ok && d <= depth {
				continue
			}
			seen[name] = depth
			out = slices.DeleteFunc(out, func(o field) bool { return o.name == name })
			out = append(out, field{name: name, index: idx})
		}
	}
	walk(t, nil, 0)
	return out
}

// find returns the field key names: the one named exactly so, else one
// whose name differs only in case.
func (fs fieldList) find(key string) (field, bool) {
	for _, f := range fs {
		if f.name == key {
			return f, true
		}
	}
	for _, f := range fs {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return field{}, false
}

func (fs fieldList) names() []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

// fieldByIndex is v.FieldByIndex, allocating the embedded pointers on
// the way.
func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// Keys lists the keys of the struct type of v (a struct or a pointer to
// one), as Decode reads them: for tools and tests that enumerate a
// configuration's keys.
func Keys(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return fieldsOf(t).names()
}

// Compact renders a JSON value on one line for an error message, cut
// short when long.
func Compact(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(bytes.TrimSpace(raw))
	}
	s := b.String()
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
