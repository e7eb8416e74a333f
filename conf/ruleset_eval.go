package conf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ActiveRuleSet is a rule set in force for one host: the policy's use of
// it and the set's providers whose rules hold for the host.
type ActiveRuleSet struct {
	Set    *RuleSet
	Action string
	// Providers are those whose hosts cover the name; none for a name
	// the set only inspects (a front).
	Providers []*SetProvider
}

// SetFinding is one thing a rule set found in a request.
type SetFinding struct {
	// ID is the rule's ("anthropic.web_search").
	ID string
	// Refuse: the request can only be refused (a refuse line).
	Refuse bool
	// Where is the candidate's place in the body ("tools[1]", "" for
	// a rule without conditions), What what names it ("web_search_20250305").
	Where, What string
	// Line is the rule line that found it.
	Line string
}

// String renders a finding for the log: "anthropic.web_search at
// tools[1] (web_search_20250305)".
func (f SetFinding) String() string {
	s := f.ID
	if f.Where != "" {
		s += " at " + f.Where
	}
	if f.What != "" {
		s += " (" + f.What + ")"
	}
	return s
}

// SetJudgement is what one rule set says about one request.
type SetJudgement struct {
	// Verdict is VerdictAllow or VerdictDeny.
	Verdict string
	// Rule names the line that refused, for the log and the 403 page;
	// Reason says why when the line alone does not.
	Rule, Reason string
	// Spelling says how the request's method and path were read to
	// match the rule that refused ("path parameters (;) dropped"), when
	// not as sent: "" if as sent.
	Spelling string
	// Findings are every tool and refusal the set found (in probe
	// mode, what it would have stopped).
	Findings []SetFinding
	// Removed are the findings strip removed; Body is then the
	// rewritten body, to be forwarded instead of the request's.
	Removed []SetFinding
	Body    []byte
	// Inventory lists the tools the request declared ("tools[].type"
	// values), for the probe report: in probe mode only.
	Inventory []string
}

// NeedsBody reports whether judging r needs its body: a rule with
// conditions matches a spelling of its method and path.
func (a *ActiveRuleSet) NeedsBody(r *Request) bool {
	for _, p := range a.Providers {
		pl := p.planOf()
		for _, h := range pl.bodyHeads {
			if ok, _ := pl.heads[h].match(r); ok {
				return true
			}
		}
	}
	return false
}

// readsBody reports whether the rule looks into the body.
func (r *SetRule) readsBody() bool { return len(r.Conds) > 0 || len(r.Anchor.steps) > 0 }

