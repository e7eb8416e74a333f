package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/runner"
)

// inspectSecret and inspectPlaceholder: the real credential, on the host
// only, and what the sandbox holds instead.
const (
	inspectSecret      = "sk-real-9f8e7d6c5b4a39281706"
	inspectPlaceholder = "dm-placeholder-anthropic"
)

// inspectScript runs, as nobody inside `doorman run`, every client the
// issue names against the inspected api host, each printing a tagged
// line the test reads. The clients trust doorman's CA only through the
// bundle doorman run mounted and the variables it set.
const inspectScript = `
api=https://` + apiName + `
tool='{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"}]}'
notool='{"model":"m","tools":[{"type":"bash_20250124","name":"bash"}]}'
echo "ENV $(env | grep -c ` + inspectPlaceholder + `) $(env | grep -c ` + inspectSecret + `)"
echo "SECRETFILE $(cat "$SECRETFILE" >/dev/null 2>&1 && echo readable || echo unreadable)"
echo "CURL1 $(curl -sS --http1.1 -H "x-api-key: $DM_KEY" $api/dm/headers)"
echo "CURL1DENY $(curl -sS --http1.1 -o /dev/null -w '%{http_code} %{http_version}' -H 'content-type: application/json' -d "$tool" $api/v1/messages)"
echo "CURL2DENY $(curl -sS --http2 -o /dev/null -w '%{http_code} %{http_version}' -H 'content-type: application/json' -d "$tool" $api/v1/messages)"
echo "CURL2BODY $(curl -sS --http2 -H 'content-type: application/json' -d "$tool" $api/v1/messages)"
echo "CURLTEXT $(curl -sS --http2 -w ' %{http_code} %{content_type}' -d 'a=1' $api/v1/messages | tr '\n' ' ')"
echo "CURL2PASS $(curl -sS --http2 -w ' %{http_code}' -H 'content-type: application/json' -d "$notool" $api/v1/messages)"
echo "BIG $(/usr/bin/python3 -c 'print("{\"a\":\"" + "x"*1200000 + "\"}")' | curl -sS -o /dev/null -w '%{http_code}' -H 'content-type: application/json' --data-binary @- $api/v1/messages)"
/usr/bin/python3 - <<'PY'
import json, os, ssl, socket, urllib.request
api = "https://` + apiName + `"
tool = {"model": "m", "tools": [{"type": "web_search_20250305"}]}
def post(body):
    r = urllib.request.Request(api + "/v1/messages", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        return urllib.request.urlopen(r, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
print("URLLIB", post(tool), post({"model": "m"}))
r = urllib.request.Request(api + "/dm/headers", headers={"authorization": "Bearer " + os.environ["DM_KEY"]})
print("URLLIBHDR", json.loads(urllib.request.urlopen(r, timeout=10).read())["headers"].get("Authorization"))
import requests
print("REQUESTS", requests.post(api + "/v1/messages", json=tool, timeout=10).status_code,
      requests.post(api + "/v1/messages", json={"model": "m"}, timeout=10).status_code,
      requests.post(api + "/v1/messages", json=tool, timeout=10).json()["error"]["rule"])
ctx = ssl.create_default_context()
s = ctx.wrap_socket(socket.create_connection(("` + apiName + `", 443), timeout=10), server_hostname="` + apiName + `")
s.sendall(b"GET /dm/ws HTTP/1.1\r\nHost: ` + apiName + `\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
s.sendall(b"hello-ws")
echo = b""
while len(echo) < 8:
    echo += s.recv(8 - len(echo))
print("WS", head.split(b"\r\n")[0].decode(), echo.decode())
PY
node -e '
const api = "https://` + apiName + `/v1/messages";
const post = (b) => fetch(api, {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(b)}).then(r => r.status);
Promise.all([post({tools: [{type: "web_search_1"}]}), post({model: "m"})]).then(s => console.log("NODE", s.join(" ")), e => console.log("NODE error", e.cause || e));
'
"$GOCLIENT" check $api
echo "PLAIN $(openssl s_client -connect ` + plainName + `:443 -servername ` + plainName + ` </dev/null 2>/dev/null | grep -m1 '^issuer=')"
echo "PINNED $(curl -sS --cacert "$TESTNET_CA" -o /dev/null -w '%{http_code}' $api/dm/headers 2>&1 | head -c 200)"
`

