package conf

import (
	"net/http"
	"strings"
	"testing"
)

// issueExample is the request-level policy of the issue that asked for it.
const issueExample = `{"mode": "allowlist", "allowedHosts": ["api.anthropic.com", "github.com"],
 "inspect": {"api.anthropic.com": {"deny": [{"method": "POST", "path": "/v1/messages",
   "json": {"tools[].type": "web_search*"}}], "inject": [{"header": "x-api-key",
   "placeholder": "dm-placeholder-anthropic", "secretFile": "/etc/doorman/secrets/anthropic"}]},
  "github.com": {"allow": [{"method": "GET"}, {"path": "/myorg/*"}], "default": "deny"}}}`

func TestInspectJSONAndFileAgree(t *testing.T) {
	p, err := ParseJSON([]byte(issueExample))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.InspectedHosts(); strings.Join(got, " ") != "api.anthropic.com github.com" {
		t.Fatalf("hosts %v", got)
	}
	file := string(p.MarshalFile())
	for _, want := range []string{
		"inspect api.anthropic.com deny POST /v1/messages json:tools[].type=web_search*\n",
		"inspect api.anthropic.com inject X-Api-Key sha256:",
		"inspect github.com allow GET\n",
		"inspect github.com allow /myorg/*\n",
		"inspect github.com default deny\n",
	} {
		if !strings.Contains(file, want) {
			t.Errorf("file form lacks %q:\n%s", want, file)
		}
	}
	if strings.Contains(file, "dm-placeholder-anthropic") {
		t.Errorf("the file form holds the placeholder:\n%s", file)
	}
	q, err := ParseFile([]byte(file))
	if err != nil {
		t.Fatalf("%v\n%s", err, file)
	}
	if !q.Equal(p) {
		t.Fatalf("file form does not read back equal:\n%s", file)
	}
	js, err := p.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "dm-placeholder-anthropic") {
		t.Errorf("JSON holds the placeholder: %s", js)
	}
	r, err := ParseJSON(js)
	if err != nil || !r.Equal(p) {
		t.Fatalf("JSON does not read back equal: %v\n%s", err, js)
	}
	// An edit of the entries keeps the rules.
	if w := p.WithEntries(nil); !equalInspect(w.Inspect, p.Inspect) {
		t.Fatal("WithEntries dropped the rules")
	}
}

func TestJudge(t *testing.T) {
	p, err := ParseJSON([]byte(issueExample))
	if err != nil {
		t.Fatal(err)
	}
	api, gh := p.InspectFor("api.anthropic.com"), p.InspectFor("github.com")
	if p.InspectFor("example.com") != nil || api == nil || gh == nil {
		t.Fatal("InspectFor")
	}
	req := func(method, path, body string) *Request {
		return &Request{Method: method, Path: path, Header: http.Header{}, Body: []byte(body)}
	}
	for _, c := range []struct {
		h       *InspectHost
		r       *Request
		verdict string
		rule    string
	}{
		{api, req("POST", "/v1/messages", `{"model":"m","tools":[{"type":"bash"},{"type":"web_search_20250305","name":"web_search"}]}`), "deny", "deny POST /v1/messages json:tools[].type=web_search*"},
		{api, req("POST", "/v1/messages", `{"model":"m","tools":[{"type":"bash"}]}`), "allow", "default allow"},
		{api, req("POST", "/v1/messages", `{"model":"m"}`), "allow", "default allow"},
		{api, req("POST", "/v1/messages", `{"tools":[{"type":"bash"}],"tools":[{"type":"web_search"}]}`), "deny", "deny POST /v1/messages json:tools[].type=web_search*"},
		{api, req("POST", "/v1/messages", `not json`), "deny", "deny POST /v1/messages json:tools[].type=web_search*"},
		{api, req("GET", "/v1/models", ``), "allow", "default allow"},
		{gh, req("GET", "/other/repo", ``), "allow", "allow GET"},
		{gh, req("POST", "/myorg/repo/git-receive-pack", ``), "allow", "allow /myorg/*"},
		{gh, req("POST", "/other/repo/git-receive-pack", ``), "deny", "default deny"},
		{gh, req("POST", "/myorg", ``), "deny", "default deny"},
	} {
		if c.h.NeedsBody(c.r) != (c.h == api && c.r.Method == "POST") {
			t.Errorf("%s %s: NeedsBody wrong", c.r.Method, c.r.Path)
		}
		j := c.h.Judge(c.r)
		if j.Verdict != c.verdict || j.Rule != c.rule {
			t.Errorf("%s %s %s: got %s by %q (%s), want %s by %q", c.r.Method, c.r.Path, c.r.Body, j.Verdict, j.Rule, j.Reason, c.verdict, c.rule)
		}
	}
}