// Judge judges r (whose Body holds the request's body if NeedsBody said
// so) by the set, in the set's action: deny refuses a request with a
// tool or a refusal; strip removes the tools (Body, Removed) and refuses
// only what cannot be removed safely; probe refuses nothing. Findings
// are filled in every action. A rule's method and path hold for every
// spelling of the request a user's deny rule's do (see spelling.go); a
// request whose target no rule can be trusted to judge is refused.
func (a *ActiveRuleSet) Judge(r *Request) SetJudgement {
	j := SetJudgement{Verdict: VerdictAllow}
	if why := r.spell().refuse; why != "" && a.Action != SetProbe {
		return SetJudgement{Verdict: VerdictDeny, Reason: "ambiguous request: " + why}
	}
	var doc *jsonDoc
	var root jval
	var docErr error
	docRead := false
	// The document goes back to its pool once judged: what the
	// judgement holds (findings, inventory, a rewritten body) is copied
	// out of it, or is the request's own body.
	defer func() {
		if doc != nil {
			doc.release()
		}
	}()
	readDoc := func() (*jsonDoc, error) {
		if !docRead {
			docRead = true
			if len(bytes.TrimSpace(r.Body)) > 0 {
				doc, root, docErr = newJSONDoc(r.Body)
			}
		}
		return doc, docErr
	}
	how := "" // how the rule being judged matched the request's spelling
	refuse := func(rule, reason string) {
		if a.Action != SetProbe && j.Verdict == VerdictAllow {
			j.Verdict, j.Rule, j.Reason, j.Spelling = VerdictDeny, rule, reason, how
		}
	}
	// The providers' rules compiled, and whether each distinct head
	// (method, path and headers) matches, and how: matched once per
	// head (heads[pi] from base[pi]).
	var plansBuf [2]*rulePlan
	var baseBuf [2]int
	plans, base := plansBuf[:0], baseBuf[:0]
	nHeads := 0
	for _, p := range a.Providers {
		pl := p.planOf()
		plans, base = append(plans, pl), append(base, nHeads)
		nHeads += len(pl.heads)
	}
	var headsBuf [16]headMatch
	heads := headsBuf[:0]
	if nHeads > len(headsBuf) {
		heads = make([]headMatch, nHeads)
	} else {
		heads = headsBuf[:nHeads]
	}
	head := func(pi, i int) (bool, string) {
		hi := plans[pi].headOf[i]
		h := &heads[base[pi]+int(hi)]
		if !h.done {
			h.done = true
			h.ok, h.how = plans[pi].heads[hi].match(r)
		}
		return h.ok, h.how
	}
	// What one walk of the body found for each provider's rules, made
	// when the first of them reads the body.
	scans := make([]*anchorScan, len(a.Providers))
	scanFor := func(pi int, d *jsonDoc) *anchorScan {
		if scans[pi] == nil {
			p := a.Providers[pi]
			t := plans[pi].anchors
			live := make([]bool, len(p.Rules))
			for i := range p.Rules {
				rule := &p.Rules[i]
				if rule.readsBody() && (!rule.With || a.Action == SetStrip) {
					live[i], _ = head(pi, i)
				}
			}
			s := d.scanAnchors(t, root, live)
			scans[pi] = &s
		}
		return scans[pi]
	}
	var plan stripPlan
	for pass := 0; pass < 2; pass++ {
		for pi, p := range a.Providers {
			for i := range p.Rules {
				rule := &p.Rules[i]
				// Tools and refusals first; then, when strip removes a
				// tool, what only it uses.
				if rule.With != (pass == 1) || (pass == 1 && (a.Action != SetStrip || !plan.removes(rule.ID))) {
					continue
				}
				var ok bool
				if ok, how = head(pi, i); !ok {
					continue
				}
				if !rule.readsBody() {
					j.Findings = append(j.Findings, SetFinding{ID: rule.ID, Refuse: rule.Refuse, Line: rule.Line})
					refuse(rule.Line, "")
					continue
				}
				d, err := readDoc()
				if err != nil {
					refuse(rule.Line, "the body cannot be read as JSON: "+err.Error())
					continue
				}
				if d == nil {
					continue // no body: no tool in it
				}
				sc := scanFor(pi, d)
				cands, err := sc.found(i)
				for ci := 0; err == nil && ci < len(cands); ci++ {
					c := cands[ci]
					var ok bool
					if ok, err = d.holds(c.v, rule.Conds); !ok || err != nil {
						continue
					}
					f := SetFinding{ID: rule.ID, Refuse: rule.Refuse, Where: c.where(), What: d.what(c.v, rule), Line: rule.Line}
					if !rule.With {
						j.Findings = append(j.Findings, f)
					}
					switch {
					case a.Action == SetProbe:
					case rule.Refuse || a.Action == SetDeny:
						refuse(rule.Line, "")
					default:
						if err := plan.add(d, c, rule, f); err != nil {
							refuse(rule.Line, err.Error())
						}
					}
				}
				if err != nil {
					refuse(rule.Line, "the body cannot be read: "+err.Error())
				}
			}
		}
	}
	if a.Action == SetProbe && docRead && doc != nil {
		j.Inventory = a.inventory(doc, root)
	}
	if a.Action != SetStrip || j.Verdict == VerdictDeny || len(plan.removed) == 0 {
		return j
	}
	body, rule, reason := plan.apply(doc)
	if reason != "" {
		j.Verdict, j.Rule, j.Reason = VerdictDeny, rule, reason
		return j
	}
	j.Body, j.Removed = body, plan.removed
	return j
}

// headMatch is whether a rule's method, path and headers matched a
// request, and how (see setHead.match).
type headMatch struct {
	done, ok bool
	how      string
}

// candidate is one value an anchor found.
type candidate struct {
	v jval
	// Its place, rendered only when a rule finds it (where): the
	// place of its container, and its key or index there.
	base string
	key  string
	// In an array: the array and the element's index.
	inArr bool
	arr   jval
	idx   int
	// owner is the object that holds the array (or the member) the
	// candidate is in: where tool_choice is looked for.
	owner    jval
	hasOwner bool
}

// where renders the candidate's place: "tools[1]", "requests[0].params".
func (c *candidate) where() string {
	switch {
	case c.inArr:
		return c.base + "[" + strconv.Itoa(c.idx) + "]"
	case c.key == "":
		return c.base
	case c.base == "":
		return c.key
	}
	return c.base + "." + c.key
}

