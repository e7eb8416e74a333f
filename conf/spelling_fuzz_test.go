package conf

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// The seed corpus lives in testdata/fuzz/FuzzSpelling.

// FuzzSpelling checks the invariants of request spellings:
//
//   - For any target and any rule path: if the rule's path matches the
//     target's NormalizePath, a deny rule with that path refuses the
//     request; an allow rule with it (default deny) passes it only in
//     its canonical spelling, matched exactly.
//   - A canonical path p, spelled otherwise by ops (slashes doubled or
//     encoded, path parameters, case, percent-encoding once and twice,
//     trailing slash, trailing dots and spaces, fullwidth and
//     case-folding characters, an encoded '?' or '#'; the method in lower
//     case, HEAD for GET, an override), is refused by a deny rule for p,
//     or refused outright, and passed by an allow rule for p only when
//     it decodes to p with p's method.
//   - The normalized target is what net/url sends, and normalizing it
//     again changes nothing.
func FuzzSpelling(f *testing.F) {
	f.Fuzz(func(t *testing.T, pattern, target string, ops []byte, sel byte) {
		tg, err := ParseTarget(target)
		if err != nil {
			var te *TargetError
			if !asTargetError(err, &te) {
				t.Fatalf("%q: error %v is not a TargetError", target, err)
			}
			return
		}
		if got := (&url.URL{Path: tg.Path, RawPath: tg.EscapedPath}).EscapedPath(); got != tg.EscapedPath {
			t.Fatalf("%q: net/url would send %q, not %q", target, got, tg.EscapedPath)
		}
		again, err := ParseTarget(tg.EscapedPath)
		if err != nil || again.EscapedPath != tg.EscapedPath || again.Path != tg.Path {
			t.Fatalf("%q normalizes to %q, which normalizes to %q (%v)", target, tg.EscapedPath, again.EscapedPath, err)
		}
		method := []string{"GET", "POST", "DELETE"}[int(sel)%3]
		if strings.HasPrefix(pattern, "/") && checkGlobText("path", pattern) == nil {
			deny := &InspectHost{Host: "x", Deny: []Rule{{Methods: []string{method}, Path: pattern}}}
			allow := &InspectHost{Host: "x", Allow: []Rule{{Methods: []string{method}, Path: pattern}}, Default: VerdictDeny}
			r := &Request{Method: method, Path: tg.Path, EscapedPath: tg.EscapedPath, Header: http.Header{}}
			if matchPath(fold(pattern), NormalizePath(tg.Path)) {
				if j := deny.Judge(r); j.Verdict != VerdictDeny {
					t.Fatalf("deny %s %q passes %q, whose NormalizePath %q it matches", method, pattern, target, NormalizePath(tg.Path))
				}
			}
			r = &Request{Method: method, Path: tg.Path, EscapedPath: tg.EscapedPath, Header: http.Header{}}
			if j := allow.Judge(r); j.Verdict == VerdictAllow {
				if odd := r.spell().oddPath + r.spell().oddMethod; odd != "" || !matchPath(pattern, tg.Path) {
					t.Fatalf("allow %s %q passes %q, which is not canonical (%s) or does not match exactly", method, pattern, target, odd)
				}
			}
		}

		// A canonical path, spelled otherwise.
		if tg.RawQuery != "" || strings.ContainsAny(target, "?*") || tg.EscapedPath != target {
			return
		}
		if forms, _ := pathForms(tg.Path); oddPath(tg.EscapedPath, forms) != "" {
			return
		}
		q, m, hdr := respell(target, method, ops, sel)
		deny := &InspectHost{Host: "x", Deny: []Rule{{Methods: []string{method}, Path: tg.Path}}}
		allow := &InspectHost{Host: "x", Allow: []Rule{{Methods: []string{method}, Path: tg.Path}}, Default: VerdictDeny}
		tq, err := ParseTarget(q)
		if err != nil {
			return // refused outright
		}
		query, err := url.ParseQuery(tq.RawQuery)
		if err != nil {
			t.Fatalf("respelled query %q: %v", tq.RawQuery, err)
		}
		newReq := func() *Request {
			return &Request{Method: m, Path: tq.Path, EscapedPath: tq.EscapedPath, Query: query, Header: hdr.Clone()}
		}
		if j := deny.Judge(newReq()); j.Verdict != VerdictDeny {
			t.Fatalf("deny %s %q passes %s %q %v, a spelling of it", method, tg.Path, m, q, hdr)
		}
		if j := allow.Judge(newReq()); j.Verdict == VerdictAllow && (tq.Path != tg.Path || m != method) {
			t.Fatalf("allow %s %q passes %s %q, another spelling of it", method, tg.Path, m, q)
		}
	})
}

func asTargetError(err error, te **TargetError) bool {
	e, ok := err.(*TargetError)
	*te = e
	return ok
}

// respell spells the canonical target p and method otherwise, as ops
// say: pairs of an operation and where it applies. sel's higher bits
// change the method.
func respell(p, method string, ops []byte, sel byte) (string, string, http.Header) {
	s := p
	for i := 0; i+1 < len(ops); i += 2 {
		s = respellOnce(s, ops[i], int(ops[i+1]))
	}
	hdr := http.Header{}
	m := method
	if sel&8 != 0 && m == "GET" {
		m = "HEAD"
	}
	if sel&16 != 0 {
		m = strings.ToLower(m)
	}
	switch {
	case sel&32 != 0:
		name := "X-Http-Method-Override"
		if sel&64 != 0 {
			name = "X_HTTP_METHOD"
		}
		hdr[name] = []string{strings.ToLower(method)}
		m = "PUT"
	case sel&64 != 0:
		s += "?_method=" + strings.ToLower(method)
		m = "PATCH"
	}
	return s, m, hdr
}