func TestRuleWords(t *testing.T) {
	for _, c := range []struct{ in, canon string }{
		{`*`, `*`},
		{`POST|GET /v1/* query:beta header:user-agent="curl *" json:a.b[0].c=x`, `GET|POST /v1/* query:beta header:User-Agent="curl *" json:a.b[0].c=x`},
		{`json:[].id=7`, `json:[].id=7`},
		{`header:X-A="a #b"`, `header:X-A="a #b"`},
	} {
		words, err := splitInspectLine(c.in)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseRuleWords(words)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if r.String() != c.canon {
			t.Errorf("%s: canonical %q, want %q", c.in, r.String(), c.canon)
		}
	}
	for _, bad := range []string{``, `post`, `/a /b`, `GET GET`, `json:a..b`, `json:a[x]`, `header:bad name=x`, `query:=x`, `json:a=`, `mode`, `GET *`} {
		words, _ := splitInspectLine(bad)
		if _, err := ParseRuleWords(words); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestInspectErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`inspect 10.0.0.1 allow GET`, "only a name"},
		{`inspect example.com:443 allow GET`, "no port"},
		{`inspect example.com allow`, "no condition"},
		{`inspect example.com frobnicate`, "want allow, deny"},
		{"inspect example.com default allow\ninspect example.com default deny", "default set twice"},
		{`inspect example.com default maybe`, "want allow or deny"},
		{`inspect example.com inject x-api-key ph relative/file`, "absolute path"},
		{`inspect example.com inject connection ph /s`, "cannot carry"},
		{`inspect example.com inject x-api-key sha256:12 /s`, "64 hex"},
		{`inspect example.com max-body -1`, "number of bytes"},
	} {
		_, err := ParseFile([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{`{"inspect": {"x.com": {"deny": [{"methods": "POST"}]}}}`, `deny[0]: "methods": unknown key`},
		{`{"inspect": {"x.com": {"allow": [{"method": "get"}]}}}`, "upper-case"},
		{`{"inspect": {"x.com": {"inject": [{"header": "a", "secretFile": "/s"}]}}}`, "empty placeholder"},
		{`{"inspect": {"*": {}}}`, "mode: open"},
	} {
		_, err := ParseJSON([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.in, err, c.want)
		}
	}
}

func TestInjectMatches(t *testing.T) {
	in := Inject{Header: "Authorization", PlaceholderSHA256: PlaceholderHash("dm-ph")}
	for _, c := range []struct {
		v, prefix string
		ok        bool
	}{
		{"dm-ph", "", true}, {"Bearer dm-ph", "Bearer ", true}, {"Bearer  dm-ph", "", false},
		{"xdm-ph", "", false}, {"dm-ph ", "", false}, {"Be arer dm-ph", "", false}, {"", "", false},
	} {
		prefix, ok := in.Matches(c.v)
		if ok != c.ok || prefix != c.prefix {
			t.Errorf("%q: %q %v", c.v, prefix, ok)
		}
	}
}

func TestWildcardInspect(t *testing.T) {
	p, err := ParseFile([]byte("*.example.com\ninspect *.example.com deny DELETE\ninspect a.example.com allow *"))
	if err != nil {
		t.Fatal(err)
	}
	if h := p.InspectFor("b.example.com"); h == nil || h.Host != "*.example.com" {
		t.Fatal("wildcard")
	}
	if h := p.InspectFor("a.example.com"); h == nil || h.Host != "a.example.com" {
		t.Fatal("exact first")
	}
	if p.InspectFor("example.com") != nil {
		t.Fatal("apex")
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		ok   bool
	}{
		{"*", "", true}, {"a*", "abc", true}, {"*c", "abc", true}, {"a*c", "ac", true}, {"a*b*c", "aXbYbZc", true},
		{"a*c", "ab", false}, {"abc", "abcd", false}, {"/x/*", "/x/", true}, {"/x/*", "/x", false}, {"**a", "bba", true},
	} {
		if Glob(c.p, c.s) != c.ok {
			t.Errorf("Glob(%q, %q) != %v", c.p, c.s, c.ok)
		}
	}
}