// candidates returns the values anchor finds from root (root itself for
// an empty anchor).
func (d *jsonDoc) candidates(root jval, anchor setPath) ([]candidate, error) {
	cur := []candidate{{v: root}}
	for _, st := range anchor.steps {
		var next []candidate
		for _, c := range cur {
			switch {
			case st.array:
				if d.kind(c.v) != '[' {
					continue
				}
				base := c.where()
				for i, e := range d.elements(c.v) {
					next = append(next, candidate{v: e, base: base, inArr: true, arr: c.v, idx: i, owner: c.owner, hasOwner: c.hasOwner})
				}
			default:
				if d.kind(c.v) != '{' {
					continue
				}
				ms, err := d.members(c.v)
				if err != nil {
					return nil, err
				}
				var base string
				for _, m := range ms {
					if m.fold == st.key {
						if base == "" {
							base = c.where()
						}
						next = append(next, candidate{v: m.val, base: base, key: m.key, owner: c.v, hasOwner: true})
					}
				}
			}
		}
		cur = next
	}
	return cur, nil
}

// anyMatch reports whether a value steps find from v matches glob (see
// matchValue); it reads no more of the document than the path walks.
func (d *jsonDoc) anyMatch(v jval, steps []setStep, glob string) (bool, error) {
	return d.anyValue(v, steps, func(x jval) bool { return d.matchValue(x, glob) })
}

// anyValue reports whether pred holds for a value steps find from v.
func (d *jsonDoc) anyValue(v jval, steps []setStep, pred func(jval) bool) (bool, error) {
	if len(steps) == 0 {
		return pred(v), nil
	}
	st := steps[0]
	if st.array {
		if d.kind(v) != '[' {
			return false, nil
		}
		for _, e := range d.elements(v) {
			if ok, err := d.anyValue(e, steps[1:], pred); ok || err != nil {
				return ok, err
			}
		}
		return false, nil
	}
	if d.kind(v) != '{' {
		return false, nil
	}
	ms, err := d.members(v)
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.fold == st.key {
			if ok, err := d.anyValue(m.val, steps[1:], pred); ok || err != nil {
				return ok, err
			}
		}
	}
	return false, nil
}

// holds reports whether every condition holds on v.
func (d *jsonDoc) holds(v jval, conds []setCond) (bool, error) {
	for _, c := range conds {
		found, err := d.anyMatch(v, c.path.steps, c.glob)
		if err != nil {
			return false, err
		}
		if found == c.not {
			return false, nil
		}
	}
	return true, nil
}

