package conf

import (
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// One request, many spellings.
//
// Origins route one request target to the same handler under many
// spellings: "/v1/messages/", "//v1/messages", "/v1;x/messages",
// "/V1/MESSAGES", "/v1/messages%3Fx", "/v1/messag%65s", the method
// "post", a HEAD for a GET, a POST with X-HTTP-Method-Override: DELETE.
// What doorman does with each, per ambiguity:
//
//   - Refused outright, whatever the rules (TargetError, and
//     Judgement.Reason for a Request that carries one): a fragment or a
//     space or control character in the target, malformed
//     percent-encoding, and in the path once percent-decoded (once, twice,
//     and after NFKC normalization) a dot segment ("..", ".", "..;x",
//     ".. "), a backslash, a control character or bytes that are not
//     UTF-8 (overlong forms of '/' and '.'); a path percent-encoded three
//     times or more. Nothing a client writes needs them, and origins
//     resolve them in ways a proxy cannot predict.
//   - Normalized and forwarded in that form (ParseTarget, RFC 3986
//     6.2.2.1 and 6.2.2.2): hexadecimal digits of a percent-encoding in
//     upper case, unreserved characters decoded ("%76" is "v"), and every
//     byte a path cannot hold raw encoded. The origin receives what was
//     judged.
//   - Matched by deny rules under every spelling (loose matching): the
//     path as decoded once, decoded again and NFKC-normalized (in either
//     order, since NFKC turns '％' into '%'), and each of those also with
//     everything after an encoded '?' or '#' cut, path parameters (";...") dropped from every segment, trailing
//     dots and spaces dropped from every segment and repeated slashes
//     merged; each with its trailing slash dropped or added; compared to
//     the rule with Unicode case folded. The method in any case, HEAD as
//     GET, and the methods an override names (X-HTTP-Method-Override,
//     X-HTTP-Method, X-Method-Override, the query's _method). Query keys
//     in any case, header names with '_' for '-', JSON keys in any case.
//   - Matched by allow rules only in the canonical spelling (strict
//     matching): a request whose path holds an encoded slash, a
//     percent-encoded '%', repeated slashes, a path parameter, an encoded
//     '?' or '#', a segment that ends in a dot or a space, or characters
//     NFKC changes matches no allow rule with a path; one whose method is
//     not in upper case or is overridden, no allow rule with a method; so
//     on a host whose default is deny it is refused (and the judgement's
//     reason says why). A rule without a path (or method) condition has
//     no path (or method) to be misread, and matches whatever the
//     spelling of it. Allow rules match the path's case exactly, every
//     value of a query key or header (whatever the case or the '_' of its
//     name), and a JSON key only where no other key of its object differs
//     from it in case alone.

// maxDecodings is how many times a path may decode to something new
// before it is refused: once is the rule, twice is what an origin that
// decodes once too often sees, a third time is what no client sends.
const maxDecodings = 2

// TargetError is a request target that no rule can be trusted to judge:
// origins read it in ways a proxy cannot predict. Reason says which
// ambiguity.
type TargetError struct {
	Reason string
}

func (e *TargetError) Error() string { return "ambiguous request target: " + e.Reason }

// Target is the path and query of a request target as doorman judges and
// forwards it.
type Target struct {
	// EscapedPath is the path as forwarded: the client's spelling with
	// its percent-encoding normalized (RFC 3986 6.2.2.1 and 6.2.2.2):
	// hexadecimal digits in upper case, unreserved characters decoded,
	// every byte a path cannot hold raw encoded. net/url's EscapedPath
	// returns it as it is for a URL whose Path is Path and RawPath is
	// EscapedPath.
	EscapedPath string
	// Path is EscapedPath percent-decoded: what rules match.
	Path string
	// RawQuery is the query as sent, without the '?'.
	RawQuery string
}

// ParseTarget reads an origin-form request target ("/path?query", as an
// HTTP/1.1 request line or an HTTP/2 :path carries it). It refuses, with
// a *TargetError naming the ambiguity, what no rule can be trusted to
// judge (see "One request, many spellings" above).
func ParseTarget(target string) (Target, error) {
	if !strings.HasPrefix(target, "/") {
		return Target{}, &TargetError{Reason: "a target that is not a path"}
	}
	for i := 0; i < len(target); i++ {
		switch c := target[i]; {
		case c == '#':
			return Target{}, &TargetError{Reason: "a fragment (#) in the target"}
		case c <= ' ' || c == 0x7f:
			return Target{}, &TargetError{Reason: "a space or control character in the target"}
		}
	}
	rawPath, rawQuery, _ := strings.Cut(target, "?")
	esc, ok := normalizeEscapes(rawPath)
	if !ok {
		return Target{}, &TargetError{Reason: "malformed percent-encoding in the path"}
	}
	t := Target{EscapedPath: esc, Path: unescapeAll(esc), RawQuery: rawQuery}
	if _, why := pathForms(t.Path); why != "" {
		return Target{}, &TargetError{Reason: why}
	}
	return t, nil
}

// NormalizePath is the loosest spelling of a percent-decoded path that
// deny rules match (compared with the rule's path case-folded):
// NFKC-normalized and decoded again while that changes anything, cut at
// an encoded '?' or '#', path parameters and trailing dots and spaces of
// segments dropped, repeated slashes merged, case folded. Two paths with
// the same NormalizePath are one resource to some origin. A path refused
// outright (see ParseTarget) normalizes all the same.
func NormalizePath(path string) string {
	p := path
	for i := 0; i < 8; i++ { // bounded: the path is refused past maxDecodings anyway
		next := unescapeLenient(norm.NFKC.String(strings.ToValidUTF8(p, "\uFFFD")))
		if next == p {
			break
		}
		p = next
	}
	p = norm.NFKC.String(strings.ToValidUTF8(p, "\uFFFD"))
	p, _ = structural(p)
	return fold(p)
}

// unreserved reports RFC 3986's unreserved characters, whose
// percent-encoding is equivalent to the character itself.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// pathRaw reports the bytes a path holds as they are in the form
// forwarded: unreserved, sub-delims, ':', '@', '/', and '[' and ']'
// (which net/url leaves alone, as browsers do).
func pathRaw(c byte) bool {
	return unreserved(c) || strings.IndexByte("!$&'()*+,;=:@/[]", c) >= 0
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

const upperHex = "0123456789ABCDEF"

// normalizeEscapes normalizes a path's percent-encoding (RFC 3986
// 6.2.2.1, 6.2.2.2): triplets in upper case, unreserved characters
// decoded, every other byte a path cannot hold raw encoded. false: a '%'
// not followed by two hexadecimal digits.
func normalizeEscapes(raw string) (string, bool) {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '%':
			if i+2 >= len(raw) {
				return "", false
			}
			hi, ok1 := unhex(raw[i+1])
			lo, ok2 := unhex(raw[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			if d := hi<<4 | lo; unreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex[hi])
				b.WriteByte(upperHex[lo])
			}
			i += 2
		case pathRaw(c):
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
	}
	return b.String(), true
}

// unescapeAll decodes every triplet of a well-formed escaped path.
func unescapeAll(esc string) string { return unescapeLenient(esc) }

// unescapeLenient decodes every "%XX" triplet of s and leaves any other
// '%' as it is: what an origin that decodes a decoded path again sees.
func unescapeLenient(s string) string {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 2
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// pathForm is one reading of a decoded path: decoded again or
// NFKC-normalized, as some origin reads it.
type pathForm struct {
	s       string
	how     []string // how it was read from the path ("decoded twice", "NFKC-normalized")
	decodes int      // how many times it was decoded, the path's own decoding included
}

// pathForms returns the readings of a decoded path: the path itself,
// and what decoding it again and normalizing it to NFKC (in any order:
// NFKC turns '％' into '%') give; or why it is refused outright: one of
// them is (see refusal), or one decodes a third time.
func pathForms(path string) ([]pathForm, string) {
	forms := []pathForm{{s: path, decodes: 1}}
	seen := func(s string) bool {
		return slices.ContainsFunc(forms, func(f pathForm) bool { return f.s == s })
	}
	for i := 0; i < len(forms); i++ {
		f := forms[i]
		if why := refusal(f.s); why != "" {
			if len(f.how) > 0 {
				why += " (once " + strings.Join(f.how, ", ") + ")"
			}
			return nil, why
		}
		next := func(s, how string, decodes int) {
			if !seen(s) {
				forms = append(forms, pathForm{s: s, how: append(append([]string(nil), f.how...), how), decodes: decodes})
			}
		}
		if !norm.NFKC.IsNormalString(f.s) {
			next(norm.NFKC.String(f.s), "NFKC-normalized", f.decodes)
		}
		if d := unescapeLenient(f.s); d != f.s && !seen(d) {
			if f.decodes == maxDecodings {
				return nil, "a path percent-encoded three times or more"
			}
			next(d, "decoded twice", f.decodes+1)
		}
	}
	return forms, ""
}

// refusal says why a decoded path is refused whatever the rules, or "".
func refusal(p string) string {
	if !utf8.ValidString(p) {
		return "a path that is not UTF-8 once decoded (an overlong or broken sequence)"
	}
	for _, r := range p {
		switch {
		case r == '\\':
			return "a backslash in the path"
		case unicode.IsControl(r):
			return "a control character in the path"
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if dotSegment(seg) {
			return "a dot segment in the path"
		}
	}
	return ""
}

// dotSegment reports a segment that some origin resolves as "." or "..":
// dots and whitespace only, once its parameters (";...") are dropped.
func dotSegment(seg string) bool {
	seg, _, _ = strings.Cut(seg, ";")
	return strings.Contains(seg, ".") && strings.TrimFunc(seg, func(r rune) bool { return r == '.' || unicode.IsSpace(r) }) == ""
}

// segmentEnd is what origins that trim a segment's end (Windows, IIS)
// drop: dots and whitespace.
func segmentEnd(r rune) bool { return r == '.' || unicode.IsSpace(r) }

// structural applies the spellings origins fold together that change a
// path's structure, to a fixpoint: cut at an encoded '?' or '#', path
// parameters dropped, trailing dots and spaces of segments dropped,
// repeated slashes merged. It returns the result and what changed.
func structural(p string) (string, []string) {
	var how []string
	note := func(s string) {
		for _, h := range how {
			if h == s {
				return
			}
		}
		how = append(how, s)
	}
	for {
		before := p
		if i := strings.IndexAny(p, "?#"); i >= 0 {
			p = p[:i]
			note("cut at an encoded ? or #")
		}
		if strings.IndexByte(p, ';') >= 0 {
			segs := strings.Split(p, "/")
			for i, s := range segs {
				segs[i], _, _ = strings.Cut(s, ";")
			}
			p = strings.Join(segs, "/")
			note("path parameters (;) dropped")
		}
		if trimmed := trimSegmentEnds(p); trimmed != p {
			p = trimmed
			note("trailing dots or spaces of a segment dropped")
		}
		if strings.Contains(p, "//") {
			for strings.Contains(p, "//") {
				p = strings.ReplaceAll(p, "//", "/")
			}
			note("repeated slashes merged")
		}
		if p == before {
			return p, how
		}
	}
}

// trimSegmentEnds drops the dots and whitespace that end each segment.
func trimSegmentEnds(p string) string {
	if !strings.ContainsFunc(p, segmentEnd) {
		return p
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = strings.TrimRightFunc(s, segmentEnd)
	}
	return strings.Join(segs, "/")
}

// fold maps s to a case-insensitive form: each character to the lower
// case of its upper case, so that the Kelvin sign is 'k', 'ſ' is 's' and
// 'ı' and 'İ' are 'i', as origins that compare in either case see them.
func fold(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.Map(func(r rune) rune { return unicode.ToLower(unicode.ToUpper(r)) }, s)
		}
	}
	return strings.ToLower(s)
}

// oddPath says why a path (decoded once, with its readings) is not in
// its canonical spelling, or "". escaped is the path as forwarded ("" if
// not known).
func oddPath(escaped string, forms []pathForm) string {
	p := forms[0].s
	switch {
	case unescapeLenient(p) != p:
		return "a percent-encoded % (the path decodes twice)"
	case strings.Contains(strings.ToUpper(escaped), "%2F"):
		return "an encoded slash (%2F)"
	case strings.Contains(p, "//"):
		return "repeated slashes"
	case strings.IndexByte(p, ';') >= 0:
		return "a path parameter (;)"
	case strings.ContainsAny(p, "?#"):
		return "an encoded ? or #"
	case trimSegmentEnds(p) != p:
		return "a segment that ends in a dot or a space"
	case len(forms) > 1:
		return "characters that NFKC normalization changes"
	}
	return ""
}

// spelled is one spelling of a request's path or method, and how it
// differs from what the client sent (nothing if it does not).
type spelled struct {
	s, folded string
	how       []string
	// slashed are s and folded with a slash added, made the first
	// time a pattern is tried on them (see matchPathSpellings).
	slashed *[2]string
}

// withSlash returns s and folded with a slash added, made once.
func (p *spelled) withSlash() (s, folded string) {
	if p.slashed == nil {
		p.slashed = &[2]string{p.s + "/", p.folded + "/"}
	}
	return p.slashed[0], p.slashed[1]
}

// spellings is what judging a request needs of its spellings, worked out
// once per request.
type spellings struct {
	// refuse says why the request is refused whatever the rules.
	refuse string
	// oddPath and oddMethod say why the request's path and method are
	// not in their canonical spelling, which allow rules with a path or
	// method condition need; "" if they are.
	oddPath, oddMethod string
	// paths and methods are the spellings deny rules match: paths
	// without toggling the trailing slash, which matchPathLoose does.
	paths     []spelled
	methods   []spelled
	methodBuf [3]spelled
}

// methodOverrides are the headers with which frameworks let a request
// name another method (compared by SameHeaderName).
var methodOverrides = []string{"x-http-method-override", "x-http-method", "x-method-override"}

// SameHeaderName reports whether two header names are one to origins
// that ignore case and read '_' as '-' (CGI, WSGI, Rack, PHP), without
// allocating: the relay calls it for every header of every request.
func SameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if headerByte(a[i]) != headerByte(b[i]) {
			return false
		}
	}
	return true
}

