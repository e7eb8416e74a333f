package conf

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// DefaultMaxBody is how much of a request body the proxy reads to judge a
// body rule when a host sets no maxBody: 1 MiB.
const DefaultMaxBody = 1 << 20

// maxMaxBody bounds a host's maxBody: the proxy holds that much per
// request it judges, and a sandbox has many.
const maxMaxBody = 64 << 20

// The verdicts of a request rule and of a host's default.
const (
	VerdictAllow = "allow"
	VerdictDeny  = "deny"
)

// InspectHost is the request-level policy of one host: the proxy
// terminates TLS for it (see package inspect), judges every request by
// Deny, then Allow, then Default, and puts credentials in.
//
// Rules do not admit a host: its name must still be admitted by an entry
// (or the mode be open). They refine what may be asked of a host that is.
type InspectHost struct {
	// Host is a canonical name ("api.example.com") or wildcard
	// ("*.example.com"), as in Entry; never an address, never a port.
	Host string
	// Deny rules are tried first: a request any of them matches is
	// refused.
	Deny []Rule
	// Allow rules are tried next: a request one of them matches passes.
	Allow []Rule
	// Default decides a request no rule matched: VerdictAllow or
	// VerdictDeny; "" means deny if there are allow rules and allow
	// otherwise (see EffectiveDefault).
	Default string
	// Inject puts credentials into requests that carry a placeholder.
	Inject []Inject
	// MaxBody bounds the body read for a body rule, in bytes (0:
	// DefaultMaxBody). A larger body on a route whose rules need it is
	// refused with 413.
	MaxBody int64
}

// EffectiveDefault is the verdict of a request that no rule matches.
func (h *InspectHost) EffectiveDefault() string {
	switch {
	case h.Default != "":
		return h.Default
	case len(h.Allow) > 0:
		return VerdictDeny
	}
	return VerdictAllow
}

// BodyLimit is MaxBody or DefaultMaxBody.
func (h *InspectHost) BodyLimit() int64 {
	if h.MaxBody > 0 {
		return h.MaxBody
	}
	return DefaultMaxBody
}

// Rule matches requests: every condition it has must hold (a rule with
// none matches every request). Within a condition list, all must hold.
type Rule struct {
	// Methods: the request's method is one of these (upper case); empty
	// means any.
	Methods []string
	// Path: the request's path (percent-decoded) equals it, or, if it
	// holds '*', matches it as a glob where '*' stands for any run of
	// characters, '/' included ("/myorg/*" is a prefix). "" means any.
	Path string
	// Query: for each, the query has the key with a value the glob
	// matches ("*": the key is there, with any value).
	Query []Cond
	// Header: for each, the request has the header (canonical name)
	// with a value the glob matches.
	Header []Cond
	// JSON: for each, the request body is JSON and the path finds a
	// value the glob matches (see JSONPath).
	JSON []JSONCond
}

// Cond is one key and the glob its value must match.
type Cond struct {
	Key  string
	Glob string
}

// JSONCond is one JSON path and the glob a value it finds must match.
type JSONCond struct {
	Path JSONPath
	Glob string
}

// Inject is one credential the proxy puts into requests to its host.
//
// A request whose Header value is exactly the placeholder, or is a scheme
// word, one space and exactly the placeholder ("Bearer dm-placeholder"),
// gets the secret in the placeholder's place, the scheme kept. Any other
// value, and the placeholder anywhere else (another header, the path, the
// body), is left as it is. The placeholder itself is kept only as its
// SHA-256, so that it appears in no policy file, state file or log.
type Inject struct {
	// Header is the header's canonical name ("X-Api-Key").
	Header string
	// PlaceholderSHA256 is the SHA-256 of the placeholder.
	PlaceholderSHA256 [32]byte
	// SecretFile holds the real credential on the host (0600
	// recommended); one trailing newline is dropped.
	SecretFile string
}

// PlaceholderHash returns the SHA-256 of a placeholder, as Inject keeps it.
func PlaceholderHash(placeholder string) [32]byte { return sha256.Sum256([]byte(placeholder)) }

// Matches reports whether value is the placeholder, and if so the part
// of it to keep before the secret ("" or "Bearer ").
func (in Inject) Matches(value string) (prefix string, ok bool) {
	if sha256.Sum256([]byte(value)) == in.PlaceholderSHA256 {
		return "", true
	}
	scheme, token, found := strings.Cut(value, " ")
	if found && scheme != "" && isToken(scheme) && sha256.Sum256([]byte(token)) == in.PlaceholderSHA256 {
		return scheme + " ", true
	}
	return "", false
}

