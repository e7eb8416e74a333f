package conf

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// judgeSetTarget judges a request as the proxy reads it: its raw target
// (path and query) through ParseTarget, its headers.
func judgeSetTarget(t *testing.T, p *Policy, host, method, target, body string, hdr ...string) SetJudgement {
	t.Helper()
	sets := p.RuleSetsFor(host)
	if len(sets) != 1 {
		t.Fatalf("%s: %d rule sets in force", host, len(sets))
	}
	r := &Request{Method: method, Header: http.Header{}}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	tg, err := ParseTarget(target)
	if err != nil {
		// Refused outright: what the set says of it all the same.
		r.Path = strings.SplitN(target, "?", 2)[0]
	} else {
		r.Path, r.EscapedPath = tg.Path, tg.EscapedPath
		r.Query, _ = url.ParseQuery(tg.RawQuery)
	}
	if sets[0].NeedsBody(r) {
		r.Body = []byte(body)
	}
	return sets[0].Judge(r)
}

// A rule set's method and path conditions hold for every spelling an
// origin may route to the same handler, as a user's deny rule does
// (spelling.go): method overrides, path parameters in any segment,
// double encoding, trailing dots, an encoded '?', NFKC forms; and a
// target no rule can be trusted to judge is refused.
func TestRuleSetSpellings(t *testing.T) {
	const (
		anth = "api.anthropic.com"
		gem  = "generativelanguage.googleapis.com"
		mis  = "api.mistral.ai"
	)
	search := `{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"}]}`
	batch := `{"requests":[{"custom_id":"a","params":{"model":"m","tools":[{"type":"web_search_20250305"}]}}]}`
	google := `{"contents":[],"tools":[{"googleSearch":{}}]}`
	for _, c := range []struct {
		name, host, method, target, body string
		hdr                              []string
		how                              string // in the reason
	}{
		{"method override header", anth, "PUT", "/v1/messages", search, []string{"X-HTTP-Method-Override", "POST"}, "the method X-Http-Method-Override names"},
		{"method override, underscore", anth, "PATCH", "/v1/messages", search, []string{"X_HTTP_Method", "post"}, "names"},
		{"method override query", anth, "GET", "/v1/messages?_method=POST", search, nil, "the method the query's _method names"},
		{"parameter in a segment", anth, "POST", "/v1;x/messages", search, nil, "path parameters (;) dropped"},
		{"double encoding", anth, "POST", "/v1/messages%252Fbatches", batch, nil, "decoded twice"},
		{"trailing dot", gem, "POST", "/v1beta/models/m:generateContent.", google, nil, "trailing dots or spaces of a segment dropped"},
		{"encoded question mark", gem, "POST", "/v1beta/models/m:generateContent%3Falt=sse", google, nil, "cut at an encoded ? or #"},
		{"fullwidth letters", anth, "POST", "/v1/%EF%BD%8Dessages", search, nil, "NFKC-normalized"},
		{"trailing slash, exact path", mis, "POST", "/v1/conversations/", `{"agent_id":"a"}`, nil, "trailing slash dropped"},
		{"repeated slashes, upper case", anth, "post", "//V1//Messages", search, nil, "repeated slashes merged"},
		{"dot segment", anth, "POST", "/v1/x/../messages", search, nil, "ambiguous"},
		{"backslash", anth, "POST", "/v1%5Cmessages", search, nil, "ambiguous"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, action := range []string{SetDeny, SetStrip} {
				j := judgeSetTarget(t, closedBook(t, action), c.host, c.method, c.target, c.body, c.hdr...)
				if j.Verdict != VerdictDeny && j.Body == nil {
					t.Errorf("%s: %s %s passes unchanged (%s %s)", action, c.method, c.target, j.Rule, j.Reason)
					continue
				}
				if action == SetDeny && !strings.Contains(j.Reason+" "+j.Spelling, c.how) {
					t.Errorf("%s: reason %q, spelling %q; want %q", action, j.Reason, j.Spelling, c.how)
				}
			}
		})
	}
	// The canonical spelling and unrelated routes are unaffected.
	for _, c := range []struct{ method, target string }{
		{"GET", "/v1/models"}, {"POST", "/v1/files"}, {"POST", "/v1/messages/x;y"}, {"PUT", "/v1/messages"},
	} {
		j := judgeSetTarget(t, closedBook(t, SetDeny), anth, c.method, c.target, `{"model":"m"}`)
		if j.Verdict != VerdictAllow {
			t.Errorf("%s %s: %s %s %s", c.method, c.target, j.Verdict, j.Rule, j.Reason)
		}
	}
}
