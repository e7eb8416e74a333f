package conf

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/textproto"
	"path"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Rule sets are named lists of request rules shipped with doorman, in
// conf/rulesets/NAME.rules, and versioned with it: a policy names one
// ("ruleset closed-book") instead of writing every provider's tool
// names, request shapes and endpoints itself. The file form (see
// docs/rulesets.md, which documents every line of every set):
//
//	ruleset NAME                       the set's name (the file's first statement)
//	version N                          its version: a policy's log lines say NAME@N
//	summary TEXT...                    one line on what it stops
//	provider NAME HOST...              a provider: the rules until the next provider line hold for these hosts
//	front NAME...                      names on the provider's shared front ends: inspected, so that every request's
//	                                   Host is checked against the session's name, but no rule is applied
//	tool ID [METHOD] PATH [in:ANCHOR] COND...    a provider-side tool in a request: refused (deny) or removed (strip)
//	refuse ID [METHOD] PATH [in:ANCHOR] COND...  a request the proxy cannot judge or rewrite: refused whatever the action
//	with ID [METHOD] PATH [in:ANCHOR] COND...    what only tool ID uses: strip removes it with the tool, else it is ignored
//	evidence ID COND...                a response object that shows a provider-side tool ran (the tripwire)
//	inventory in:ANCHOR KEY            where requests declare tools: the probe report lists every value of KEY there
//
// METHOD and PATH are a request rule's (see ParseRuleWords). ANCHOR is a
// path into the request's JSON body whose values are the candidates the
// conditions are tried on, all on the same candidate (the document
// itself without in:). A condition is KEYPATH (there, and not null),
// KEYPATH=GLOB (a value there matches GLOB), or either after '!' (not
// so). Keys are compared loosely: case folded, '_' and '-' ignored, so
// that google_search also finds googleSearch (the Gemini API reads both)
// and TOOLS what an origin that folds case would read as tools; globs
// are matched case-insensitively. A path is keys joined by '.', each
// optionally followed by "[]" (every element of an array); "@" alone is
// the candidate itself.

//go:embed rulesets/*.rules
var ruleSetFiles embed.FS

// The actions a policy may take with a rule set.
const (
	// SetDeny refuses a request that asks for a tool of the set (403).
	SetDeny = "deny"
	// SetStrip removes the tool from the request and forwards the rest;
	// a request that cannot be rewritten safely is refused.
	SetStrip = "strip"
	// SetProbe refuses and removes nothing: it records which tools each
	// request asked for and which responses show tool use.
	SetProbe = "probe"
)

// RuleSet is one named set, as compiled from its file.
type RuleSet struct {
	Name    string
	Version string
	Summary string
	// Providers are the set's providers, in file order.
	Providers []*SetProvider
	// Evidence are the evidence lines before any provider line: they
	// hold on every provider's hosts.
	Evidence []SetEvidence
	// hosts are the names every provider inspects (hosts and fronts):
	// InspectFor returns one of them for a name they cover.
	hosts []InspectHost
	// Ref and each action, rendered once for the log.
	refDeny, refStrip, refProbe string
}

// SetProvider is one provider of a set: the hosts its rules hold for.
type SetProvider struct {
	Name string
	// Hosts are names or wildcards (as in Entry) whose requests the
	// rules judge; Fronts are names only inspected (the session check).
	Hosts, Fronts []string
	Rules         []SetRule
	Evidence      []SetEvidence
	Inventory     []SetInventory
	// matcher holds the set's evidence lines and the provider's,
	// compiled once.
	matcher *EvidenceMatcher
	// plan is the rules compiled for judging, once (nil for a provider
	// not made by ParseRuleSet: compiled when judging).
	plan *rulePlan
}

