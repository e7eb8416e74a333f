package conf

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// judgeTarget judges one request given as the client wrote it: method,
// target (path and query), headers and body, the way the proxy does:
// ParseTarget first (a refusal is a deny whose reason is the error).
func judgeTarget(t *testing.T, h *InspectHost, method, target string, header http.Header, body string) Judgement {
	t.Helper()
	tg, err := ParseTarget(target)
	if err != nil {
		return Judgement{Verdict: VerdictDeny, Reason: err.Error()}
	}
	q, err := url.ParseQuery(tg.RawQuery)
	if err != nil {
		t.Fatalf("%s: query %v", target, err)
	}
	if header == nil {
		header = http.Header{}
	}
	r := &Request{Method: method, Path: tg.Path, EscapedPath: tg.EscapedPath, Query: q, Header: header, Body: []byte(body)}
	h.NeedsBody(r)
	return h.Judge(r)
}

func hostOf(t *testing.T, lines ...string) *InspectHost {
	t.Helper()
	var file strings.Builder
	file.WriteString("api.example.com\n")
	for _, l := range lines {
		file.WriteString("inspect api.example.com " + l + "\n")
	}
	p, err := ParseFile([]byte(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	return p.InspectFor("api.example.com")
}

func TestParseTarget(t *testing.T) {
	for _, c := range []struct{ in, esc, path, query, err string }{
		{in: "/v1/messages", esc: "/v1/messages", path: "/v1/messages"},
		{in: "/v1/messages?beta=true", esc: "/v1/messages", path: "/v1/messages", query: "beta=true"},
		{in: "//v1/messages", esc: "//v1/messages", path: "//v1/messages"},
		{in: "/%761/m%65ssages", esc: "/v1/messages", path: "/v1/messages"},
		{in: "/a%2fb%2Fc", esc: "/a%2Fb%2Fc", path: "/a/b/c"},
		{in: "/a%7e%7E%2D%5f%2e", esc: "/a~~-_.", path: "/a~~-_."},
		{in: "/a%252Fb", esc: "/a%252Fb", path: "/a%2Fb"},
		{in: "/caf\xc3\xa9/{x}|^`\"<>[]", esc: "/caf%C3%A9/%7Bx%7D%7C%5E%60%22%3C%3E[]", path: "/caf\u00e9/{x}|^`\"<>[]"},
		{in: "/a;b=c/d:e@f!$&'()*+,=", esc: "/a;b=c/d:e@f!$&'()*+,=", path: "/a;b=c/d:e@f!$&'()*+,="},
		{in: "/100%25", esc: "/100%25", path: "/100%"},
		{in: "/x%3Fy%23z", esc: "/x%3Fy%23z", path: "/x?y#z"},
		{in: "/v1/messages#frag", err: "fragment"},
		{in: "/v1/mess ages", err: "space or control"},
		{in: "/v1/\x01", err: "space or control"},
		{in: "/v1/%zz", err: "malformed"},
		{in: "/v1/%4", err: "malformed"},
		{in: "*", err: "not a path"},
		{in: "v1/messages", err: "not a path"},
		{in: "/a/../b", err: "dot segment"},
		{in: "/a/./b", err: "dot segment"},
		{in: "/a/%2e%2E/b", err: "dot segment"},
		{in: "/a/.%2e/b", err: "dot segment"},
		{in: "/a/..;x/b", err: "dot segment"},
		{in: "/a/..%20/b", err: "dot segment"},
		{in: "/a/.../b", err: "dot segment"},
		{in: "/a/..", err: "dot segment"},
		{in: "/a/%252e%252e/b", err: "dot segment in the path (once decoded twice)"},
		{in: "/a/%EF%BC%8E%EF%BC%8E/b", err: "dot segment in the path (once NFKC-normalized)"},
		{in: "/a\\b", err: "backslash"},
		{in: "/a%5Cb", err: "backslash"},
		{in: "/a%5cb", err: "backslash"},
		{in: "/a%255Cb", err: "backslash in the path (once decoded twice)"},
		{in: "/a%EF%BC%BCb", err: "backslash in the path (once NFKC-normalized)"},
		{in: "/a%00b", err: "control character"},
		{in: "/a%0Ab", err: "control character"},
		{in: "/a%7Fb", err: "control character"},
		{in: "/a%C2%85b", err: "control character"},
		{in: "/a%2500b", err: "control character in the path (once decoded twice)"},
		{in: "/a%C0%AFb", err: "not UTF-8"},
		{in: "/a%E0%80%AFb", err: "not UTF-8"},
		{in: "/a%C0%2Eb", err: "not UTF-8"},
		{in: "/caf%E9", err: "not UTF-8"},
		{in: "/a%25252Fb", err: "three times"},
	} {
		tg, err := ParseTarget(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if tg.EscapedPath != c.esc || tg.Path != c.path || tg.RawQuery != c.query {
			t.Errorf("%q: %q %q %q, want %q %q %q", c.in, tg.EscapedPath, tg.Path, tg.RawQuery, c.esc, c.path, c.query)
		}
		// net/url sends the normalized spelling as it is.
		if got := (&url.URL{Path: tg.Path, RawPath: tg.EscapedPath}).EscapedPath(); got != tg.EscapedPath {
			t.Errorf("%q: net/url would send %q, not %q", c.in, got, tg.EscapedPath)
		}
	}
}

// spelling is one way of writing a request.
type spelling struct {
	method, target string
	header         http.Header
	how            string // what the reason must say ("" if nothing)
}

// denySpellings are spellings of POST /v1/messages that origins route to
// its handler.
var denySpellings = []spelling{
	{"POST", "/v1/messages", nil, ""},
	{"POST", "/v1/messages?beta=true", nil, ""},
	{"POST", "/v1/messages?/v1/models", nil, ""},
	{"POST", "/v1%2Fmessages", nil, ""},
	{"POST", "/v1%2fmessages", nil, ""},
	{"POST", "/%761/messages", nil, ""},
	{"POST", "/v1/m%65ssages", nil, ""},
	{"POST", "/v1/messages/", nil, "trailing slash dropped"},
	{"POST", "/v1/messages%2F", nil, "trailing slash dropped"},
	{"POST", "//v1/messages", nil, "repeated slashes merged"},
	{"POST", "/v1//messages", nil, "repeated slashes merged"},
	{"POST", "///v1///messages//", nil, "repeated slashes merged, trailing slash dropped"},
	{"POST", "/v1%2F%2Fmessages", nil, "repeated slashes merged"},
	{"POST", "/v1/messages;x", nil, "path parameters (;) dropped"},
	{"POST", "/v1;x/messages", nil, "path parameters (;) dropped"},
	{"POST", "/v1;a=b/messages;jsessionid=1/", nil, "path parameters (;) dropped"},
	{"POST", "/v1/messages%3Bx", nil, "path parameters (;) dropped"},
	{"POST", "/v1/messages%3Fx", nil, "cut at an encoded ? or #"},
	{"POST", "/v1/messages%23x", nil, "cut at an encoded ? or #"},
	{"POST", "/v1/messages.", nil, "trailing dots or spaces of a segment dropped"},
	{"POST", "/v1./messages..", nil, "trailing dots or spaces of a segment dropped"},
	{"POST", "/v1/messages%20", nil, "trailing dots or spaces of a segment dropped"},
	{"POST", "/v1/messages%C2%A0", nil, "trailing dots or spaces of a segment dropped"},
	{"POST", "/v1/messages;x./", nil, "path parameters (;) dropped"},
	{"POST", "/V1/MESSAGES", nil, "case folded"},
	{"POST", "/v1/Messages/", nil, "trailing slash dropped, case folded"},
	{"POST", "/v1/me%C5%BF%C5%BFages", nil, "case folded"},    // 'ſ', which upper-cases to 'S'
	{"POST", "/v1/%EF%BD%8Dessages", nil, "NFKC-normalized"},  // fullwidth 'ｍ'
	{"POST", "/v1%EF%BC%8Fmessages", nil, "NFKC-normalized"},  // fullwidth '／'
	{"POST", "/v1/%E2%85%BFessages", nil, "NFKC-normalized"},  // small roman numeral 'ⅿ'
	{"POST", "/v1%252Fmessages", nil, "decoded twice"},        // %2F encoded again
	{"POST", "/%25761/messages", nil, "decoded twice"},        // %76 encoded again
	{"POST", "/v1/messages%252F", nil, "decoded twice"},       // trailing slash, encoded twice
	{"POST", "/v1/messages%253Bx", nil, "decoded twice"},      // ';', encoded twice
	{"post", "/v1/messages", nil, "the method in upper case"}, // methods are case-sensitive; many frameworks upper-case them
	{"Post", "/V1//Messages;x/", nil, "the method in upper case"},
	{"PUT", "/v1/messages", http.Header{"X-Http-Method-Override": {"POST"}}, "the method X-Http-Method-Override names"},
	{"PUT", "/v1/messages", http.Header{"X_http_method_override": {"post"}}, "names"},
	{"GET", "/v1/messages", http.Header{"X-Method-Override": {"GET, POST"}}, "names"},
	{"GET", "/v1/messages", http.Header{"X-Http-Method": {"POST"}}, "names"},
	{"GET", "/v1/messages?_method=POST", nil, "the method the query's _method names"},
	{"GET", "/v1/messages?_METHOD=post", nil, "names"},
	// Refused outright, whatever the rules.
	{"POST", "/v1/messages#x", nil, "fragment"},
	{"POST", "/v1/x/../messages", nil, "dot segment"},
	{"POST", "/v1/x/%2e%2e/messages", nil, "dot segment"},
	{"POST", "/v1/x/..;/messages", nil, "dot segment"},
	{"POST", "/v1/x/%252e%252e/messages", nil, "dot segment"},
	{"POST", "/v1\\messages", nil, "backslash"},
	{"POST", "/v1%5Cmessages", nil, "backslash"},
	{"POST", "/v1%5cmessages", nil, "backslash"},
	{"POST", "/v1/messages%00", nil, "control character"},
	{"POST", "/v1/messages%00.json", nil, "control character"},
	{"POST", "/v1/messages%09", nil, "control character"},
	{"POST", "/v1%C0%AFmessages", nil, "not UTF-8"},
	{"POST", "/v1/messages%25252F", nil, "three times"},
}

// TestDenyEverySpelling: a deny rule holds for every spelling of its
// request, and the reason says which spelling it was; other requests
// pass.
func TestDenyEverySpelling(t *testing.T) {
	h := hostOf(t, "deny POST /v1/messages")
	for _, c := range denySpellings {
		j := judgeTarget(t, h, c.method, c.target, c.header, "")
		if j.Verdict != VerdictDeny {
			t.Errorf("%s %s %v: %s by %q, want deny", c.method, c.target, c.header, j.Verdict, j.Rule)
			continue
		}
		if c.how == "" && j.Reason != "" || !strings.Contains(j.Reason, c.how) {
			t.Errorf("%s %s %v: reason %q, want one that says %q", c.method, c.target, c.header, j.Reason, c.how)
		}
	}
	for _, c := range []spelling{
		{"POST", "/v1/models", nil, ""},
		{"POST", "/v1/messages2", nil, ""},
		{"POST", "/v1/messagesx", nil, ""},
		{"POST", "/v1/message", nil, ""},
		{"POST", "/v1/messages/batches", nil, ""},
		{"POST", "/v2/messages", nil, ""},
		{"POST", "/v1/mess%C3%A4ges", nil, ""},
		{"POST", "/v1/messages%2541", nil, ""}, // decodes twice to /v1/messagesA
		{"GET", "/v1/messages", nil, ""},
		{"PUT", "/v1/messages", http.Header{"X-Override": {"POST"}}, ""},
	} {
		if j := judgeTarget(t, h, c.method, c.target, c.header, ""); j.Verdict != VerdictAllow || j.Reason != "" {
			t.Errorf("%s %s: %s by %q (%s), want allow", c.method, c.target, j.Verdict, j.Rule, j.Reason)
		}
	}
}

// TestDenyUnicodeCase: origins that compare paths in either case see the
// Kelvin sign as 'k' and the dotless 'ı' as 'i'.
func TestDenyUnicodeCase(t *testing.T) {
	h := hostOf(t, "deny /keys/*", "deny /admin")
	for _, target := range []string{"/%E2%84%AAeys/1", "/KEYS/1", "/adm%C4%B1n", "/ADM%C4%B0N", "/%EF%BD%81dmin", "/keys"} {
		if j := judgeTarget(t, h, "GET", target, nil, ""); j.Verdict != VerdictDeny || !strings.Contains(j.Reason, "matched another spelling") {
			t.Errorf("%s: %s (%s)", target, j.Verdict, j.Reason)
		}
	}
}

// TestDenyHeadAsGet: a HEAD is a GET to most frameworks.
func TestDenyHeadAsGet(t *testing.T) {
	h := hostOf(t, "deny GET /secret")
	if j := judgeTarget(t, h, "HEAD", "/secret", nil, ""); j.Verdict != VerdictDeny || !strings.Contains(j.Reason, "HEAD") {
		t.Errorf("HEAD: %s (%s)", j.Verdict, j.Reason)
	}
	if j := judgeTarget(t, h, "HEAD", "/public", nil, ""); j.Verdict != VerdictAllow {
		t.Errorf("HEAD /public: %s", j.Verdict)
	}
}

// TestAllowOnlyTheCanonicalSpelling: on a host whose default is deny, an
// allow rule matches the canonical spelling of a request and nothing
// else; every other spelling is refused, saying why.
func TestAllowOnlyTheCanonicalSpelling(t *testing.T) {
	h := hostOf(t, "allow POST /v1/messages", "allow GET /docs/*", "default deny")
	for _, c := range []spelling{
		{"POST", "/v1/messages", nil, ""},
		{"POST", "/v1/messages?beta=true", nil, ""},
		{"POST", "/v1/m%65ssages", nil, ""}, // RFC 3986 6.2.2.2: forwarded as /v1/messages
		{"GET", "/docs/a/b", nil, ""},
		{"GET", "/docs/", nil, ""},
		{"GET", "/docs/caf%C3%A9", nil, ""},
		{"GET", "/docs/a", http.Header{"X-Http-Method-Override": {"GET"}}, ""},
	} {
		if j := judgeTarget(t, h, c.method, c.target, c.header, ""); j.Verdict != VerdictAllow {
			t.Errorf("%s %s: %s by %q (%s), want allow", c.method, c.target, j.Verdict, j.Rule, j.Reason)
		}
	}
	for _, c := range []spelling{
		{"POST", "/v1/messages/", nil, ""},
		{"POST", "/V1/messages", nil, ""},
		{"HEAD", "/docs/a", nil, ""},
		{"GET", "/Docs/a", nil, ""},
		{"POST", "//v1/messages", nil, "repeated slashes"},
		{"GET", "/docs//a", nil, "repeated slashes"},
		{"GET", "/docs/a;x", nil, "a path parameter (;)"},
		{"GET", "/docs/secret.key;.txt", nil, "a path parameter (;)"},
		{"GET", "/docs/a%3Bx", nil, "a path parameter (;)"},
		{"GET", "/docs/a%2Fb", nil, "an encoded slash (%2F)"},
		{"GET", "/docs/a%2fb", nil, "an encoded slash (%2F)"},
		{"GET", "/docs/a%252Fb", nil, "a percent-encoded %"},
		{"GET", "/docs/a%2541", nil, "a percent-encoded %"},
		{"GET", "/docs/a%3Fb", nil, "an encoded ? or #"},
		{"GET", "/docs/a%23b", nil, "an encoded ? or #"},
		{"GET", "/docs/a.", nil, "a segment that ends in a dot or a space"},
		{"GET", "/docs/a%20", nil, "a segment that ends in a dot or a space"},
		{"GET", "/docs/%EF%BD%81", nil, "NFKC"},
		{"get", "/docs/a", nil, "a method not in upper case"},
		{"GET", "/docs/a", http.Header{"X-Http-Method-Override": {"DELETE"}}, "a method override"},
		{"GET", "/docs/a", http.Header{"X_method_override": {"delete"}}, "a method override"},
		{"GET", "/docs/a?_method=DELETE", nil, "a method override"},
		{"GET", "/docs/../admin", nil, "dot segment"},
		{"GET", "/docs/..;/admin", nil, "dot segment"},
		{"GET", "/docs/%2e%2e/admin", nil, "dot segment"},
		{"GET", "/docs/a\\..\\..\\admin", nil, "backslash"},
		{"GET", "/docs/a#b", nil, "fragment"},
	} {
		j := judgeTarget(t, h, c.method, c.target, c.header, "")
		if j.Verdict != VerdictDeny || !strings.Contains(j.Reason, c.how) {
			t.Errorf("%s %s %v: %s by %q (%s), want deny saying %q", c.method, c.target, c.header, j.Verdict, j.Rule, j.Reason, c.how)
		}
	}
}

// TestAllowWithoutPathOrMethod: a rule without a path condition has no
// path to misread, and one without a method none to misread: they match
// whatever the spelling of those.
func TestAllowWithoutPathOrMethod(t *testing.T) {
	all := hostOf(t, "allow *")
	methods := hostOf(t, "allow GET")
	paths := hostOf(t, "allow /docs/*")
	for _, c := range []struct {
		h     *InspectHost
		sp    spelling
		allow bool
	}{
		{all, spelling{"post", "//v1;x/messages%2F", nil, ""}, true},
		{all, spelling{"GET", "/a/../b", nil, ""}, false},
		{methods, spelling{"GET", "//v1/messages", nil, ""}, true},
		{methods, spelling{"get", "/v1/messages", nil, ""}, false},
		{methods, spelling{"GET", "/v1", http.Header{"X-Http-Method-Override": {"DELETE"}}, ""}, false},
		{paths, spelling{"delete", "/docs/a", nil, ""}, true},
		{paths, spelling{"GET", "/docs//a", nil, ""}, false},
	} {
		if j := judgeTarget(t, c.h, c.sp.method, c.sp.target, c.sp.header, ""); (j.Verdict == VerdictAllow) != c.allow {
			t.Errorf("%s: %s %s %v: %s (%s)", c.h.Lines(), c.sp.method, c.sp.target, c.sp.header, j.Verdict, j.Reason)
		}
	}
}

func TestQueryAndHeaderSpellings(t *testing.T) {
	deny := hostOf(t, "deny query:beta", "deny query:x_debug", "deny header:x-debug", "deny header:anthropic-beta=mcp-client-*")
	for _, c := range []spelling{
		{"GET", "/?beta=1", nil, ""},
		{"GET", "/?BETA=1", nil, ""},
		{"GET", "/?B%45TA=1", nil, ""},
		// Rails, Rack and PHP read "beta[]" and "beta[x]" as beta.
		{"GET", "/?beta[]=1", nil, ""},
		{"GET", "/?beta%5B%5D=1", nil, ""},
		{"GET", "/?Beta[x]=1", nil, ""},
		// PHP reads '.', ' ' and a '[' it does not close in a key as '_'.
		{"GET", "/?x.debug=1", nil, ""},
		{"GET", "/?x+debug=1", nil, ""},
		{"GET", "/?x[debug=1", nil, ""},
		{"GET", "/?x.debug[]=1", nil, ""},
		{"GET", "/", http.Header{"X-Debug": {"1"}}, ""},
		{"GET", "/", http.Header{"X_debug": {"1"}}, ""},
		{"GET", "/", http.Header{"X_DEBUG": {"1"}}, ""},
		// A list field: origins read each element.
		{"GET", "/", http.Header{"Anthropic-Beta": {"files-api-2025-04-14, mcp-client-2025-04-04"}}, ""},
		{"GET", "/", http.Header{"Anthropic-Beta": {"x,mcp-client-2025-04-04 "}}, ""},
	} {
		if j := judgeTarget(t, deny, c.method, c.target, c.header, ""); j.Verdict != VerdictDeny {
			t.Errorf("%s %v: %s", c.target, c.header, j.Verdict)
		}
	}
	allow := hostOf(t, "allow query:ref=main", "allow header:x-env=prod", "default deny")
	for _, c := range []struct {
		sp    spelling
		allow bool
	}{
		{spelling{"GET", "/?ref=main", nil, ""}, true},
		{spelling{"GET", "/?ref=main&ref=evil", nil, ""}, false},
		{spelling{"GET", "/?ref=main&REF=evil", nil, ""}, false},
		{spelling{"GET", "/?REF=main", nil, ""}, false},
		{spelling{"GET", "/?ref=main&ref[]=evil", nil, ""}, false},
		{spelling{"GET", "/?ref=main&ref[x]=evil", nil, ""}, false},
		{spelling{"GET", "/?ref[]=main", nil, ""}, false},
		{spelling{"GET", "/", http.Header{"X-Env": {"prod"}}, ""}, true},
		{spelling{"GET", "/", http.Header{"X-Env": {"prod", "dev"}}, ""}, false},
		{spelling{"GET", "/", http.Header{"X-Env": {"prod"}, "X_env": {"dev"}}, ""}, false},
		{spelling{"GET", "/", http.Header{"X_env": {"prod"}}, ""}, false},
	} {
		if j := judgeTarget(t, allow, c.sp.method, c.sp.target, c.sp.header, ""); (j.Verdict == VerdictAllow) != c.allow {
			t.Errorf("%s %v: %s", c.sp.target, c.sp.header, j.Verdict)
		}
	}
}

// TestJSONSpellings: a body condition of a deny rule holds for keys in
// any case (Go's encoding/json reads "TOOLS" and "toolſ" as "tools"),
// for escaped keys, and for a body that is not strict JSON whatever its
// Content-Type; one of an allow rule only where no key differs from
// another in case alone.
func TestJSONSpellings(t *testing.T) {
	deny := hostOf(t, "deny POST /v1/messages json:tools[].type=web_search*")
	for _, body := range []string{
		`{"tools":[{"type":"web_search_20250305"}]}`,
		`{"TOOLS":[{"type":"web_search_20250305"}]}`,
		`{"tools":[{"Type":"web_search_20250305"}]}`,
		`{"tool` + "\u017f" + `":[{"type":"web_search_20250305"}]}`,
		`{"t\u006fols":[{"typ\u0065":"web\u005fsearch"}]}`,
		`{"tools":[],"TOOLS":[{"type":"web_search"}]}`,
		`{"tools":[],"t\u006fols":[{"type":"web_search"}]}`,
		"\xef\xbb\xbf" + `{"tools":[{"type":"web_search"}]}`,
		`{"tools":[{"type":"web_search"}]} {"x":1}`,
		`{"tools":[{"type":"web_search"}],}`,
		"\xff\xfe{\x00}\x00",
		`tools=web_search`,
		``,
	} {
		for _, target := range []string{"/v1/messages", "/v1/messages/", "/V1//messages;x"} {
			if j := judgeTarget(t, deny, "POST", target, nil, body); j.Verdict != VerdictDeny {
				t.Errorf("%s %q: %s (%s)", target, body, j.Verdict, j.Reason)
			}
		}
	}
	if j := judgeTarget(t, deny, "POST", "/v1/messages", nil, `{"tools":[{"type":"bash"}],"Tool":[{"type":"web_search"}]}`); j.Verdict != VerdictAllow {
		t.Errorf("another key: %s", j.Verdict)
	}
	allow := hostOf(t, "allow POST /v1/messages json:model=claude-*", "default deny")
	for body, ok := range map[string]bool{
		`{"model":"claude-x"}`:                true,
		`{"model":"claude-x","MODEL":"gpt"}`:  false,
		`{"Model":"claude-x"}`:                false,
		`{"model":"claude-x","model":"gpt"}`:  false,
		`{"model":"claude-x","mode\u013e":1}`: true,
	} {
		if j := judgeTarget(t, allow, "POST", "/v1/messages", nil, body); (j.Verdict == VerdictAllow) != ok {
			t.Errorf("%s: %s (%s)", body, j.Verdict, j.Reason)
		}
	}
}

// TestNormalizePath: the loosest spelling deny rules match.
func TestNormalizePath(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/messages":             "/v1/messages",
		"//V1//Messages;x/":        "/v1/messages/",
		"/v1/messages.%20":         "/v1/messages",
		"/v1%2Fmessages?x":         "/v1/messages",
		"/v1/me\u017f\u017fages":   "/v1/messages",
		"/v1/\uff4dessages":        "/v1/messages",
		"/v1/messages%3Bx/":        "/v1/messages/",
		"/\u212aeys/adm\u0131n":    "/keys/admin",
		"/a/b%252F%2525%252Fc.txt": "/a/b/%/c.txt",
	} {
		if got := NormalizePath(in); got != want {
			t.Errorf("NormalizePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkJudgeSpellings: what judging costs for the canonical spelling
// (the common case), a spelling with every ambiguity, and the longest
// path a request head holds (64 KiB) full of them.
func BenchmarkJudgeSpellings(b *testing.B) {
	h := &InspectHost{Host: "x", Deny: []Rule{{Methods: []string{"POST"}, Path: "/v1/messages"}, {Path: "/admin/*"}},
		Allow: []Rule{{Methods: []string{"GET"}, Path: "/docs/*"}}, Default: VerdictDeny}
	long := "/" + strings.Repeat("A%2541;x.%20/%EF%BD%81//", 64<<10/25)
	for _, c := range []struct{ name, method, target string }{
		{"canonical", "GET", "/docs/guide/intro"},
		{"ambiguous", "post", "//V1/me%C5%BF%C5%BFages;x.%20/"},
		{"long", "GET", long},
	} {
		tg, err := ParseTarget(c.target)
		if err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := &Request{Method: c.method, Path: tg.Path, EscapedPath: tg.EscapedPath, Header: http.Header{}}
				h.Judge(r)
			}
		})
	}
}