const (
	plainName = "plain.example.test"
)

// TestRunInspect drives real clients (curl over HTTP/1.1 and HTTP/2, Go's
// net/http over both, Python's urllib and requests, Node's fetch, a raw
// WebSocket) inside
// `doorman run` against an inspected host of the fake internet, and an
// uninspected one beside it.
func TestRunInspect(t *testing.T) {
	requireInspectClients(t)
	e := newRunEnv(t)
	e.net.AddHost(plainName, otherAddr)
	dir := t.TempDir()
	secretDir := filepath.Join(dir, "secrets")
	os.Mkdir(secretDir, 0o700)
	secretFile := filepath.Join(secretDir, "anthropic")
	if err := os.WriteFile(secretFile, []byte(inspectSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caRoot := filepath.Join(dir, "ca")
	policy := filepath.Join(dir, "policy")
	os.WriteFile(policy, []byte(strings.Join([]string{
		apiName, plainName,
		"inspect " + apiName + " deny POST /v1/messages json:tools[].type=web_search*",
		"inspect " + apiName + " inject x-api-key " + inspectPlaceholder + " " + secretFile,
		"inspect " + apiName + " inject authorization " + inspectPlaceholder + " " + secretFile,
		"",
	}, "\n")), 0o644)
	public, err := os.MkdirTemp("", "dm-inspect-ca-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(public)
	os.Chmod(public, 0o755)
	testCA := e.net.WriteCA(public)
	goClient := buildInspectClient(t, public)

	name := runName()
	flags := []string{"--policy", policy, "--ca-dir", caRoot, "--upstream-ca-file", e.caFile, "--user", "nobody"}
	r := e.run(name, flags, "env", "DM_KEY="+inspectPlaceholder, "SECRETFILE="+secretFile, "TESTNET_CA="+testCA,
		"GOCLIENT="+goClient, "HOME=/tmp", "sh", "-c", inspectScript)
	out := r.stdout
	t.Logf("%s", out)
	line := func(tag string) string {
		for _, l := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(l, tag+" "); ok {
				return rest
			}
		}
		t.Errorf("no %s line; stderr %q", tag, r.stderr)
		return ""
	}
	checks := []struct{ tag, want string }{
		{"ENV", "1 0"},
		{"SECRETFILE", "unreadable"},
		{"CURL1DENY", "403 1.1"},
		{"CURL2DENY", "403 2"},
		{"CURL2PASS", apiName},
		{"BIG", "413"},
		{"URLLIB", "403 200"},
		{"URLLIBHDR", "Bearer " + inspectSecret},
		{"REQUESTS", "403 200 deny POST /v1/messages json:tools[].type=web_search*"},
		{"WS", "HTTP/1.1 101 Switching Protocols hello-ws"},
		{"NODE", "403 200"},
		{"PINNED", "curl: (60) SSL certificate problem"},
		{"GOH2HDR", "HTTP/2.0 200 OK upstream=HTTP/"},
		{"GOH1HDR", "HTTP/1.1 200 OK upstream=HTTP/"},
		{"GOH2PASS", "200 text/plain; charset=utf-8 " + apiName + " "},
		{"GOH1PASS", "200 text/plain; charset=utf-8 " + apiName + " "},
	}
	for _, c := range checks {
		if got := line(c.tag); !strings.Contains(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.tag, got, c.want)
		}
	}
	if got := line("CURL1"); !strings.Contains(got, `"X-Api-Key":["`+inspectSecret+`"]`) || !strings.Contains(got, `"proto":"HTTP/`) {
		t.Errorf("curl --http1.1: the injected header did not reach the server: %q", got)
	}
	for _, tag := range []string{"GOH2HDR", "GOH1HDR"} {
		if got := line(tag); !strings.HasSuffix(got, " key="+inspectSecret) {
			t.Errorf("Go's net/http (%s): the injected header did not reach the server: %q", tag, got)
		}
	}
	for _, tag := range []string{"GOH2DENY", "GOH1DENY"} {
		got := line(tag)
		for _, want := range []string{"403 application/json", `"host":"` + apiName + `"`, `"sandbox":"` + name + `"`,
			`"rule":"deny POST /v1/messages json:tools[].type=web_search*"`} {
			if !strings.Contains(got, want) {
				t.Errorf("Go's net/http (%s): the refusal lacks %s: %q", tag, want, got)
			}
		}
	}
	// A body the rule cannot read (a form, not JSON) is refused, and
	// the refusal of a request that was not JSON is text.
	if got := line("CURLTEXT"); !strings.HasSuffix(got, " 403 text/plain; charset=utf-8") ||
		!strings.Contains(got, `"`+apiName+`"`) || !strings.Contains(got, `sandbox "`+name+`"`) {
		t.Errorf("the refusal of a form body: %q", got)
	}
	if got := line("CURL2BODY"); !strings.Contains(got, `"sandbox":"`+name+`"`) || !strings.Contains(got, `"host":"`+apiName+`"`) {
		t.Errorf("the refusal does not name the sandbox and host: %q", got)
	}
	if !strings.Contains(out, apiName+" ") || !strings.Contains(out, "POST /v1/messages\n 200") {
		t.Errorf("the request without the tool was not answered by the host")
	}
	// The uninspected host is spliced: the client sees the origin's own
	// certificate, issued by the fake internet's CA, not doorman's.
	if got := line("PLAIN"); !strings.Contains(got, "doorman testnet CA") {
		t.Errorf("uninspected host's certificate issuer: %q", got)
	}

	// Secrets and placeholders appear in no log, CA or state file, and
	// in none of doorman's output.
	for _, where := range []string{e.logDir, caRoot, e.stateDir} {
		filepath.Walk(where, func(p string, fi os.FileInfo, err error) error {
			if err != nil || !fi.Mode().IsRegular() {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, s := range []string{inspectSecret, inspectPlaceholder} {
				if bytes.Contains(data, []byte(s)) {
					t.Errorf("%s holds %q", p, s)
				}
			}
			return nil
		})
	}
	if strings.Contains(r.stderr, inspectSecret) {
		t.Errorf("doorman's stderr holds the secret")
	}
	log, _ := os.ReadFile(filepath.Join(e.logDir, name+"-eth0.log"))
	for _, want := range []string{`"msg":"request"`, `"method":"POST"`, `"path":"/v1/messages"`, `"status":403`, `"status":413`,
		`"rule":"deny POST /v1/messages json:tools[].type=web_search*"`, decisionlog.ReasonClientTLS} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("decision log lacks %s", want)
		}
	}

	// The run's CA is constrained: a leaf for another name does not
	// verify (openssl verify), one for the inspected host does.
	caDir := filepath.Join(caRoot, runner.DefaultBridge)
	for name, ok := range map[string]bool{apiName: true, evilName: false} {
		leaf, err := ca.MintFor(caDir, name)
		if err != nil {
			t.Fatal(err)
		}
		lf := filepath.Join(dir, "leaf.pem")
		os.WriteFile(lf, leaf, 0o644)
		out, err := exec.Command("openssl", "verify", "-CAfile", filepath.Join(caDir, ca.CertFile), lf).CombinedOutput()
		if (err == nil) != ok {
			t.Errorf("openssl verify of a leaf for %s: %v\n%s", name, err, out)
		}
	}
	e.assertNothingLeft(name)
}

