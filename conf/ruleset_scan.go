package conf

// One walk of a body for every rule of a rule set.
//
// A provider's rules that read the body are compiled once into a trie of
// their anchors' paths from the document's top (anchorTrie): a node per
// key or array step, naming the rules whose candidates are the values
// there. Judging a request walks the document once down that trie, only
// into nodes with a rule whose method and path matched the request
// (scanAnchors), and hands each rule its candidates in document order,
// as a walk of its anchor alone would find them; the rules' conditions
// are then decided on those candidates. However many rules share a
// path (closed-book has dozens under tools[] and messages[]), the
// objects and arrays on it are read once.

// anchorTrie is a provider's rules' anchors, compiled.
type anchorTrie struct {
	nodes []trieNode
	// anchor is the node each rule is anchored at (by index in the
	// provider's Rules; 0 for a rule that does not read the body).
	anchor []int32
}

// trieNode is one place in the trie.
type trieNode struct {
	keys []trieEdge // key steps (folded keys), in the order first seen
	elem int32      // the array step's node; -1 if none
	// anchored are the rules (indexes in the provider's Rules) whose
	// candidates are the values here; below the rules anchored here
	// or under this node; viaKey the rules whose path goes on from
	// here by a key step (an object's members are read for them).
	anchored, below, viaKey []int32
}

type trieEdge struct {
	key string
	to  int32
}

// compileAnchors builds the trie of p's rules that read the body.
func compileAnchors(p *SetProvider) *anchorTrie {
	t := &anchorTrie{nodes: []trieNode{{elem: -1}}, anchor: make([]int32, len(p.Rules))}
	for i := range p.Rules {
		r := &p.Rules[i]
		if !r.readsBody() {
			continue
		}
		rule := int32(i)
		n := int32(0)
		for _, st := range r.Anchor.steps {
			t.nodes[n].below = append(t.nodes[n].below, rule)
			if st.array {
				if t.nodes[n].elem < 0 {
					t.nodes = append(t.nodes, trieNode{elem: -1})
					t.nodes[n].elem = int32(len(t.nodes) - 1)
				}
				n = t.nodes[n].elem
				continue
			}
			t.nodes[n].viaKey = append(t.nodes[n].viaKey, rule)
			next := int32(-1)
			for _, e := range t.nodes[n].keys {
				if e.key == st.key {
					next = e.to
				}
			}
			if next < 0 {
				t.nodes = append(t.nodes, trieNode{elem: -1})
				next = int32(len(t.nodes) - 1)
				t.nodes[n].keys = append(t.nodes[n].keys, trieEdge{st.key, next})
			}
			n = next
		}
		t.nodes[n].below = append(t.nodes[n].below, rule)
		t.nodes[n].anchored = append(t.nodes[n].anchored, rule)
		t.anchor[i] = n
	}
	return t
}

// anchorScan is what one walk found for one provider's rules: per trie
// node, the candidates there (rules anchored at one node share them);
// per rule, the error that stopped its walk (a key given twice in an
// object on its path), as jsonDoc.collect would return it.
type anchorScan struct {
	t     *anchorTrie
	cands [][]candidate
	errs  []error
}

// found returns what a walk of rule i's anchor alone would have: its
// candidates in document order, or the error that stopped it.
func (s *anchorScan) found(i int) ([]candidate, error) {
	if s.errs[i] != nil {
		return nil, s.errs[i]
	}
	return s.cands[s.t.anchor[i]], nil
}

// scanAnchors walks the document from root once for the rules of p that
// live says matched the request (by index in p.Rules).
func (d *jsonDoc) scanAnchors(t *anchorTrie, root jval, live []bool) anchorScan {
	s := anchorScan{t: t, cands: make([][]candidate, len(t.nodes)), errs: make([]error, len(live))}
	nodeLive := make([]bool, len(t.nodes))
	for n := range t.nodes {
		for _, r := range t.nodes[n].below {
			if live[r] {
				nodeLive[n] = true
				break
			}
		}
	}
	if nodeLive[0] {
		d.scanNode(t, nodeLive, live, &s, candidate{v: root}, 0)
	}
	return s
}

func (d *jsonDoc) scanNode(t *anchorTrie, nodeLive, live []bool, s *anchorScan, c candidate, n int32) {
	nd := &t.nodes[n]
	if len(nd.anchored) > 0 {
		s.cands[n] = append(s.cands[n], c)
	}
	if nd.elem >= 0 && nodeLive[nd.elem] && d.kind(c.v) == '[' {
		base := c.where()
		for i, e := range d.elements(c.v) {
			d.scanNode(t, nodeLive, live, s, candidate{v: e, base: base, inArr: true, arr: c.v, idx: i, owner: c.owner, hasOwner: c.hasOwner}, nd.elem)
		}
	}
	if len(nd.keys) == 0 || d.kind(c.v) != '{' {
		return
	}
	want := false
	for _, e := range nd.keys {
		want = want || nodeLive[e.to]
	}
	if !want {
		return
	}
	ms, err := d.members(c.v)
	if err != nil {
		// The walk of every rule that reads these members stops
		// here, at its first error.
		for _, r := range nd.viaKey {
			if live[r] && s.errs[r] == nil {
				s.errs[r] = err
			}
		}
		return
	}
	var base string
	for _, m := range ms {
		for _, e := range nd.keys {
			if e.key != m.fold || !nodeLive[e.to] {
				continue
			}
			if base == "" {
				base = c.where()
			}
			d.scanNode(t, nodeLive, live, s, candidate{v: m.val, base: base, key: m.key, owner: c.v, hasOwner: true}, e.to)
		}
	}
}