// InspectError is a request rule that does not parse: where it is and why.
type InspectError struct {
	Host   string
	Where  string // "deny[0]", "line 7"
	Reason string
}

func (e *InspectError) Error() string {
	if e.Where == "" {
		return fmt.Sprintf("inspect %s: %s", e.Host, e.Reason)
	}
	return fmt.Sprintf("inspect %s: %s: %s", e.Host, e.Where, e.Reason)
}

// normalizeInspectHost checks an inspected host: a name or a wildcard,
// no address, no port.
func normalizeInspectHost(host string) (string, error) {
	e, err := ParseEntry(host)
	if err != nil {
		return "", err
	}
	if e.Kind != KindName && e.Kind != KindWildcard {
		return "", fmt.Errorf("%q: only a name or *.name can be inspected (TLS names the host it is for)", host)
	}
	if !e.Ports.Any() {
		return "", fmt.Errorf("%q: an inspected host has no port (its rules hold on every port)", host)
	}
	return e.String(), nil
}

// MatchHost reports whether name (normalized) is this host or, for a
// wildcard, below it.
func (h *InspectHost) MatchHost(name string) bool {
	if rest, ok := strings.CutPrefix(h.Host, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return name == h.Host
}

// validate checks h after parsing, and puts its lists in canonical order.
func (h *InspectHost) validate() error {
	var errs []error
	bad := func(where, format string, a ...any) {
		errs = append(errs, &InspectError{Host: h.Host, Where: where, Reason: fmt.Sprintf(format, a...)})
	}
	if h.Default != "" && h.Default != VerdictAllow && h.Default != VerdictDeny {
		bad("default", "%q: want allow or deny", h.Default)
	}
	if h.MaxBody < 0 || h.MaxBody > maxMaxBody {
		bad("maxBody", "%d: want 1 to %d bytes", h.MaxBody, maxMaxBody)
	}
	for i := range h.Deny {
		if err := h.Deny[i].normalize(); err != nil {
			bad(fmt.Sprintf("deny[%d]", i), "%v", err)
		}
	}
	for i := range h.Allow {
		if err := h.Allow[i].normalize(); err != nil {
			bad(fmt.Sprintf("allow[%d]", i), "%v", err)
		}
	}
	seen := map[string]bool{}
	for i, in := range h.Inject {
		where := fmt.Sprintf("inject[%d]", i)
		if !isToken(in.Header) {
			bad(where, "header %q: not a header name", in.Header)
			continue
		}
		in.Header = textproto.CanonicalMIMEHeaderKey(in.Header)
		h.Inject[i].Header = in.Header
		if isHopHeader(in.Header) || in.Header == "Host" || in.Header == "Content-Length" {
			bad(where, "header %q cannot carry a credential", in.Header)
		}
		if seen[in.Header] {
			bad(where, "header %s injected twice", in.Header)
		}
		seen[in.Header] = true
		if in.PlaceholderSHA256 == ([32]byte{}) {
			bad(where, "no placeholder")
		}
		if in.SecretFile == "" || !strings.HasPrefix(in.SecretFile, "/") {
			bad(where, "secretFile %q: want an absolute path on the host", in.SecretFile)
		} else if strings.ContainsAny(in.SecretFile, "\n\r\x00") {
			bad(where, "secretFile: a path without newlines")
		}
	}
	return errors.Join(errs...)
}

// isHopHeader reports the headers that belong to one connection, which
// the proxy drops or rewrites.
func isHopHeader(h string) bool {
	switch h {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// isToken reports whether s is an RFC 9110 token (a method, a header
// name, an auth scheme).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// normalize checks a rule and sorts its conditions, so that equal rules
// compare and render the same.
func (r *Rule) normalize() error {
	for i, m := range r.Methods {
		if !isToken(m) || strings.ToUpper(m) != m {
			return fmt.Errorf("method %q: want an upper-case method such as GET or POST", m)
		}
		r.Methods[i] = m
	}
	slices.Sort(r.Methods)
	r.Methods = slices.Compact(r.Methods)
	if r.Path != "" {
		if !strings.HasPrefix(r.Path, "/") && r.Path != "*" {
			return fmt.Errorf("path %q: want one that starts with /", r.Path)
		}
		if err := checkGlobText("path", r.Path); err != nil {
			return err
		}
	}
	for i, q := range r.Query {
		if q.Key == "" || strings.ContainsAny(q.Key, "=&# \t") {
			return fmt.Errorf("query key %q: want a key without '=', '&', '#' or spaces", q.Key)
		}
		if err := checkGlobText("query "+q.Key, q.Glob); err != nil {
			return err
		}
		r.Query[i] = q
	}
	for i, h := range r.Header {
		if !isToken(h.Key) {
			return fmt.Errorf("header %q: not a header name", h.Key)
		}
		h.Key = textproto.CanonicalMIMEHeaderKey(h.Key)
		if err := checkGlobText("header "+h.Key, h.Glob); err != nil {
			return err
		}
		r.Header[i] = h
	}
	for _, j := range r.JSON {
		if err := checkGlobText("json "+j.Path.String(), j.Glob); err != nil {
			return err
		}
	}
	sortConds(r.Query)
	sortConds(r.Header)
	slices.SortStableFunc(r.JSON, func(a, b JSONCond) int {
		return strings.Compare(a.Path.String()+"="+a.Glob, b.Path.String()+"="+b.Glob)
	})
	r.JSON = slices.CompactFunc(r.JSON, func(a, b JSONCond) bool { return a.Path.String() == b.Path.String() && a.Glob == b.Glob })
	return nil
}

func sortConds(c []Cond) {
	slices.SortStableFunc(c, func(a, b Cond) int { return strings.Compare(a.Key+"="+a.Glob, b.Key+"="+b.Glob) })
}

// checkGlobText refuses what no request can carry (control characters)
// and an empty glob.
func checkGlobText(what, g string) error {
	if g == "" {
		return fmt.Errorf("%s: empty pattern (\"*\" matches any value)", what)
	}
	for _, c := range []byte(g) {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%s: control character %q in pattern", what, c)
		}
	}
	return nil
}

// NeedsBody reports whether judging a request of this host needs its
// body: some rule with a JSON condition matches everything else about it
// (a deny rule in any spelling of the request, an allow rule in its
// canonical one). The proxy reads the body (up to BodyLimit) only then.
func (h *InspectHost) NeedsBody(r *Request) bool {
	sp := r.spell()
	if sp.refuse != "" {
		return false
	}
	for i := range h.Deny {
		if ok, _ := h.Deny[i].matchHead(r, true); ok && len(h.Deny[i].JSON) > 0 {
			return true
		}
	}
	for i := range h.Allow {
		if ok, _ := h.Allow[i].matchHead(r, false); ok && len(h.Allow[i].JSON) > 0 {
			return true
		}
	}
	return false
}

// Request is what a rule looks at of one request.
type Request struct {
	Method string
	// Path is the percent-decoded path.
	Path string
	// EscapedPath is the path as forwarded, percent-encoded (see
	// Target); "" when not known, and then Path is taken as the client
	// spelled it.
	EscapedPath string
	Query       map[string][]string
	Header      http.Header
	// Body is the request body, read by the proxy when NeedsBody said
	// so; nil otherwise.
	Body []byte
	// doc and root are the body's JSON, indexed once one rule reads it
	// (see jsonDoc); bodyErr says why it is not JSON.
	doc     *jsonDoc
	root    jval
	bodyErr error
	// spellings caches the request's spellings (see spell), once
	// spelled is set.
	spellings spellings
	spelled   bool
}

// json returns the request body as a JSON document, checked (one value,
// valid UTF-8, nested at most maxJSONDepth deep) and indexed once; its
// objects are read, and their keys checked for duplicates, only where a
// rule's path goes.
func (r *Request) json() (*jsonDoc, jval, error) {
	if r.doc == nil && r.bodyErr == nil {
		r.doc, r.root, r.bodyErr = newJSONDoc(r.Body)
	}
	return r.doc, r.root, r.bodyErr
}

// Judgement is what a host's rules say about one request.
type Judgement struct {
	Verdict string // VerdictAllow or VerdictDeny
	// Rule names what decided: "deny POST /v1/messages json:...", "allow
	// GET", or "default deny"; "" for a request refused whatever the
	// rules.
	Rule string
	// Reason adds why, when the rule alone does not say it: a body that
	// is not JSON, the spelling of the request a deny rule matched
	// ("repeated slashes merged"), why a request is refused whatever
	// the rules, or why a request that no allow rule matched is not in
	// the canonical spelling allow rules need.
	Reason string
}

// Judge decides one request: the first deny rule that matches any
// spelling of it refuses it, else the first allow rule that matches its
// canonical spelling passes it, else the default. A request whose path
// no rule can be trusted to judge (see ParseTarget) is refused first. A
// deny rule whose JSON condition cannot be evaluated (the body is not
// JSON, or repeats a key in an object on the rule's path) refuses the
// request too: what doorman cannot read it does not pass on a route it
// was told to read. An allow rule
// that cannot be evaluated does not match; nor does one with a path or
// method condition, of a request whose path or method is not in its
// canonical spelling.
func (h *InspectHost) Judge(r *Request) Judgement {
	sp := r.spell()
	if sp.refuse != "" {
		return Judgement{Verdict: VerdictDeny, Reason: "ambiguous request: " + sp.refuse}
	}
	for i := range h.Deny {
		ok, how, err := h.Deny[i].match(r, true)
		if err != nil {
			return Judgement{Verdict: VerdictDeny, Rule: "deny " + h.Deny[i].String(), Reason: "the body cannot be read as JSON: " + err.Error()}
		}
		if ok {
			j := Judgement{Verdict: VerdictDeny, Rule: "deny " + h.Deny[i].String()}
			if how != "" {
				j.Reason = "matched another spelling of the request: " + how
			}
			return j
		}
	}
	for i := range h.Allow {
		if ok, _, _ := h.Allow[i].match(r, false); ok {
			return Judgement{Verdict: VerdictAllow, Rule: "allow " + h.Allow[i].String()}
		}
	}
	d := h.EffectiveDefault()
	j := Judgement{Verdict: d, Rule: "default " + d}
	if odd := cmp.Or(sp.oddPath, sp.oddMethod); d == VerdictDeny && odd != "" {
		j.Reason = "not the canonical spelling allow rules match: " + odd
	}
	return j
}

// matchHead reports whether everything but the body conditions holds:
// loose, in any spelling of the request (deny rules), else in its
// spelling as sent (allow rules). how says which spelling matched, when
// it is not the one sent.
func (r *Rule) matchHead(req *Request, loose bool) (bool, string) {
	var hows []string
	sp := req.spell()
	if len(r.Methods) > 0 {
		if !loose {
			if sp.oddMethod != "" || !slices.Contains(r.Methods, req.Method) {
				return false, ""
			}
		} else {
			how, ok := matchMethodSpellings(sp, func(m string) bool { return slices.Contains(r.Methods, m) })
			if !ok {
				return false, ""
			}
			hows = append(hows, how...)
		}
	}
	if r.Path != "" && r.Path != "*" {
		if !loose {
			if sp.oddPath != "" || !matchPath(r.Path, req.Path) {
				return false, ""
			}
		} else {
			ok, how := r.matchPathLoose(req)
			if !ok {
				return false, ""
			}
			if how != "" {
				hows = append(hows, how)
			}
		}
	}
	for _, q := range r.Query {
		want := fold(q.Key)
		if !matchValues(q.Glob, loose, func(yield func(k string, vs []string) bool) {
			for k, vs := range req.Query {
				if queryKeyNames(k, want) && !yield(k, vs) {
					return
				}
			}
		}, q.Key, false) {
			return false, ""
		}
	}
	for _, h := range r.Header {
		if !matchValues(h.Glob, loose, func(yield func(k string, vs []string) bool) {
			for k, vs := range req.Header {
				if SameHeaderName(k, h.Key) && !yield(k, vs) {
					return
				}
			}
		}, h.Key, true) {
			return false, ""
		}
	}
	return true, strings.Join(hows, ", ")
}

// matchPathLoose reports whether the rule's path matches a spelling of
// the request's path (see matchPathSpellings), and how that spelling
// differs from the one sent.
func (r *Rule) matchPathLoose(req *Request) (bool, string) {
	s, how, ok := matchPathSpellings(fold(r.Path), req.spell().paths, matchPath)
	if !ok {
		return false, ""
	}
	if !matchPath(r.Path, s) {
		how = append(slices.Clone(how), "case folded")
	}
	return true, strings.Join(how, ", ")
}

// matchPathSpellings reports whether pattern (a path or glob, case
// folded) matches a spelling of a request's path (see spell: every
// reading of it, each as it is and with its trailing slash dropped or
// added) compared case-folded: what a deny rule's path, and a rule set's,
// holds for, by match (matchPath for a deny rule). It returns the
// spelling that matched (in its case, with the trailing slash as tried)
// and how it differs from the path sent, case aside.
func matchPathSpellings(pattern string, paths []spelled, match func(pattern, path string) bool) (string, []string, bool) {
	// Only a pattern that ends in '/' or '*' can match a path with a
	// slash added: the spelling is built only then.
	addSlash := strings.HasSuffix(pattern, "/") || strings.HasSuffix(pattern, "*")
	for i := range paths {
		p := &paths[i]
		s, folded, note := p.s, p.folded, ""
		ok := match(pattern, folded)
		if !ok && len(s) > 1 && strings.HasSuffix(s, "/") {
			s, folded, note = s[:len(s)-1], folded[:len(folded)-1], "trailing slash dropped"
			ok = match(pattern, folded)
		} else if !ok && addSlash && !strings.HasSuffix(s, "/") {
			s, folded = p.withSlash()
			note = "trailing slash added"
			ok = match(pattern, folded)
		}
		if !ok {
			continue
		}
		how := p.how
		if note != "" {
			how = append(slices.Clone(how), note)
		}
		return s, how, true
	}
	return "", nil, false
}

// matchMethodSpellings reports whether want holds for a spelling of the
// request's method (as sent, in upper case, GET for HEAD, the methods
// overrides name), and how the one that did differs from the method
// sent: what a deny rule's method, and a rule set's, holds for.
func matchMethodSpellings(sp *spellings, want func(string) bool) ([]string, bool) {
	for _, m := range sp.methods {
		if want(m.s) {
			return m.how, true
		}
	}
	return nil, false
}

// matchValues matches a query or header condition against the values of
// the keys that name it: loose, one value of any such key matching is
// enough; strict, the key must be there as written and every value of
// every key that names it must match (an origin may read any of them).
//
// A header's value is also a list to an origin that reads the field as
// one (Anthropic-Beta, Accept, ...: RFC 9110 5.3, elements separated by
// commas): loose, one element matching is enough too.
func matchValues(glob string, loose bool, keys func(yield func(k string, vs []string) bool), exact string, list bool) bool {
	some, all, present := false, true, false
	for k, vs := range keys {
		if k == exact && len(vs) > 0 {
			present = true
		}
		for _, v := range vs {
			if Glob(glob, v) || (loose && list && someElement(glob, v)) {
				some = true
			} else {
				all = false
			}
		}
	}
	if loose {
		return some
	}
	return present && all
}

// someElement reports whether glob matches an element of v read as a
// comma-separated list, each trimmed of spaces and tabs.
func someElement(glob, v string) bool {
	if !strings.Contains(v, ",") {
		return false
	}
	for e := range strings.SplitSeq(v, ",") {
		if Glob(glob, strings.Trim(e, " \t")) {
			return true
		}
	}
	return false
}

// queryKeyNames reports whether an origin may read the query key k as
// the key whose case folding is want: k itself, case folded, or k as
// Rack (Rails, Sinatra) reads a key with brackets ("a[]", "a[x]" and
// "[a]" are a), or as PHP reads it ("a[x]" is a; '.', ' ' and a '[' not
// closed are '_').
func queryKeyNames(k, want string) bool {
	if fold(k) == want {
		return true
	}
	if !strings.ContainsAny(k, "[]. ") {
		return false
	}
	// Rack: the first run of characters that are not brackets, after
	// any leading ones.
	rack := strings.TrimLeft(k, "[]")
	if i := strings.IndexAny(rack, "[]"); i >= 0 {
		rack = rack[:i]
	}
	return fold(rack) == want || fold(phpQueryKey(k)) == want
}

// phpQueryKey is the name PHP gives a query key (php_register_variable):
// leading spaces dropped, ' ' and '.' read as '_' up to the first '[',
// which ends the name if a ']' follows it, and is read as '_' (the rest
// kept as it is) if none does.
func phpQueryKey(k string) string {
	k = strings.TrimLeft(k, " ")
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case ' ', '.':
			b.WriteByte('_')
		case '[':
			if strings.IndexByte(k[i+1:], ']') >= 0 {
				return b.String()
			}
			b.WriteByte('_')
			b.WriteString(k[i+1:])
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// match reports whether r matches req (loose: any spelling of it), and
// how the spelling that matched differs from the one sent; an error
// means a body condition could not be evaluated.
func (r *Rule) match(req *Request, loose bool) (bool, string, error) {
	ok, how := r.matchHead(req, loose)
	if !ok {
		return false, "", nil
	}
	if len(r.JSON) == 0 {
		return true, how, nil
	}
	d, root, err := req.json()
	if err != nil {
		return false, "", err
	}
	for _, j := range r.JSON {
		ok, err := j.Path.matchDoc(d, root, j.Glob, loose)
		if err != nil {
			return false, "", err
		}
		if !ok {
			return false, "", nil
		}
	}
	return true, how, nil
}

func matchPath(pattern, path string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == path
	}
	return Glob(pattern, path)
}

// Glob reports whether s matches pattern, in which '*' stands for any run
// of characters (none included) and every other character for itself.
func Glob(pattern, s string) bool {
	// The classic linear-time wildcard match: on a mismatch, let the last
	// star swallow one more character.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// InspectFor returns the request-level policy for name (normalized): the
// exact host's, else the longest wildcard's that covers it; nil if the
// name is not inspected.
func (p *Policy) InspectFor(name string) *InspectHost {
	if p == nil || name == "" {
		return nil
	}
	var best *InspectHost
	for i := range p.Inspect {
		h := &p.Inspect[i]
		if h.Host == name {
			return h
		}
		if h.MatchHost(name) && (best == nil || len(h.Host) > len(best.Host)) {
			best = h
		}
	}
	if best == nil && len(p.RuleSets) > 0 {
		// A host only a rule set covers: inspected, no rules of its own.
		best = p.ruleSetHostFor(name)
	}
	return best
}

// InspectedHosts returns the inspected hosts, in order: the names a
// network's CA may vouch for.
func (p *Policy) InspectedHosts() []string {
	if p == nil {
		return nil
	}
	out := make([]string, len(p.Inspect))
	for i, h := range p.Inspect {
		out[i] = h.Host
	}
	for _, h := range p.ruleSetHosts() {
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// SecretFiles returns every secret file the policy's injections read.
func (p *Policy) SecretFiles() []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, h := range p.Inspect {
		for _, in := range h.Inject {
			out = append(out, in.SecretFile)
		}
	}
	return out
}

// setInspect validates hosts, refuses a host given twice, and returns
// them in canonical order (by host).
func setInspect(hosts []InspectHost) ([]InspectHost, error) {
	var errs []error
	seen := map[string]bool{}
	for i := range hosts {
		if seen[hosts[i].Host] {
			errs = append(errs, &InspectError{Host: hosts[i].Host, Reason: "given twice"})
			continue
		}
		seen[hosts[i].Host] = true
		if err := hosts[i].validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortStableFunc(hosts, func(a, b InspectHost) int { return strings.Compare(a.Host, b.Host) })
	return hosts, nil
}

// equalInspect compares two hosts' rules by their canonical lines.
func equalInspect(a, b []InspectHost) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.Equal(a[i].Lines(), b[i].Lines()) {
			return false
		}
	}
	return true
}

// placeholderText renders a placeholder hash as the file form writes it.
func placeholderText(h [32]byte) string { return "sha256:" + hex.EncodeToString(h[:]) }

// parsePlaceholder reads a placeholder as written in either form:
// "sha256:<64 hex digits>" (what doorman writes) or the placeholder itself.
func parsePlaceholder(s string) ([32]byte, error) {
	var h [32]byte
	if rest, ok := strings.CutPrefix(s, "sha256:"); ok {
		b, err := hex.DecodeString(rest)
		if err != nil || len(b) != 32 {
			return h, fmt.Errorf("placeholder %q: want sha256: and 64 hex digits", s)
		}
		copy(h[:], b)
		return h, nil
	}
	if s == "" {
		return h, errors.New("empty placeholder")
	}
	if strings.ContainsAny(s, " \t\r\n\x00") {
		return h, fmt.Errorf("placeholder %q: want one without spaces or control characters", s)
	}
	return PlaceholderHash(s), nil
}