// TestRunInspectStream: a streamed response's first event reaches a
// client inside the sandbox while the server still holds the stream open.
func TestRunInspectStream(t *testing.T) {
	requireInspectClients(t)
	e := newRunEnv(t)
	policy := filepath.Join(t.TempDir(), "policy")
	os.WriteFile(policy, []byte(apiName+"\ninspect "+apiName+" allow GET\n"), 0o644)
	name := runName()
	s := e.start(name, []string{"--policy", policy, "--ca-dir", filepath.Join(t.TempDir(), "ca"), "--upstream-ca-file", e.caFile},
		"sh", "-c", "curl -sSN --http2 https://"+apiName+testnet.StreamPath+" | { read -r first; echo \"ready $first\"; cat; }")
	if strings.Join(s.ready, " ") != "data: first" {
		t.Fatalf("first event: %q", s.ready)
	}
	// Only now may the server finish.
	e.api.ReleaseStreams()
	code, rest := s.wait(t)
	if code != 0 || !strings.Contains(rest, "data: last") {
		t.Fatalf("the rest of the stream: exit %d, %q", code, rest)
	}
	e.assertNothingLeft(name)
}

// TestRunInspectMemory: a process inside the sandbox that has sent the
// placeholder, and whose request reached the server with the real
// credential, holds only the placeholder: not in its environment, not
// anywhere in its memory (read from the host through /proc/PID/mem).
func TestRunInspectMemory(t *testing.T) {
	e := newRunEnv(t)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "anthropic")
	if err := os.WriteFile(secretFile, []byte(inspectSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy")
	os.WriteFile(policy, []byte(apiName+"\ninspect "+apiName+" inject x-api-key "+inspectPlaceholder+" "+secretFile+"\n"), 0o644)
	public, err := os.MkdirTemp("", "dm-inspect-mem-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(public) })
	os.Chmod(public, 0o755)
	goClient := buildInspectClient(t, public)

	name := runName()
	s := e.start(name, []string{"--policy", policy, "--ca-dir", filepath.Join(dir, "ca"), "--upstream-ca-file", e.caFile, "--user", "nobody"},
		"env", "DM_KEY="+inspectPlaceholder, "HOME=/tmp", goClient, "hold", "https://"+apiName)
	pid := readyPID(t, s)
	sum := sha256.Sum256([]byte(inspectSecret))
	if len(s.ready) != 2 || s.ready[1] != hex.EncodeToString(sum[:]) {
		t.Errorf("the server did not receive the real credential: digests %q", s.ready[1:])
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(environ, []byte("DM_KEY="+inspectPlaceholder)) || bytes.Contains(environ, []byte(inspectSecret)) {
		t.Errorf("the environment of the sandbox's process: %q", environ)
	}
	// The scan must see the placeholder (else it read nothing), and
	// never the secret.
	found, err := processMemoryHolds(pid, inspectPlaceholder, inspectSecret)
	if err != nil {
		t.Fatal(err)
	}
	if !found[inspectPlaceholder] {
		t.Errorf("the memory scan of pid %d did not find the placeholder: it read nothing useful", pid)
	}
	if found[inspectSecret] {
		t.Errorf("the memory of the sandbox's process %d holds the real credential", pid)
	}
	syscall.Kill(pid, syscall.SIGTERM)
	if code, rest := s.wait(t); code != 0 {
		t.Errorf("inspectclient hold: exit %d, %q, stderr %q", code, rest, s.stderr)
	}
	e.assertNothingLeft(name)
}

// processMemoryHolds reports which of needles occur in the readable
// memory of process pid.
func processMemoryHolds(pid int, needles ...string) (map[string]bool, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	found := map[string]bool{}
	regions := 0
	for _, l := range strings.Split(strings.TrimSpace(string(maps)), "\n") {
		f := strings.Fields(l)
		var start, end uint64
		if len(f) < 2 || f[1][0] != 'r' {
			continue
		}
		if _, err := fmt.Sscanf(f[0], "%x-%x", &start, &end); err != nil {
			return nil, fmt.Errorf("maps line %q: %w", l, err)
		}
		buf := make([]byte, end-start)
		n, _ := mem.ReadAt(buf, int64(start))
		if n == 0 {
			continue // [vvar] and the like
		}
		regions++
		for _, s := range needles {
			if bytes.Contains(buf[:n], []byte(s)) {
				found[s] = true
			}
		}
	}
	if regions == 0 {
		return nil, fmt.Errorf("no readable region of pid %d", pid)
	}
	return found, nil
}

// buildInspectClient builds integration/inspectclient into dir (which
// nobody can read) and returns its path.
func buildInspectClient(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "inspectclient")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/doorman-net/doorman/integration/inspectclient").CombinedOutput(); err != nil {
		t.Fatalf("build inspectclient: %v\n%s", err, out)
	}
	return bin
}

// requireInspectClients fails the test, saying what to install, when a
// client it drives is missing: the issue's clients are the point of the
// test, so their absence is a failure, not a skip.
func requireInspectClients(t *testing.T) {
	t.Helper()
	for tool, pkg := range map[string]string{"curl": "curl", "openssl": "openssl", "python3": "python3", "node": "nodejs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (Debian package %s): the inspect tests drive it as a real client", tool, pkg)
		}
	}
	if out, err := exec.Command("python3", "-c", "import requests").CombinedOutput(); err != nil {
		t.Fatalf("python3 cannot import requests (Debian package python3-requests): %v: %s", err, out)
	}
	if out, _ := exec.Command("curl", "-V").Output(); !bytes.Contains(out, []byte("HTTP2")) {
		t.Fatalf("this curl has no HTTP/2 (curl -V: %q): the inspect tests need --http2", out)
	}
	if out, err := exec.Command("node", "-e", "process.exit(typeof fetch === 'function' ? 0 : 1)").CombinedOutput(); err != nil {
		t.Fatalf("this node has no fetch (Node 18 or later is needed): %v %s", err, out)
	}
}

