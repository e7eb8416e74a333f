package directlog

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// End to end: a sandbox enforced with allowDirect gets its direct flows in
// its proxy's decision log, next to the proxy's own lines.
func TestEnforcedSandboxLogsAllowDirect(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	bin := filepath.Join(t.TempDir(), "doorman")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/doorman-net/doorman/cmd/doorman").CombinedOutput(); err != nil {
		t.Fatalf("build doorman: %v\n%s", err, out)
	}
	in(t, p.peer, func() error {
		ln, err := net.Listen("tcp4", "0.0.0.0:5432")
		if err == nil {
			serveTCP(t, ln)
		}
		return err
	})

	pol, err := conf.NewPolicy(conf.ModeAllowlist, []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	key := filepath.Base(p.sandbox)
	direct, err := conf.ParseDirect(peerAddr + ":5432")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sandbox.Enforce(sandbox.Request{
		Attachment: sandbox.Attachment{Key: key, ID: "ctr-directlog", Runtime: "cni", NetNS: p.sandbox, Label: "full"},
		Spec:       spec.Spec{Policy: pol, LogDir: t.TempDir(), Proxy: spec.Proxy{AllowDirect: []conf.Direct{direct}}},
		StateDir:   stateDir, ProxyBinary: bin,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sandbox.Teardown(stateDir, key); err != nil {
			t.Error(err)
		}
	})

	var tcpClient, udpClient string
	in(t, p.sandbox, func() error {
		c, err := net.DialTimeout("tcp4", peerAddr+":5432", 2*time.Second)
		if err != nil {
			return err
		}
		tcpClient = c.LocalAddr().String()
		c.Close()
		u, err := net.Dial("udp4", peerAddr+":5432")
		if err != nil {
			return err
		}
		defer u.Close()
		udpClient = u.LocalAddr().String()
		_, err = u.Write([]byte("x"))
		return err
	})

	want := map[string]string{tcpClient: "tcp", udpClient: "udp"}
	var got map[string]map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(got) < len(want) {
		time.Sleep(50 * time.Millisecond)
		got = map[string]map[string]any{}
		data, _ := os.ReadFile(s.LogFile)
		for _, line := range strings.Split(string(data), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "connection" && m["reason"] == "allowDirect" {
				got[fmt.Sprint(m["client"])] = m
			}
		}
	}
	data, _ := os.ReadFile(s.LogFile)
	if len(got) != len(want) {
		t.Fatalf("want allowDirect lines from %v, got %d; log %s:\n%s", want, len(got), s.LogFile, data)
	}
	for client, proto := range want {
		m := got[client]
		if m == nil {
			t.Errorf("no line from %s; log:\n%s", client, data)
			continue
		}
		if m["proto"] != proto || m["dst"] != peerAddr+":5432" || m["rule"] != peerAddr+":5432" ||
			m["verdict"] != "allow" || m["sandbox"] != "ctr-directlog" || m["name"] != "" {
			t.Errorf("line from %s: %v", client, m)
		}
	}
}
