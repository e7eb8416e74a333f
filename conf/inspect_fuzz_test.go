package conf

import (
	"net/http"
	"reflect"
	"testing"
)

// The seed corpora live in testdata/fuzz/FuzzInspectLine,
// testdata/fuzz/FuzzJSONPath and testdata/fuzz/FuzzStrictJSON.

// FuzzInspectLine checks that a policy file with request rules never
// panics the parser, that what parses renders to a file that parses back
// equal and renders the same, and that judging a request by it does not
// panic.
func FuzzInspectLine(f *testing.F) {
	f.Fuzz(func(t *testing.T, line string, method, path, body string) {
		p, err := ParseFile([]byte(line))
		if err != nil {
			return
		}
		out := p.MarshalFile()
		q, err := ParseFile(out)
		if err != nil {
			t.Fatalf("%q renders as\n%s\nwhich does not parse: %v", line, out, err)
		}
		if !q.Equal(p) || string(q.MarshalFile()) != string(out) {
			t.Fatalf("%q does not round-trip:\n%s\n%s", line, out, q.MarshalFile())
		}
		js, err := p.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseJSON(js); err != nil {
			t.Fatalf("%q renders as JSON %s that does not parse: %v", line, js, err)
		}
		for i := range p.Inspect {
			h := &p.Inspect[i]
			r := &Request{Method: method, Path: path, Header: http.Header{"X": {body}}, Query: map[string][]string{"q": {body}}, Body: []byte(body)}
			h.NeedsBody(r)
			if j := h.Judge(r); j.Verdict != VerdictAllow && j.Verdict != VerdictDeny {
				t.Fatalf("verdict %q", j.Verdict)
			}
		}
	})
}

// FuzzJSONPath checks that parsing a path and a body and matching them
// never panics, that a path's text is what it was parsed from, that a
// strictly parsed body matches "*" at the paths it has, and that the lazy
// walk host rules judge with (matchDoc) agrees with the parsed tree.
func FuzzJSONPath(f *testing.F) {
	f.Fuzz(func(t *testing.T, path, body, glob string) {
		p, err := ParseJSONPath(path)
		if err != nil {
			return
		}
		if p.String() != path {
			t.Fatalf("%q reads back as %q", path, p.String())
		}
		q, err := ParseJSONPath(p.String())
		if err != nil || q.String() != p.String() {
			t.Fatalf("%q does not parse back: %v", path, err)
		}
		v, err := ParseStrictJSON([]byte(body))
		if err != nil {
			return
		}
		if p.Match(v, glob) && !p.Match(v, "*") {
			t.Fatalf("%q matches %q in %s but not *", path, glob, body)
		}
		// The lazy walk rules judge bodies with reads what the parsed
		// tree says, strictly and loosely, for every body the strict
		// parser accepts.
		d, root, err := newJSONDoc([]byte(body))
		if err != nil {
			t.Fatalf("%q: ParseStrictJSON accepts it, newJSONDoc does not: %v", body, err)
		}
		for _, loose := range []bool{false, true} {
			got, err := p.matchDoc(d, root, glob, loose)
			if want := p.match(v, glob, loose); err != nil || got != want {
				t.Fatalf("%q in %s, glob %q, loose %v: the lazy walk says %v (%v), the tree %v", path, body, glob, loose, got, err, want)
			}
		}
	})
}

// FuzzStrictJSON checks ParseStrictJSON's fast path against its token
// parser: they accept the same documents as the same values (a key given
// twice, nesting too deep or data after the value must never get past the
// fast path).
func FuzzStrictJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok := parseStrictFast(body)
		slow, err := parseStrictTokens(body)
		if ok && (err != nil || !reflect.DeepEqual(fast, slow)) {
			t.Fatalf("%q: the fast path says %#v, the token parser %#v (%v)", body, fast, slow, err)
		}
		if !ok && err == nil {
			t.Fatalf("%q: the fast path refused what the token parser accepts", body)
		}
	})
}