// rulePlan is a provider's rules compiled for judging: the trie of the
// anchors of those that read the body, and their heads, each distinct
// one once (closed-book's 16 Anthropic rules have 4), so that a request
// is matched against each once.
type rulePlan struct {
	anchors *anchorTrie
	// heads are the distinct heads, headOf the index in heads of each
	// rule's; bodyHeads are the heads of the rules that read the body,
	// each once, in rule order.
	heads     []*setHead
	headOf    []int32
	bodyHeads []int32
}

// compilePlan compiles p's rules.
func compilePlan(p *SetProvider) *rulePlan {
	pl := &rulePlan{anchors: compileAnchors(p), headOf: make([]int32, len(p.Rules))}
	index := map[string]int32{}
	for i := range p.Rules {
		r := &p.Rules[i]
		k := r.Head.key()
		h, ok := index[k]
		if !ok {
			h = int32(len(pl.heads))
			index[k] = h
			pl.heads = append(pl.heads, &r.Head)
		}
		pl.headOf[i] = h
		if r.readsBody() && !slices.Contains(pl.bodyHeads, h) {
			pl.bodyHeads = append(pl.bodyHeads, h)
		}
	}
	return pl
}

// planOf returns p's compiled rules.
func (p *SetProvider) planOf() *rulePlan {
	if p.plan != nil {
		return p.plan
	}
	return compilePlan(p)
}

// SetRule is a tool or refuse line.
type SetRule struct {
	// ID names what the rule finds ("anthropic.web_search"); several
	// lines may share one.
	ID string
	// Refuse: the request is refused in every action (what cannot be
	// removed); else it is a tool that strip removes.
	Refuse bool
	// With: what only the tool ID uses (a with line): strip removes it
	// when it removes the tool; it is no finding of its own.
	With bool
	// Head holds the method, path and header conditions.
	Head   setHead
	Anchor setPath
	Conds  []setCond
	// Line is the line's text, for the log and the docs.
	Line string
}

// SetEvidence is an evidence line: conditions on one object's members.
type SetEvidence struct {
	ID    string
	Conds []setCond
	Line  string
}

// SetInventory is an inventory line.
type SetInventory struct {
	Anchor setPath
	Key    setPath
}

// setPath is a parsed path of a rule set: loose keys and array steps.
type setPath struct {
	steps []setStep
	text  string
}

// setStep is one key (folded by looseKey), or every element of an array.
type setStep struct {
	key   string
	array bool
}

func (p setPath) String() string { return p.text }

// setCond is one condition on a candidate.
type setCond struct {
	path setPath
	glob string // lower case; "" for a presence condition
	not  bool
}

func (c setCond) String() string {
	s := c.path.text
	if c.glob != "" {
		s += "=" + c.glob
	}
	if c.not {
		s = "!" + s
	}
	return s
}

// looseKey folds a key as rule sets compare keys: '_' and '-' dropped,
// every rune folded under simple case folding to one of its orbit (the
// lower-case ASCII letter where there is one, so "ſ" and "S" read as
// "s", the Kelvin sign as "k").
func looseKey(k string) string {
	plain := true
	for i := 0; i < len(k); i++ {
		if c := k[i]; !('a' <= c && c <= 'z') && !('0' <= c && c <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return k // already folded: most keys
	}
	var b strings.Builder
	b.Grow(len(k))
	for _, r := range k {
		if r == '_' || r == '-' {
			continue
		}
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

// foldRune is the rune r's simple case-folding orbit folds to: its
// lower-case ASCII letter if it has one, else its smallest rune.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	min := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if 'a' <= f && f <= 'z' {
			return f
		}
		if f < min {
			min = f
		}
	}
	return min
}