// matchValue: a presence condition ("" glob) holds for any value but
// null; a glob matches a scalar's text case-insensitively, an object or
// array only "*".
func (d *jsonDoc) matchValue(v jval, glob string) bool {
	if glob == "" {
		return !d.isNull(v)
	}
	switch d.kind(v) {
	case '{', '[':
		return glob == "*"
	case '"':
		raw := d.b[v.s+1 : v.e-1]
		if isPlainASCII(raw) {
			return globFoldASCII(glob, raw)
		}
	}
	return Glob(glob, strings.ToLower(d.text(v)))
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// isPlainASCII reports whether a string's raw bytes are its text, all
// ASCII: no escape to read.
func isPlainASCII(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// globFoldASCII is Glob(pattern, lower(s)) for an ASCII s, without
// making the lower-case copy.
func globFoldASCII[T string | []byte](pattern string, s T) bool {
	p, i := 0, 0
	star, mark := -1, 0
	lower := func(c byte) byte {
		if 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == lower(s[i]):
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

// what names what a rule found in candidate v: the keys a key rule
// finds, else v's identity.
func (d *jsonDoc) what(v jval, rule *SetRule) string {
	keys := rule.stripsKeys()
	if keys == nil || d.kind(v) != '{' {
		return d.identity(v)
	}
	ms, _ := d.members(v)
	var names []string
	for _, m := range ms {
		if slices.Contains(keys, m.fold) {
			names = append(names, m.key)
		}
	}
	return strings.Join(names, ",")
}

// identity names a candidate for the log and for tool_choice: its
// "type" (or "id", "name", "server_label"), or the first key of an
// object, or a scalar's text.
func (d *jsonDoc) identity(v jval) string {
	switch d.kind(v) {
	case '{':
		ms, err := d.members(v)
		if err != nil || len(ms) == 0 {
			return ""
		}
		for _, want := range []string{"type", "id", "name", "serverlabel"} {
			for _, m := range ms {
				if m.fold == want && d.kind(m.val) == '"' {
					return d.str(m.val)
				}
			}
		}
		return ms[0].key
	case '[':
		return ""
	}
	return d.text(v)
}

// idents are the strings a removed candidate may be named by in a
// tool_choice: its type, name, server_label and id, or the keys removed.
func (d *jsonDoc) idents(v jval) []string {
	var out []string
	if d.kind(v) != '{' {
		return out
	}
	ms, _ := d.members(v)
	for _, m := range ms {
		switch m.fold {
		case "type", "name", "serverlabel", "id":
			if d.kind(m.val) == '"' {
				out = append(out, d.str(m.val))
			}
		}
	}
	return out
}

// inventory lists what the request's inventory anchors hold.
func (a *ActiveRuleSet) inventory(d *jsonDoc, root jval) []string {
	var out []string
	for _, p := range a.Providers {
		for _, inv := range p.Inventory {
			cands, err := d.candidates(root, inv.Anchor)
			if err != nil {
				continue
			}
			for _, c := range cands {
				var names []string
				if inv.Key.text == "*" {
					if d.kind(c.v) == '{' {
						ms, _ := d.members(c.v)
						for _, m := range ms {
							names = append(names, m.key)
						}
					}
				} else {
					d.anyValue(c.v, inv.Key.steps, func(v jval) bool {
						if s := d.text(v); s != "" {
							names = append(names, s)
						}
						return false
					})
				}
				for _, n := range names {
					if len(n) > 128 {
						n = n[:128]
					}
					if !slices.Contains(out, n) && len(out) < 64 {
						out = append(out, n)
					}
				}
			}
		}
	}
	return out
}

// stripPlan gathers what strip removes from one body.
type stripPlan struct {
	// drop: per array (by its start), the indexes of elements removed.
	drop map[int]*arrayDrop
	// keys: per object (by its start), the members removed.
	keys    map[int]*objectDrop
	removed []SetFinding
}

type arrayDrop struct {
	arr      jval
	owner    jval
	hasOwner bool
	idx      []int
	idents   []string
	rule     string
}

type objectDrop struct {
	obj    jval
	names  []string // folded keys
	idents []string
	rule   string
	// elem: the object is an element of an array, removed whole if no
	// member is left.
	elem candidate
}

// removes reports whether the plan removes a tool of id.
func (p *stripPlan) removes(id string) bool {
	return slices.ContainsFunc(p.removed, func(f SetFinding) bool { return f.ID == id })
}

// add plans the removal of a candidate a tool rule found.
func (p *stripPlan) add(d *jsonDoc, c candidate, rule *SetRule, f SetFinding) error {
	if p.drop == nil {
		p.drop, p.keys = map[int]*arrayDrop{}, map[int]*objectDrop{}
	}
	p.removed = append(p.removed, f)
	if keys := rule.stripsKeys(); keys != nil {
		if d.kind(c.v) != '{' {
			return fmt.Errorf("%s: not an object, nothing to remove", c.where())
		}
		od := p.keys[c.v.s]
		if od == nil {
			od = &objectDrop{obj: c.v, rule: rule.Line, elem: c}
			p.keys[c.v.s] = od
		}
		for _, k := range keys {
			if !slices.Contains(od.names, k) {
				od.names = append(od.names, k)
			}
		}
		ms, _ := d.members(c.v)
		for _, m := range ms {
			if slices.Contains(keys, m.fold) {
				od.idents = append(od.idents, m.key)
			}
		}
		return nil
	}
	if !c.inArr {
		return fmt.Errorf("%s: not in an array, cannot be removed", c.where())
	}
	ad := p.drop[c.arr.s]
	if ad == nil {
		ad = &arrayDrop{arr: c.arr, owner: c.owner, hasOwner: c.hasOwner, rule: rule.Line}
		p.drop[c.arr.s] = ad
	}
	if !slices.Contains(ad.idx, c.idx) {
		ad.idx = append(ad.idx, c.idx)
		ad.idents = append(ad.idents, d.idents(c.v)...)
	}
	return nil
}

// apply returns the body without what the plan removes, or the rule and
// the reason the request cannot be rewritten safely.
func (p *stripPlan) apply(d *jsonDoc) (body []byte, rule, reason string) {
	var spans []span
	// Objects whose removed keys leave them empty go whole, as
	// elements of their array.
	for _, od := range p.keys {
		ms, _ := d.members(od.obj)
		var drop []int
		for i, m := range ms {
			if slices.Contains(od.names, m.fold) {
				drop = append(drop, i)
			}
		}
		if len(drop) == len(ms) && od.elem.inArr {
			ad := p.drop[od.elem.arr.s]
			if ad == nil {
				ad = &arrayDrop{arr: od.elem.arr, owner: od.elem.owner, hasOwner: od.elem.hasOwner, rule: od.rule}
				p.drop[od.elem.arr.s] = ad
			}
			if !slices.Contains(ad.idx, od.elem.idx) {
				ad.idx = append(ad.idx, od.elem.idx)
			}
			ad.idents = append(ad.idents, od.idents...)
			continue
		}
		spans = append(spans, deleteMembers(ms, drop)...)
		// A key removed from an object: tool_choice beside it must
		// not name it.
		if why := d.checkToolChoice(od.obj, od.idents, false); why != "" {
			return nil, od.rule, why
		}
	}
	for _, ad := range p.drop {
		slices.Sort(ad.idx)
		elems := d.elements(ad.arr)
		spans = append(spans, deleteElements(elems, ad.idx)...)
		if ad.hasOwner {
			if why := d.checkToolChoice(ad.owner, ad.idents, len(ad.idx) == len(elems)); why != "" {
				return nil, ad.rule, why
			}
		}
	}
	out := applyDeletions(d.b, spans)
	// What is forwarded must be what was judged: the rewrite must
	// leave one valid document.
	od, _, err := newJSONDoc(out)
	if err != nil {
		return nil, "", "the rewritten body is not valid JSON (" + err.Error() + ")"
	}
	od.release()
	return out, "", ""
}

// checkToolChoice says why a request cannot go without what was removed
// from the object owner: its tool_choice (or toolChoice) names a removed
// tool, or asks for some tool ("required", "any") when none is left.
func (d *jsonDoc) checkToolChoice(owner jval, idents []string, emptied bool) string {
	if d.kind(owner) != '{' {
		return ""
	}
	ms, err := d.members(owner)
	if err != nil {
		return err.Error()
	}
	for _, m := range ms {
		if m.fold != "toolchoice" {
			continue
		}
		var found string
		d.walkStrings(m.val, 0, func(s string) bool {
			for _, id := range idents {
				if id != "" && strings.EqualFold(s, id) {
					found = "tool_choice names the removed tool " + strconv.Quote(id)
					return false
				}
			}
			if emptied && (strings.EqualFold(s, "required") || strings.EqualFold(s, "any")) {
				found = "tool_choice asks for a tool (" + s + ") and strip left none"
				return false
			}
			return true
		})
		if found != "" {
			return found
		}
	}
	return ""
}

// walkStrings calls fn with every string (and key) inside v until fn
// returns false.
func (d *jsonDoc) walkStrings(v jval, depth int, fn func(string) bool) bool {
	if depth > maxJSONDepth {
		return false
	}
	switch d.kind(v) {
	case '"':
		return fn(d.str(v))
	case '[':
		for _, e := range d.elements(v) {
			if !d.walkStrings(e, depth+1, fn) {
				return false
			}
		}
	case '{':
		ms, err := d.members(v)
		if err != nil {
			return false
		}
		for _, m := range ms {
			if !fn(m.key) || !d.walkStrings(m.val, depth+1, fn) {
				return false
			}
		}
	}
	return true
}

// FoldKey folds a JSON key as rule sets compare keys (see looseKey).
func FoldKey(k string) string { return looseKey(k) }

// EvidenceField is what a response scanner knows of one member of an
// object: its folded key, its text (a scalar's, "" for an object or
// array) and whether it is there with something in it (not null, false,
// "", {} or []).
type EvidenceField struct {
	Key     string
	Text    string
	Present bool
}

// EvidenceMatcher matches evidence lines against the members of one
// object at a time, as a response streams by.
type EvidenceMatcher struct {
	rules []SetEvidence
	keys  map[string]string // folded key -> itself
	// byValue indexes the rules by a condition "KEY=LITERAL" they hold
	// (key, NUL, literal); scan are the rules without one.
	byValue map[string][]int
	scan    []int
	// negated: the rule has a negated condition.
	negated []bool
}

// NewEvidenceMatcher compiles evidence lines; nil if there are none.
func NewEvidenceMatcher(evs []SetEvidence) *EvidenceMatcher {
	if len(evs) == 0 {
		return nil
	}
	m := &EvidenceMatcher{rules: slices.Clone(evs), keys: map[string]string{}, byValue: map[string][]int{}, negated: make([]bool, len(evs))}
	for i, e := range evs {
		indexed := false
		for _, c := range e.Conds {
			m.negated[i] = m.negated[i] || c.not
			k := c.path.steps[0].key
			m.keys[k] = k
			if !indexed && !c.not && c.glob != "" && !strings.Contains(c.glob, "*") {
				m.byValue[k+"\x00"+c.glob] = append(m.byValue[k+"\x00"+c.glob], i)
				indexed = true
			}
		}
		if !indexed {
			m.scan = append(m.scan, i)
		}
	}
	return m
}

// Wants reports whether evidence looks at members with the folded key.
func (m *EvidenceMatcher) Wants(key string) bool { _, ok := m.keys[key]; return ok }

// WantsRaw is Wants for a key as its raw bytes between the quotes,
// escapes unread: the folded key if evidence looks at it. A plain ASCII
// key is folded without allocating.
func (m *EvidenceMatcher) WantsRaw(raw []byte) (string, bool) {
	var buf [64]byte
	n := 0
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf || n == len(buf) {
			var s string
			if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s); err != nil {
				return "", false
			}
			k, ok := m.keys[looseKey(s)]
			return k, ok
		}
		switch {
		case c == '_' || c == '-':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf[n] = c
		n++
	}
	k, ok := m.keys[string(buf[:n])]
	return k, ok
}

// Match returns the first evidence line the fields satisfy. Before the
// object is complete (final false) only lines without negated
// conditions can be decided, and a field not seen yet holds no value.
func (m *EvidenceMatcher) Match(fields []EvidenceField, final bool) (SetEvidence, bool) {
	return m.match(fields, final, false)
}

// MatchNegated is Match(fields, true) for fields on which Match(fields,
// false) found nothing: only the lines with a negated condition, which
// Match decides once the object is complete, can hold on them then. It
// tries those alone, in Match's order.
func (m *EvidenceMatcher) MatchNegated(fields []EvidenceField) (SetEvidence, bool) {
	return m.match(fields, true, true)
}

func (m *EvidenceMatcher) match(fields []EvidenceField, final, onlyNegated bool) (SetEvidence, bool) {
	// Which fields' text is beyond ASCII (the first 64), read once.
	var wide uint64
	for i, f := range fields[:min(len(fields), 64)] {
		if !isASCII(f.Text) {
			wide |= 1 << i
		}
	}
	try := func(i int) bool {
		return (!onlyNegated || m.negated[i]) && m.holds(m.rules[i], fields, final, wide)
	}
	// The rules a field's literal value indexes, then the others, in
	// file order within each.
	var buf [64]byte
	for _, f := range fields {
		if f.Text == "" {
			continue
		}
		key := append(append(append(buf[:0], f.Key...), 0), f.Text...)
		for i := range key[len(f.Key)+1:] {
			if c := key[len(f.Key)+1+i]; 'A' <= c && c <= 'Z' {
				key[len(f.Key)+1+i] = c + 'a' - 'A'
			}
		}
		for _, i := range m.byValue[string(key)] {
			if try(i) {
				return m.rules[i], true
			}
		}
	}
	for _, i := range m.scan {
		if try(i) {
			return m.rules[i], true
		}
	}
	return SetEvidence{}, false
}

// holds reports whether evidence line e holds on fields.
// wide says which of the first 64 fields hold text beyond ASCII.
func (m *EvidenceMatcher) holds(e SetEvidence, fields []EvidenceField, final bool, wide uint64) bool {
	{
		for _, c := range e.Conds {
			if c.not && !final {
				return false
			}
			key := c.path.steps[0].key
			found := false
			for fi, f := range fields {
				if f.Key != key {
					continue
				}
				if c.glob == "" {
					found = f.Present
				} else {
					found = globFoldASCII(c.glob, f.Text)
					// Only a text beyond ASCII needs folding by
					// Unicode's rules: for ASCII both are one.
					if !found && ((fi < 64 && wide&(1<<fi) != 0) || (fi >= 64 && !isASCII(f.Text))) {
						found = Glob(c.glob, strings.ToLower(f.Text))
					}
				}
				if found {
					break
				}
			}
			if found == c.not {
				return false
			}
		}
		return true
	}
}