// TestRunInspectRefused: request rules that cannot be put in force refuse
// the sandbox with the reason, the command never runs, and nothing is
// left: a rule that does not parse, a secret file that cannot be read, a
// CA directory that cannot be created.
func TestRunInspectRefused(t *testing.T) {
	e := newRunEnv(t)
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	os.WriteFile(notADir, nil, 0o644)
	for _, c := range []struct {
		name, rule, caDir, want string
	}{
		{"bad rule", "inspect " + apiName + " deny json:a..b", filepath.Join(dir, "ca"), "empty key"},
		{"missing secret", "inspect " + apiName + " inject x-api-key " + inspectPlaceholder + " /nonexistent/secret", filepath.Join(dir, "ca"), "/nonexistent/secret"},
		{"CA not creatable", "inspect " + apiName + " allow GET", filepath.Join(notADir, "ca"), notADir},
	} {
		t.Run(c.name, func(t *testing.T) {
			policy := filepath.Join(t.TempDir(), "policy")
			os.WriteFile(policy, []byte(apiName+"\n"+c.rule+"\n"), 0o644)
			name := runName()
			r := e.run(name, []string{"--policy", policy, "--ca-dir", c.caDir, "--upstream-ca-file", e.caFile}, "echo", "ran")
			if r.exit == 0 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, c.want) {
				t.Errorf("want a refusal naming %q and the command not run, got %v", c.want, r)
			}
			if strings.Contains(r.stderr, inspectPlaceholder) {
				t.Errorf("the refusal shows the placeholder: %q", r.stderr)
			}
			e.assertNothingLeft(name)
		})
	}
}