// parseSetPath parses a rule set's path ("tools[]", "request.tools[]",
// "@").
func parseSetPath(s string) (setPath, error) {
	p := setPath{text: s}
	if s == "@" {
		return p, nil
	}
	if s == "" {
		return p, errors.New("empty path")
	}
	for part := range strings.SplitSeq(s, ".") {
		key, arrays := part, 0
		for strings.HasSuffix(key, "[]") {
			key = strings.TrimSuffix(key, "[]")
			arrays++
		}
		if key == "" && !(arrays > 0 && len(p.steps) == 0) {
			return p, fmt.Errorf("path %q: empty key", s)
		}
		if strings.ContainsAny(key, "[]=\"!@ \t") {
			return p, fmt.Errorf("path %q: key %q holds a character keys may not", s, key)
		}
		if key != "" {
			p.steps = append(p.steps, setStep{key: looseKey(key)})
		}
		for range arrays {
			p.steps = append(p.steps, setStep{array: true})
		}
	}
	return p, nil
}

// parseSetCond parses KEYPATH, KEYPATH=GLOB, and either after '!'.
func parseSetCond(w string) (setCond, error) {
	var c setCond
	if rest, ok := strings.CutPrefix(w, "!"); ok {
		c.not, w = true, rest
	}
	key, glob, hasGlob := strings.Cut(w, "=")
	p, err := parseSetPath(key)
	if err != nil {
		return c, err
	}
	if hasGlob {
		if err := checkGlobText(key, glob); err != nil {
			return c, err
		}
		c.glob = strings.ToLower(glob)
	}
	c.path = p
	return c, nil
}