// indexes returns the indexes of s's bytes for which ok holds.
func indexes(s string, ok func(i int) bool) []int {
	var out []int
	for i := 0; i < len(s); i++ {
		if ok(i) {
			out = append(out, i)
		}
	}
	return out
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// respellOnce applies one operation at the pos-th place it can.
func respellOnce(s string, op byte, pos int) string {
	at := func(idx []int) (int, bool) {
		if len(idx) == 0 {
			return 0, false
		}
		return idx[pos%len(idx)], true
	}
	slashes := indexes(s, func(i int) bool { return s[i] == '/' })
	// segment ends: before every '/' but the first, and the end.
	ends := append(indexes(s, func(i int) bool { return i > 0 && s[i] == '/' }), len(s))
	letters := indexes(s, func(i int) bool { return isLetter(s[i]) })
	insert := func(i int, x string) string { return s[:i] + x + s[i:] }
	replace := func(i int, x string) string { return s[:i] + x + s[i+1:] }
	enc := func(b byte, lower bool) string {
		e := fmt.Sprintf("%%%02X", b)
		if lower {
			e = strings.ToLower(e)
		}
		return e
	}
	encRune := func(r rune) string {
		var b strings.Builder
		buf := make([]byte, 4)
		for _, c := range buf[:utf8.EncodeRune(buf, r)] {
			b.WriteString(enc(c, false))
		}
		return b.String()
	}
	switch op % 11 {
	case 0: // a slash doubled
		if i, ok := at(slashes); ok {
			return insert(i, "/")
		}
	case 1: // a path parameter
		if i, ok := at(ends); ok {
			return insert(i, ";x=1")
		}
	case 2: // a letter's case
		if i, ok := at(letters); ok {
			return replace(i, string(s[i]^0x20))
		}
	case 3: // a byte percent-encoded
		if i, ok := at(indexes(s, func(i int) bool { return i > 0 })); ok {
			return replace(i, enc(s[i], pos&1 != 0))
		}
	case 4: // a percent-encoding encoded again
		if i, ok := at(indexes(s, func(i int) bool { return s[i] == '%' })); ok {
			return replace(i, "%25")
		}
		if i, ok := at(indexes(s, func(i int) bool { return i > 0 })); ok {
			return replace(i, "%25"+enc(s[i], false)[1:])
		}
	case 5: // a slash encoded
		if i, ok := at(indexes(s, func(i int) bool { return i > 0 && s[i] == '/' })); ok {
			return replace(i, enc('/', pos&1 != 0))
		}
	case 6: // the trailing slash
		if len(s) > 1 && strings.HasSuffix(s, "/") {
			return s[:len(s)-1]
		}
		return s + "/"
	case 7: // a segment's trailing dot or space
		if i, ok := at(ends); ok {
			return insert(i, []string{".", "%20", "%C2%A0", ".%20."}[pos%4])
		}
	case 8: // a fullwidth letter or slash
		if i, ok := at(indexes(s, func(i int) bool { return isLetter(s[i]) || i > 0 && s[i] == '/' })); ok {
			return replace(i, encRune(rune(s[i])-0x21+0xFF01))
		}
	case 9: // an encoded '?' or '#' and what follows
		return s + []string{"%3Fx", "%23x", "%3f/", "%23"}[pos%4]
	case 10: // characters that fold to k, s and i
		if i, ok := at(indexes(s, func(i int) bool { return strings.IndexByte("kKsSiI", s[i]) >= 0 })); ok {
			r := map[byte]rune{'k': '\u212a', 'K': '\u212a', 's': '\u017f', 'S': '\u017f', 'i': '\u0131', 'I': '\u0130'}[s[i]]
			return replace(i, encRune(r))
		}
	}
	return s
}

// FuzzQueryKey checks the readings of a query key (queryKeyNames): a key
// names itself in any case; a key with a bracket suffix names its base,
// as Rack and PHP read it; what PHP makes of a key without a '[' holds no
// '.' or ' ', and is never longer than the key; and a deny rule for a key refuses every key that names it. The seed
// corpus lives in testdata/fuzz/FuzzQueryKey.
func FuzzQueryKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, suffix string) {
		if key == "" || !utf8.ValidString(key) || strings.ContainsAny(key, "[]. ") {
			return
		}
		if !queryKeyNames(strings.ToUpper(key), fold(key)) {
			t.Fatalf("%q does not name itself in upper case", key)
		}
		k := key + "[" + strings.ReplaceAll(suffix, "]", "") + "]"
		if !queryKeyNames(k, fold(key)) {
			t.Fatalf("%q does not name %q", k, key)
		}
		php := phpQueryKey(key + suffix)
		if len(php) > len(key+suffix) {
			t.Fatalf("PHP's reading of %q is longer: %q", key+suffix, php)
		}
		if !strings.Contains(suffix, "[") && strings.ContainsAny(php, ". ") {
			t.Fatalf("PHP's reading of %q keeps a '.' or ' ': %q", key+suffix, php)
		}
		p, err := ParseFile([]byte("a.test\ninspect a.test deny query:" + url.QueryEscape(key) + "\n"))
		if err != nil {
			return // not a key a rule can name
		}
		h := p.InspectFor("a.test")
		r := &Request{Method: "GET", Path: "/", Query: map[string][]string{k: {"1"}}, Header: http.Header{}}
		if len(h.Deny) == 1 && h.Deny[0].Query[0].Key == key {
			if j := h.Judge(r); j.Verdict != VerdictDeny {
				t.Fatalf("deny query:%s passes %q: %+v", key, k, j)
			}
		}
	})
}
