package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
echo "CURL2DENY $(curl -sS --http2 -o /dev/null -w '%{http_code} %{http_version}' -H 'content-type: application/json' -d "$tool" $api/v1/messages)"
echo "CURL2BODY $(curl -sS --http2 -H 'content-type: application/json' -d "$tool" $api/v1/messages)"
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
echo "PLAIN $(openssl s_client -connect ` + plainName + `:443 -servername ` + plainName + ` </dev/null 2>/dev/null | grep -m1 '^issuer=')"
echo "PINNED $(curl -sS --cacert "$TESTNET_CA" -o /dev/null -w '%{http_code}' $api/dm/headers 2>&1 | head -c 200)"
`

const (
	plainName = "plain.example.test"
)

// TestRunInspect drives real clients (curl over HTTP/1.1 and HTTP/2,
// Python's urllib and requests, Node's fetch, a raw WebSocket) inside
// `doorman run` against an inspected host of the fake internet, and an
// uninspected one beside it.
func TestRunInspect(t *testing.T) {
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

	name := runName()
	flags := []string{"--policy", policy, "--ca-dir", caRoot, "--upstream-ca-file", e.caFile, "--user", "nobody"}
	r := e.run(name, flags, "env", "DM_KEY="+inspectPlaceholder, "SECRETFILE="+secretFile, "TESTNET_CA="+testCA,
		"HOME=/tmp", "sh", "-c", inspectScript)
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
		{"CURL2DENY", "403 2"},
		{"CURL2PASS", apiName},
		{"BIG", "413"},
		{"URLLIB", "403 200"},
		{"URLLIBHDR", "Bearer " + inspectSecret},
		{"REQUESTS", "403 200 deny POST /v1/messages json:tools[].type=web_search*"},
		{"WS", "HTTP/1.1 101 Switching Protocols hello-ws"},
		{"NODE", "403 200"},
		{"PINNED", "curl: (60) SSL certificate problem"},
	}
	for _, c := range checks {
		if got := line(c.tag); !strings.Contains(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.tag, got, c.want)
		}
	}
	if got := line("CURL1"); !strings.Contains(got, `"X-Api-Key":["`+inspectSecret+`"]`) || !strings.Contains(got, `"proto":"HTTP/`) {
		t.Errorf("curl --http1.1: the injected header did not reach the server: %q", got)
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