// ruleSetIndex holds the compiled sets, read once from the embedded
// files (they never change while doorman runs).
var ruleSetIndex = sync.OnceValues(func() (map[string]*RuleSet, error) {
	out := map[string]*RuleSet{}
	var errs []error
	err := fs.WalkDir(ruleSetFiles, "rulesets", func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		data, err := ruleSetFiles.ReadFile(p)
		if err != nil {
			return err
		}
		s, err := ParseRuleSet(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			return nil
		}
		if want := strings.TrimSuffix(path.Base(p), ".rules"); s.Name != want {
			errs = append(errs, fmt.Errorf("%s: the set is named %q", p, s.Name))
		}
		out[s.Name] = s
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
})

// LookupRuleSet returns the shipped rule set name.
func LookupRuleSet(name string) (*RuleSet, error) {
	sets, err := ruleSetIndex()
	if err != nil {
		return nil, fmt.Errorf("rule sets: %w", err)
	}
	if s, ok := sets[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("no rule set %q (this doorman has %s)", name, strings.Join(RuleSetNames(), ", "))
}

// RuleSetNames lists the shipped rule sets.
func RuleSetNames() []string {
	sets, _ := ruleSetIndex()
	var out []string
	for n := range sets {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// RuleSetSource returns the file a shipped set was compiled from.
func RuleSetSource(name string) ([]byte, error) {
	return ruleSetFiles.ReadFile("rulesets/" + name + ".rules")
}

// ParseRuleSet compiles a rule set's file. Every error names its line.
func ParseRuleSet(data []byte) (*RuleSet, error) {
	s := &RuleSet{}
	var errs []error
	var cur *SetProvider
	ids := map[string]bool{}
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		words, err := splitInspectLine(strings.TrimSpace(raw))
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			continue
		}
		if len(words) == 0 {
			continue
		}
		line := strings.Join(words, " ")
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("line %d: %s: %s", n, words[0], fmt.Sprintf(format, a...)))
		}
		args := words[1:]
		if s.Name == "" && words[0] != "ruleset" {
			bad("the file must start with \"ruleset NAME\"")
			continue
		}
		switch words[0] {
		case "ruleset":
			if s.Name != "" || len(args) != 1 || !validSetName(args[0]) || len(s.Providers) > 0 {
				bad("want one \"ruleset NAME\" (letters, digits, '-'), first")
				continue
			}
			s.Name = args[0]
		case "version":
			if s.Version != "" || len(args) != 1 {
				bad("want one \"version N\"")
				continue
			}
			s.Version = args[0]
		case "summary":
			s.Summary = strings.Join(args, " ")
		case "provider":
			if len(args) < 2 {
				bad("want \"provider NAME HOST...\"")
				continue
			}
			cur = &SetProvider{Name: args[0]}
			for _, h := range args[1:] {
				hn, err := normalizeInspectHost(h)
				if err != nil {
					bad("%v", err)
					continue
				}
				cur.Hosts = append(cur.Hosts, hn)
			}
			s.Providers = append(s.Providers, cur)
		case "front":
			if cur == nil || len(args) == 0 {
				bad("want \"front NAME...\" after a provider line")
				continue
			}
			for _, h := range args {
				hn, err := normalizeInspectHost(h)
				if err != nil {
					bad("%v", err)
					continue
				}
				cur.Fronts = append(cur.Fronts, hn)
			}
		case "tool", "refuse", "with":
			if cur == nil {
				bad("after a provider line")
				continue
			}
			r, err := parseSetRule(args, words[0] == "refuse")
			r.With = words[0] == "with"
			if err != nil {
				bad("%v", err)
				continue
			}
			r.Line = line
			ids[r.ID] = true
			cur.Rules = append(cur.Rules, r)
		case "evidence":
			if len(args) < 2 || !validSetID(args[0]) {
				bad("want \"evidence ID COND...\"")
				continue
			}
			ev := SetEvidence{ID: args[0], Line: line}
			positive := false
			for _, w := range args[1:] {
				c, err := parseSetCond(w)
				if err == nil && len(c.path.steps) != 1 {
					err = fmt.Errorf("%q: evidence looks at one object's own keys", w)
				}
				if err != nil {
					bad("%v", err)
					continue
				}
				positive = positive || !c.not
				ev.Conds = append(ev.Conds, c)
			}
			if !positive {
				bad("an evidence line needs a condition that is not negated")
				continue
			}
			if cur == nil {
				s.Evidence = append(s.Evidence, ev) // before any provider: every provider's
			} else {
				cur.Evidence = append(cur.Evidence, ev)
			}
		case "inventory":
			if cur == nil || len(args) != 2 || !strings.HasPrefix(args[0], "in:") {
				bad("want \"inventory in:ANCHOR KEY\" after a provider line")
				continue
			}
			a, err1 := parseSetPath(strings.TrimPrefix(args[0], "in:"))
			k, err2 := parseSetPath(args[1])
			if err := errors.Join(err1, err2); err != nil {
				bad("%v", err)
				continue
			}
			cur.Inventory = append(cur.Inventory, SetInventory{Anchor: a, Key: k})
		default:
			bad("want ruleset, version, summary, provider, front, tool, refuse, with, evidence or inventory")
		}
	}
	if s.Name == "" {
		errs = append(errs, errors.New("no \"ruleset NAME\" line"))
	}
	if s.Version == "" {
		errs = append(errs, errors.New("no \"version N\" line"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s.refDeny, s.refStrip, s.refProbe = s.Ref()+" "+SetDeny, s.Ref()+" "+SetStrip, s.Ref()+" "+SetProbe
	seen := map[string]bool{}
	for _, p := range s.Providers {
		p.matcher = NewEvidenceMatcher(slices.Concat(s.Evidence, p.Evidence))
		p.plan = compilePlan(p)
		for _, h := range slices.Concat(p.Hosts, p.Fronts) {
			if !seen[h] {
				seen[h] = true
				s.hosts = append(s.hosts, InspectHost{Host: h})
			}
		}
	}
	return s, nil
}

// parseSetRule parses what follows "tool" or "refuse".
func parseSetRule(args []string, refuse bool) (SetRule, error) {
	r := SetRule{Refuse: refuse}
	if len(args) < 2 || !validSetID(args[0]) {
		return r, errors.New("want ID [METHOD] PATH... [header:NAME[=GLOB]] [in:ANCHOR] COND...")
	}
	r.ID = args[0]
	rest := args[1:]
head:
	for len(rest) > 0 {
		w := rest[0]
		switch {
		case strings.HasPrefix(w, "/") || w == "*" || strings.HasPrefix(w, "*"):
			if strings.ToLower(w) != w {
				return r, fmt.Errorf("path %q: write paths in lower case (they are matched so)", w)
			}
			if err := checkGlobText("path", w); err != nil {
				return r, err
			}
			r.Head.paths = append(r.Head.paths, fold(w))
		case strings.HasPrefix(w, "header:"):
			key, glob, has := strings.Cut(strings.TrimPrefix(w, "header:"), "=")
			if !has {
				glob = "*"
			}
			if !isToken(key) || checkGlobText("header", glob) != nil {
				return r, fmt.Errorf("%q: want header:NAME[=GLOB]", w)
			}
			r.Head.headers = append(r.Head.headers, Cond{Key: textproto.CanonicalMIMEHeaderKey(key), Glob: strings.ToLower(glob)})
		case w != "" && strings.Trim(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ|") == "":
			for _, m := range strings.Split(w, "|") {
				if m == "" {
					return r, fmt.Errorf("method list %q has an empty method", w)
				}
				r.Head.methods = append(r.Head.methods, m)
			}
		default:
			break head
		}
		rest = rest[1:]
	}
	if len(r.Head.paths) == 0 {
		return r, errors.New("no PATH (\"*\" for any)")
	}
	if len(rest) > 0 && strings.HasPrefix(rest[0], "in:") {
		var err error
		if r.Anchor, err = parseSetPath(strings.TrimPrefix(rest[0], "in:")); err != nil {
			return r, err
		}
		rest = rest[1:]
	}
	for _, w := range rest {
		c, err := parseSetCond(w)
		if err != nil {
			return r, err
		}
		r.Conds = append(r.Conds, c)
	}
	if !refuse {
		if len(r.Conds) == 0 {
			return r, errors.New("a tool line needs a condition that finds the tool")
		}
		if r.stripsKeys() == nil && !r.anchorIsElement() {
			return r, errors.New("strip could not remove this tool: anchor it at an array's elements (in:tools[]) or make it the presence of keys")
		}
	}
	return r, nil
}

// setHead is what a set rule asks of a request besides its body: a
// method (any if none), a path glob (one of them, case folded), headers
// (their globs in lower case).
type setHead struct {
	methods []string
	paths   []string
	headers []Cond
}

// key is the head as one string: two heads with one key match alike.
func (h *setHead) key() string {
	var b strings.Builder
	for _, m := range h.methods {
		b.WriteString(m)
		b.WriteByte(0)
	}
	b.WriteByte(1)
	for _, p := range h.paths {
		b.WriteString(p)
		b.WriteByte(0)
	}
	b.WriteByte(1)
	for _, c := range h.headers {
		b.WriteString(c.Key)
		b.WriteByte(0)
		b.WriteString(c.Glob)
		b.WriteByte(0)
	}
	return b.String()
}

// match reports whether the head holds for some spelling of r: the
// spellings a user's deny rule matches (see spelling.go: the method in
// any case, HEAD as GET, the methods overrides name; every reading of
// the path, with its trailing slash dropped or added, case folded;
// header names with '_' for '-'), and how the spelling that matched
// differs from the one sent ("" if it does not). A request whose target
// is ambiguous has no spelling to match: the caller refuses it.
func (h *setHead) match(r *Request) (bool, string) {
	sp := r.spell()
	if sp.refuse != "" {
		return false, ""
	}
	var hows []string
	if len(h.methods) > 0 {
		how, ok := matchMethodSpellings(sp, func(m string) bool {
			return slices.ContainsFunc(h.methods, func(x string) bool { return strings.EqualFold(x, m) })
		})
		if !ok {
			return false, ""
		}
		hows = append(hows, how...)
	}
	ok := false
	for _, p := range h.paths {
		if p == "*" {
			ok = true
			break
		}
		if _, how, m := matchPathSpellings(p, sp.paths, matchSetPath); m {
			ok = true
			hows = append(hows, how...)
			break
		}
	}
	if !ok {
		return false, ""
	}
	for _, c := range h.headers {
		found := false
		for k, vs := range r.Header {
			if !SameHeaderName(k, c.Key) {
				continue
			}
			for _, v := range vs {
				if Glob(c.Glob, strings.ToLower(v)) {
					found = true
					break
				}
			}
		}
		if !found {
			return false, ""
		}
	}
	return true, strings.Join(hows, ", ")
}

// matchSetPath is matchPath for a rule set's path glob, but a glob that
// ends in "/*" wants something after its slash: "/v1/conversations/*"
// names a stored conversation, and "/v1/conversations" or
// "/v1/conversations/" (a new one) is not one, in any spelling.
func matchSetPath(pattern, path string) bool {
	if !matchPath(pattern, path) {
		return false
	}
	if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
		return len(strings.TrimRight(path, "/")) > len(prefix)+1
	}
	return true
}

// anchorIsElement reports whether the candidates are array elements.
func (r *SetRule) anchorIsElement() bool {
	st := r.Anchor.steps
	return len(st) > 0 && st[len(st)-1].array
}

// stripsKeys returns, when every condition is the presence of one key of
// the candidate, those keys: strip removes them (and the candidate if it
// is an array element left empty). nil otherwise: strip removes the
// candidate.
func (r *SetRule) stripsKeys() []string {
	var keys []string
	for _, c := range r.Conds {
		if c.not || c.glob != "" || len(c.path.steps) != 1 || c.path.steps[0].array {
			return nil
		}
		keys = append(keys, c.path.steps[0].key)
	}
	return keys
}

func validSetName(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

func validSetID(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-_.") == ""
}

// Ref is the set's name and version as the log writes them:
// "closed-book@1".
func (s *RuleSet) Ref() string { return s.Name + "@" + s.Version }

// ToolIDs lists the IDs of the set's tool and refuse lines, each once,
// in file order.
func (s *RuleSet) ToolIDs() []string {
	var out []string
	for _, p := range s.Providers {
		for _, r := range p.Rules {
			if !slices.Contains(out, r.ID) {
				out = append(out, r.ID)
			}
		}
		for _, e := range p.Evidence {
			if !slices.Contains(out, e.ID) {
				out = append(out, e.ID)
			}
		}
	}
	return out
}

// Lines returns every rule line of the set (tool, refuse, evidence), in
// file order.
func (s *RuleSet) Lines() []string {
	var out []string
	for _, p := range s.Providers {
		for _, r := range p.Rules {
			out = append(out, r.Line)
		}
		for _, e := range p.Evidence {
			out = append(out, e.Line)
		}
	}
	return out
}

// covers reports whether a provider's rules hold for name.
func (p *SetProvider) covers(name string) bool {
	for _, h := range p.Hosts {
		if hostMatches(h, name) {
			return true
		}
	}
	return false
}

// fronts reports whether name is on the provider's shared front ends.
func (p *SetProvider) fronts(name string) bool {
	for _, h := range p.Fronts {
		if hostMatches(h, name) {
			return true
		}
	}
	return false
}

// hostMatches reports whether pattern (a name or "*.name") covers name.
func hostMatches(pattern, name string) bool {
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return pattern == name
}

// inspectHostFor returns the set's inspected host that covers name (the
// exact one, else the longest wildcard), or nil.
func (s *RuleSet) inspectHostFor(name string) *InspectHost {
	var best *InspectHost
	for i := range s.hosts {
		h := &s.hosts[i]
		if h.Host == name {
			return h
		}
		if h.MatchHost(name) && (best == nil || len(h.Host) > len(best.Host)) {
			best = h
		}
	}
	return best
}