// inspectSpellingPrevious is the last commit before request rules held
// for every spelling of a request (issue 24, part 3).
const inspectSpellingPrevious = "8feb24a0848883375a1dac75813d736f8282143f"

// reqSpelling is one request as a client inside the sandbox writes it.
type reqSpelling struct {
	method, path string
	header       string // "Name: value", or ""
}

// Spellings of POST /v1/messages on the api host, whose rule denies it:
// the issue's five first, then the rest of the class.
var (
	issueSpellings = []reqSpelling{
		{"POST", "/v1/messages/", ""}, {"POST", "//v1/messages", ""}, {"POST", "/v1/messages;x", ""},
		{"POST", "/V1/MESSAGES", ""}, {"post", "/v1/messages", ""},
	}
	classSpellings = []reqSpelling{
		{"POST", "/v1/messages", ""}, {"POST", "/v1;x/messages", ""}, {"POST", "/v1//messages", ""},
		{"POST", "/v1%2Fmessages", ""}, {"POST", "/v1%2fmessages", ""}, {"POST", "/%761/messages", ""},
		{"POST", "/v1%252Fmessages", ""}, {"POST", "/v1/messages%3Fx", ""}, {"POST", "/v1/messages.", ""},
		{"POST", "/v1/messages%20", ""}, {"POST", "/v1/me%C5%BF%C5%BFages", ""}, {"POST", "/v1/%EF%BD%8Dessages", ""},
		{"POST", "/v1/x/..;/messages", ""}, {"POST", "/v1/x/%2e%2e/messages", ""}, {"POST", "/v1%5Cmessages", ""},
		{"POST", "/v1/messages%00", ""}, {"POST", "/v1%C0%AFmessages", ""}, {"Post", "/V1/Messages/", ""},
		{"PUT", "/v1/messages", "X-HTTP-Method-Override: POST"}, {"GET", "/v1/messages?_method=POST", ""},
	}
	// Raw request lines only a socket sends: a fragment, a backslash,
	// the absolute form.
	rawSpellings = []reqSpelling{
		{"POST", "/v1/messages#x", ""}, {"POST", `/v1\messages`, ""}, {"POST", "https://" + apiName + "//v1/messages/", ""},
	}
	// Spellings of GET /docs/a on the other host, whose allow rule for
	// GET /docs/* is all that passes: none is the canonical one.
	docsSpellings = []reqSpelling{
		{"GET", "/docs//a", ""}, {"GET", "/docs/a;x", ""}, {"GET", "/docs/secret.key;.txt", ""}, {"GET", "/docs/a%2Fb", ""},
		{"get", "/docs/a", ""}, {"GET", "/docs/..;/admin", ""}, {"GET", "/docs/a", "X-HTTP-Method-Override: DELETE"},
	}
)

