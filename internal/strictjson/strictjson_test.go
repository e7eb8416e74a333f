package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// duration refuses what time.ParseDuration refuses, as a config's
// duration type does.
type duration time.Duration

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = duration(v)
	return err
}

type inner struct {
	Count   int       `json:"count,omitempty"`
	Timeout duration  `json:"timeout,omitempty"`
	Limit   *duration `json:"limit,omitempty"`
}

type Embedded struct {
	Extra string `json:"extra"`
}

type sample struct {
	Name    string            `json:"name"`
	On      *bool             `json:"on,omitempty"`
	Addrs   []netip.AddrPort  `json:"addrs,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Inner   inner             `json:"inner,omitzero"`
	List    []inner           `json:"list,omitempty"`
	Raw     json.RawMessage   `json:"raw,omitempty"`
	Skipped string            `json:"-"`
	Embedded
	hidden int
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"inner": {"timeout": "ten seconds"}}`, `cfg.inner.timeout "ten seconds": time: invalid duration "ten seconds"`},
		{`{"inner": {"count": "ten"}}`, `cfg.inner.count "ten": want an integer`},
		{`{"inner": {"count": 1.5}}`, `cfg.inner.count 1.5: want an integer`},
		{`{"inner": {"limit": 3}}`, `cfg.inner.limit 3: want a string`},
		{`{"inner": {"cuont": 3}}`, `cfg.inner "cuont": unknown key; the keys are count, timeout, limit`},
		{`{"inner": []}`, `cfg.inner []: want an object`},
		{`{"list": [{}, {"count": true}]}`, `cfg.list[1].count true: want an integer`},
		{`{"list": {"count": 1}}`, `cfg.list {"count":1}: want an array of objects`},
		{`{"addrs": ["203.0.113.1:53", "x"]}`, `cfg.addrs[1] "x": not an ip:port`},
		{`{"addrs": [53]}`, `cfg.addrs[0] 53: want a string`},
		{`{"headers": {"a": 1}}`, `cfg.headers.a 1: want a string`},
		{`{"headers": []}`, `cfg.headers []: want an object of strings`},
		{`{"on": "yes"}`, `cfg.on "yes": want true or false`},
		{`{"name": ["x"]}`, `cfg.name ["x"]: want a string`},
		{`{"Skipped": "x"}`, `cfg "Skipped": unknown key`},
		{`{"hidden": 1}`, `cfg "hidden": unknown key`},
		{`{"extra": 1}`, `cfg.extra 1: want a string`},
		{`{} {}`, `cfg {} {}: more than one JSON value`},
		{`{"name": "a", "NAME": "b"}`, `cfg.name: given twice, as "NAME" and "name"`},
		{`{"name": `, `cfg {"name":: not JSON`},
		{`[1]`, `cfg [1]: want an object`},
	} {
		var s sample
		err := Decode("cfg", []byte(tc.json), &s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.json, err, tc.want)
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %T is not an *Error", tc.json, err)
		}
	}
	// Every bad key at once.
	err := Decode("", []byte(`{"name": 1, "inner": {"count": "x", "timeout": "y"}}`), &sample{})
	if n := strings.Count(err.Error(), "\n") + 1; n != 3 {
		t.Errorf("three bad keys: %d errors: %v", n, err)
	}
	// The top level unnamed.
	if err := Decode("", []byte(`{"name": 1}`), &sample{}); err == nil || err.Error() != `name 1: want a string` {
		t.Errorf("top level: %v", err)
	}
}

func TestDecodeAsEncodingJSON(t *testing.T) {
	in := `{"name": "n", "on": false, "addrs": ["[2001:db8::1]:53"], "headers": {"a": "b"},
		"inner": {"count": 3, "timeout": "1s", "limit": null}, "list": [{"count": 1}], "raw": {"x": [1]}, "extra": "e"}`
	var got, want sample
	want.Inner.Limit = new(duration)
	got.Inner.Limit = new(duration)
	if err := Decode("", []byte(in), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(in), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode:\n%+v\nencoding/json:\n%+v", got, want)
	}
	if k := fmt.Sprint(Keys(&sample{})); k != "[name on addrs headers inner list raw extra]" {
		t.Errorf("Keys: %s", k)
	}
}

// FuzzDecode checks that Decode never panics, and that what it accepts
// encoding/json decodes to the same value.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"name": "n", "inner": {"count": 3, "timeout": "1s"}, "list": [{}], "headers": {"a": "b"}}`))
	f.Add([]byte(`{"addrs": ["203.0.113.1:53"], "on": true, "raw": [1, {"a": null}], "extra": ""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want sample
		if err := Decode("", data, &got); err != nil {
			return
		}
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("Decode accepted %q, encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: Decode %+v, encoding/json %+v", data, got, want)
		}
	})
}
