package conf

import "bytes"

// judgeRef is ActiveRuleSet.Judge as it was before one walk of the body
// served every rule (ruleset_scan.go): each rule walks its own anchor
// from the document's top (collect). Kept as the reference the one-walk
// judge is compared with (TestRuleSetOnePass, FuzzRuleSetOnePass).
func (a *ActiveRuleSet) judgeRef(r *Request) SetJudgement {
	j := SetJudgement{Verdict: VerdictAllow}
	if why := r.spell().refuse; why != "" && a.Action != SetProbe {
		return SetJudgement{Verdict: VerdictDeny, Reason: "ambiguous request: " + why}
	}
	var doc *jsonDoc
	var root jval
	var docErr error
	docRead := false
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
	var plan stripPlan
	for pass := 0; pass < 2; pass++ {
		for _, p := range a.Providers {
			for i := range p.Rules {
				rule := &p.Rules[i]
				// Tools and refusals first; then, when strip removes a
				// tool, what only it uses.
				if rule.With != (pass == 1) || (pass == 1 && (a.Action != SetStrip || !plan.removes(rule.ID))) {
					continue
				}
				var ok bool
				if ok, how = rule.Head.match(r); !ok {
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
				cands, err := d.collect(nil, candidate{v: root}, rule.Anchor.steps)
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

// collect appends to dst every value steps find from c, in order.
func (d *jsonDoc) collect(dst []candidate, c candidate, steps []setStep) ([]candidate, error) {
	if len(steps) == 0 {
		return append(dst, c), nil
	}
	st := steps[0]
	if st.array {
		if d.kind(c.v) != '[' {
			return dst, nil
		}
		base := c.where()
		for i, e := range d.elements(c.v) {
			var err error
			if dst, err = d.collect(dst, candidate{v: e, base: base, inArr: true, arr: c.v, idx: i, owner: c.owner, hasOwner: c.hasOwner}, steps[1:]); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	if d.kind(c.v) != '{' {
		return dst, nil
	}
	ms, err := d.members(c.v)
	if err != nil {
		return dst, err
	}
	var base string
	for _, m := range ms {
		if m.fold != st.key {
			continue
		}
		if base == "" {
			base = c.where()
		}
		if dst, err = d.collect(dst, candidate{v: m.val, base: base, key: m.key, owner: c.v, hasOwner: true}, steps[1:]); err != nil {
			return dst, err
		}
	}
	return dst, nil
}