// at is a spelling sent to one host.
type at struct {
	host string
	reqSpelling
}

func on(host string, list ...reqSpelling) []at {
	out := make([]at, len(list))
	for i, sp := range list {
		out[i] = at{host, sp}
	}
	return out
}

// spellingScript runs, inside the sandbox, curl over HTTP/1.1 and HTTP/2,
// Python over a raw TLS socket (HTTP/1.1) and Node's http2 module, each
// sending every spelling and printing "TAG HOST METHOD PATH STATUS"; then
// one canonical request to each host that the rules let through ("CTRL
// ...").
func spellingScript() string {
	all := append(append([]reqSpelling(nil), issueSpellings...), classSpellings...)
	ctrl := append(on(apiName, reqSpelling{"POST", "/v1/models", ""}), on(evilName, reqSpelling{"GET", "/docs/a", ""})...)
	var b strings.Builder
	curl := func(tag, flag string, list []at) {
		for _, a := range list {
			hdr := ""
			if a.header != "" {
				hdr = "-H '" + a.header + "' "
			}
			fmt.Fprintf(&b, "echo \"%s %s %s %s $(curl -sS %s --path-as-is -o /dev/null -w '%%{http_code}' -X '%s' %s-H 'content-type: application/json' -d '{}' 'https://%s%s')\"\n",
				tag, a.host, a.method, a.path, flag, a.method, hdr, a.host, a.path)
		}
	}
	for _, v := range []struct{ tag, flag string }{{"CURL1", "--http1.1"}, {"CURL2", "--http2"}} {
		curl(v.tag, v.flag, append(on(apiName, all...), on(evilName, docsSpellings...)...))
		curl("CTRL", v.flag, ctrl)
	}
	list := func(l []at, item func(a at) string) string {
		var out []string
		for _, a := range l {
			out = append(out, item(a))
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	py := func(a at) string { return fmt.Sprintf("(%q, %q, %q, %q)", a.host, a.method, a.path, a.header) }
	fmt.Fprintf(&b, `/usr/bin/python3 - <<'PY'
import socket, ssl
def raw(host, m, target, hdr):
    s = ssl.create_default_context().wrap_socket(socket.create_connection((host, 443), timeout=10), server_hostname=host)
    req = "%%s %%s HTTP/1.1\r\nHost: %%s\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n" %% (m, target, host)
    if hdr:
        req += hdr + "\r\n"
    s.sendall((req + "\r\n{}").encode("latin-1"))
    data = b""
    while b"\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.split(b" ")[1].decode() if data else "none"
for tag, l in (("PY", %s), ("CTRL", %s)):
    for host, m, target, hdr in l:
        print(tag, host, m, target, raw(host, m, target, hdr))
PY
`, list(append(append(on(apiName, all...), on(apiName, rawSpellings...)...), on(evilName, docsSpellings...)...), py), list(ctrl, py))
	js := func(a at) string {
		h := "{}"
		if k, v, ok := strings.Cut(a.header, ": "); ok {
			h = fmt.Sprintf("{%q: %q}", strings.ToLower(k), v)
		}
		return fmt.Sprintf("[%q, %q, %q, %s]", a.host, a.method, a.path, h)
	}
	h2 := append(append(on(apiName, all...), on(apiName, reqSpelling{"POST", "/v1/messages /x", ""})...), on(evilName, docsSpellings...)...)
	fmt.Fprintf(&b, `node -e '
const http2 = require("http2");
const sessions = {};
const session = (h) => sessions[h] || (sessions[h] = http2.connect("https://" + h));
function one(items, tag, i, done) {
  if (i === items.length) { done(); return; }
  const [h, m, p, hdr] = items[i];
  let printed = false;
  const print = (s) => { if (!printed) { printed = true; console.log(tag, h, m, p, s); } };
  let req;
  try {
    req = session(h).request(Object.assign({":method": m, ":path": p, "content-type": "application/json", "content-length": "2"}, hdr), {endStream: false});
  } catch (e) { print("error-" + e.code); one(items, tag, i + 1, done); return; }
  req.on("response", (hd) => print(String(hd[":status"])));
  req.on("error", (e) => print("error-" + e.code));
  req.on("close", () => { print("closed"); one(items, tag, i + 1, done); });
  req.resume();
  req.end("{}");
}
one(%s, "NODE2", 0, () => one(%s, "CTRL", 0, () => Object.values(sessions).forEach((s) => s.close())));
'
`, list(h2, js), list(ctrl, js))
	return b.String()
}

// spellingPolicy denies POST /v1/messages on the api host and allows only
// GET /docs/* on the other (default deny).
func spellingPolicy(t *testing.T) string {
	policy := filepath.Join(t.TempDir(), "policy")
	os.WriteFile(policy, []byte(strings.Join([]string{
		apiName, evilName,
		"inspect " + apiName + " deny POST /v1/messages",
		"inspect " + evilName + " allow GET /docs/*",
		"inspect " + evilName + " default deny",
		"",
	}, "\n")), 0o644)
	return policy
}

// spellingResults are the lines of spellingScript: by tag, the statuses
// of the spellings ("HOST METHOD PATH" to status).
type spellingResults struct {
	byTag map[string]map[string]string
	ctrl  int // control requests answered 200
}

func parseSpellingOutput(t *testing.T, out string) spellingResults {
	t.Helper()
	res := spellingResults{byTag: map[string]map[string]string{}}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		switch f[0] {
		case "CURL1", "CURL2", "PY", "NODE2":
			if res.byTag[f[0]] == nil {
				res.byTag[f[0]] = map[string]string{}
			}
			res.byTag[f[0]][strings.Join(f[1:len(f)-1], " ")] = f[len(f)-1]
		case "CTRL":
			if f[len(f)-1] == "200" {
				res.ctrl++
			} else {
				t.Errorf("a control request was not answered: %q", l)
			}
		}
	}
	return res
}

// TestRunInspectSpellings: inside `doorman run`, curl (HTTP/1.1 and
// HTTP/2), Python (raw HTTP/1.1) and Node (HTTP/2) send every spelling of
// a request a deny rule refuses, and every non-canonical spelling of one
// a default-deny host's allow rule passes: each is refused with a 403,
// and the fake origins read none of them (they count requests); the
// canonical requests the rules let through reach them, one each.
func TestRunInspectSpellings(t *testing.T) {
	requireInspectClients(t)
	e := newRunEnv(t)
	name := runName()
	r := e.run(name, []string{"--policy", spellingPolicy(t), "--ca-dir", filepath.Join(t.TempDir(), "ca"), "--upstream-ca-file", e.caFile, "--user", "nobody"},
		"env", "HOME=/tmp", "sh", "-c", spellingScript())
	res := parseSpellingOutput(t, r.stdout)
	want := map[string]int{
		"CURL1": len(issueSpellings) + len(classSpellings) + len(docsSpellings),
		"CURL2": len(issueSpellings) + len(classSpellings) + len(docsSpellings),
		"PY":    len(issueSpellings) + len(classSpellings) + len(rawSpellings) + len(docsSpellings),
		"NODE2": len(issueSpellings) + len(classSpellings) + 1 + len(docsSpellings),
	}
	for tag, n := range want {
		if len(res.byTag[tag]) != n {
			t.Errorf("%s: %d spellings answered, want %d; stderr %q", tag, len(res.byTag[tag]), n, r.stderr)
		}
		for sp, status := range res.byTag[tag] {
			if status != "403" {
				t.Errorf("%s %s: %s, want 403", tag, sp, status)
			}
		}
	}
	// Four clients sent one control request to each host.
	if res.ctrl != 8 {
		t.Errorf("%d control requests answered, want 8:\n%s", res.ctrl, r.stdout)
	}
	if got := e.api.Requests(); got != 4 {
		t.Errorf("the api origin read %d requests, want only the 4 control requests", got)
	}
	if got := e.evil.Requests(); got != 4 {
		t.Errorf("the docs origin read %d requests, want only the 4 control requests", got)
	}
	log, _ := os.ReadFile(filepath.Join(e.logDir, name+"-eth0.log"))
	for _, want := range []string{
		`"reason":"matched another spelling of the request: trailing slash dropped"`,
		`"reason":"matched another spelling of the request: repeated slashes merged"`,
		`"reason":"matched another spelling of the request: path parameters (;) dropped"`,
		`"reason":"matched another spelling of the request: case folded"`,
		`"reason":"matched another spelling of the request: the method in upper case"`,
		`"reason":"ambiguous request target: a dot segment in the path"`,
		`"reason":"ambiguous request target: a fragment (#) in the target"`,
		`"reason":"not the canonical spelling allow rules match: repeated slashes"`,
	} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("the decision log lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	e.assertNothingLeft(name)
}

// TestRunInspectSpellingsPrevious runs the same clients against the
// doorman of inspectSpellingPrevious, built from this repository's
// history: there the issue's five spellings of the denied request reach
// the origin (200), which is what TestRunInspectSpellings requires to
// stop.
func TestRunInspectSpellingsPrevious(t *testing.T) {
	requireInspectClients(t)
	dir := buildPreviousDoorman(t, inspectSpellingPrevious)
	e := newRunEnv(t)
	e.bin = filepath.Join(dir, "doorman")
	name := runName()
	r := e.run(name, []string{"--policy", spellingPolicy(t), "--ca-dir", filepath.Join(t.TempDir(), "ca"), "--upstream-ca-file", e.caFile, "--user", "nobody"},
		"env", "HOME=/tmp", "sh", "-c", spellingScript())
	res := parseSpellingOutput(t, r.stdout)
	for _, tag := range []string{"CURL1", "CURL2", "PY", "NODE2"} {
		for _, sp := range issueSpellings {
			key := apiName + " " + sp.method + " " + sp.path
			if got := res.byTag[tag][key]; got != "200" {
				t.Errorf("%s %s against %s: %q, want 200 (the origin reached)", tag, key, inspectSpellingPrevious[:7], got)
			}
		}
	}
	through := 0
	for _, m := range res.byTag {
		for _, status := range m {
			if status == "200" {
				through++
			}
		}
	}
	t.Logf("against %s, %d spellings reached an origin; the api origin read %d requests, the docs origin %d",
		inspectSpellingPrevious[:7], through, e.api.Requests(), e.evil.Requests())
	if e.api.Requests() <= 4 {
		t.Errorf("the api origin read %d requests against %s: the spellings did not reach it, so the test cannot tell the fix from its absence", e.api.Requests(), inspectSpellingPrevious[:7])
	}
	e.assertNothingLeft(name)
}