// HasHeaderPrefix is strings.HasPrefix for header names compared as
// SameHeaderName compares them.
func HasHeaderPrefix(name, prefix string) bool {
	return len(name) >= len(prefix) && SameHeaderName(name[:len(prefix)], prefix)
}

func headerByte(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}

// spell works out a request's spellings.
func (r *Request) spell() *spellings {
	sp := &r.spellings
	if r.spelled {
		return sp
	}
	r.spelled = true
	if r.Path != "" {
		forms, why := pathForms(r.Path)
		if why != "" {
			sp.refuse = why
			return sp
		}
		sp.oddPath = oddPath(r.EscapedPath, forms)
		sp.paths = pathSpellings(forms)
	}
	// Methods: as sent, upper case, HEAD as GET, overrides.
	sp.methods = sp.methodBuf[:0]
	addMethod := func(m, how string) {
		if m == "" || slices.ContainsFunc(sp.methods, func(s spelled) bool { return s.s == m }) {
			return
		}
		sm := spelled{s: m}
		if how != "" {
			sm.how = []string{how}
		}
		sp.methods = append(sp.methods, sm)
	}
	addMethod(r.Method, "")
	up := strings.ToUpper(r.Method)
	addMethod(up, "the method in upper case")
	if up == http.MethodHead {
		addMethod(http.MethodGet, "HEAD, which origins answer as GET")
	}
	if up != r.Method {
		sp.oddMethod = "a method not in upper case"
	}
	override := func(name, value string) {
		for v := range strings.SplitSeq(value, ",") {
			v = strings.ToUpper(strings.TrimSpace(v))
			if v == "" {
				continue
			}
			addMethod(v, "the method "+name+" names")
			if sp.oddMethod == "" && v != r.Method {
				sp.oddMethod = "a method override (" + name + ": " + v + ")"
			}
		}
	}
	for k, vs := range r.Header {
		for _, o := range methodOverrides {
			if SameHeaderName(k, o) {
				for _, v := range vs {
					override(k, v)
				}
			}
		}
	}
	for k, vs := range r.Query {
		if fold(k) == "_method" {
			for _, v := range vs {
				override("the query's "+k, v)
			}
		}
	}
	return sp
}

// pathSpellings lists the spellings of a path that deny rules match, the
// one sent first, each once: every reading of it, as it is and with
// structural applied (matchPathLoose adds the trailing slash's).
func pathSpellings(forms []pathForm) []spelled {
	out := make([]spelled, 0, 2*len(forms))
	add := func(p string, how []string) {
		if p == "" || slices.ContainsFunc(out, func(s spelled) bool { return s.s == p }) {
			return
		}
		out = append(out, spelled{s: p, folded: fold(p), how: how})
	}
	for _, f := range forms {
		add(f.s, f.how)
		if s, sh := structural(f.s); s != f.s {
			add(s, append(slices.Clone(f.how), sh...))
		}
	}
	return out
}
