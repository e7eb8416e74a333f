package conf

import (
	"net/http"
	"testing"
)

// The seed corpora live in testdata/fuzz/FuzzRuleSetJudge and
// testdata/fuzz/FuzzParseRuleSet.

// isSubsequence reports whether out is in with bytes deleted: what strip
// does and all it may do.
func isSubsequence(out, in []byte) bool {
	i := 0
	for _, c := range out {
		for i < len(in) && in[i] != c {
			i++
		}
		if i == len(in) {
			return false
		}
		i++
	}
	return true
}

// FuzzRuleSetJudge judges any body on any path of every provider by
// closed-book in each action: it never panics; strip only deletes bytes,
// leaves one valid JSON document, and leaves nothing that deny refuses
// for a tool; probe never refuses.
func FuzzRuleSetJudge(f *testing.F) {
	hosts := []string{"api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com", "api.x.ai",
		"api.mistral.ai", "api.perplexity.ai", "openrouter.ai"}
	pols := map[string]*Policy{}
	for _, a := range []string{SetDeny, SetStrip, SetProbe} {
		p, err := ParseFile([]byte("mode: open\nruleset closed-book " + a + "\n"))
		if err != nil {
			f.Fatal(err)
		}
		pols[a] = p
	}
	f.Fuzz(func(t *testing.T, hostIndex uint8, path, body string) {
		host := hosts[int(hostIndex)%len(hosts)]
		judgeAll := func(action, b string) SetJudgement {
			sets := pols[action].RuleSetsFor(host)
			r := &Request{Method: "POST", Path: path, Header: http.Header{}}
			if sets[0].NeedsBody(r) {
				r.Body = []byte(b)
			}
			return sets[0].Judge(r)
		}
		if j := judgeAll(SetProbe, body); j.Verdict != VerdictAllow || j.Body != nil {
			t.Fatalf("probe: %s %q", j.Verdict, j.Body)
		}
		deny := judgeAll(SetDeny, body)
		if deny.Body != nil {
			t.Fatal("deny rewrote the body")
		}
		j := judgeAll(SetStrip, body)
		if j.Body == nil {
			if j.Verdict == VerdictAllow && deny.Verdict == VerdictDeny {
				t.Fatalf("strip passes unchanged what deny refuses (%s)", deny.Rule)
			}
			return
		}
		if j.Verdict != VerdictAllow {
			t.Fatalf("strip: %s with a body", j.Verdict)
		}
		if !isSubsequence(j.Body, []byte(body)) {
			t.Fatalf("strip did more than delete: %q from %q", j.Body, body)
		}
		if _, _, err := newJSONDoc(j.Body); err != nil {
			t.Fatalf("strip made %q, not JSON: %v", j.Body, err)
		}
		if again := judgeAll(SetDeny, string(j.Body)); again.Verdict == VerdictDeny {
			t.Fatalf("strip forwards %q, which deny refuses (%s %s)", j.Body, again.Rule, again.Reason)
		}
	})
}

// FuzzParseRuleSet checks that compiling any rule set file never panics,
// and that a set that compiles judges a request without panicking.
func FuzzParseRuleSet(f *testing.F) {
	f.Fuzz(func(t *testing.T, data, body string) {
		s, err := ParseRuleSet([]byte(data))
		if err != nil {
			return
		}
		_ = s.Lines()
		for _, p := range s.Providers {
			a := ActiveRuleSet{Set: s, Action: SetStrip, Providers: []*SetProvider{p}}
			r := &Request{Method: "POST", Path: "/v1/x", Header: http.Header{}, Body: []byte(body)}
			a.NeedsBody(r)
			a.Judge(r)
			if m := NewEvidenceMatcher(a.Evidence()); m != nil {
				m.Match([]EvidenceField{{Key: "type", Text: body, Present: true}}, true)
			}
		}
	})
}
