package cniinstall

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/.

// FuzzValidateConfig checks that ValidateConfig never panics, that an
// accepted config renders an entry that ValidateEntry reads back to the
// same config, and that the rendering does not depend on the layout.
func FuzzValidateConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ValidateConfig(data)
		if err != nil {
			if c != nil {
				t.Fatal("a config came back with an error")
			}
			return
		}
		e := c.Entry("", "")
		back, err := ValidateEntry(e)
		if err != nil {
			t.Fatalf("the entry of an accepted config is refused: %v\n%s", err, e)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("entry reads back as %+v, want %+v", back, c)
		}
		if !bytes.Equal(compactJSON(t, c.Entry("  ", "\t")), compactJSON(t, e)) {
			t.Fatal("indented and one-line entries differ")
		}
	})
}

func compactJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := compactInto(&out, b); err != nil {
		t.Fatalf("entry is not JSON: %v\n%s", err, b)
	}
	return out.Bytes()
}

// FuzzWithEntry checks, for every conflist libcni loads, that the
// installer's edit gives a conflist libcni still loads with exactly one
// doorman entry and the other plugins in their order, that a second edit
// changes no byte, and that removing the entry gives back the file byte
// for byte when it had none.
func FuzzWithEntry(f *testing.F) {
	cfg := DefaultConfig()
	f.Fuzz(func(t *testing.T, data []byte) {
		before, err := libcni.ConfListFromBytes(data)
		if err != nil {
			return
		}
		out, err := withEntry(data, cfg)
		if err != nil {
			return // refused, not guessed at
		}
		after, err := libcni.ConfListFromBytes(out)
		if err != nil {
			t.Fatalf("the edit does not load: %v\n%s", err, out)
		}
		var want, got []string
		for _, p := range before.Plugins {
			if p.Network.Type != PluginType {
				want = append(want, p.Network.Type)
			}
		}
		n := 0
		for _, p := range after.Plugins {
			if p.Network.Type == PluginType {
				n++
			} else {
				got = append(got, p.Network.Type)
			}
		}
		if n != 1 || !reflect.DeepEqual(got, want) {
			t.Fatalf("%d doorman entries, others %v want %v:\n%s", n, got, want, out)
		}
		again, err := withEntry(out, cfg)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("second edit: %v\n%s\n%s", err, out, again)
		}
		back, err := withoutEntry(out)
		if err != nil {
			t.Fatalf("remove: %v", err)
		}
		if len(want) == len(before.Plugins) && !bytes.Equal(back, data) {
			t.Fatalf("remove does not restore:\n%q\n%q", data, back)
		}
	})
}

func compactInto(dst *bytes.Buffer, b []byte) error { return json.Compact(dst, b) }
