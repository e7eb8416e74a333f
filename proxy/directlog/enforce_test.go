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
	listenPeer(t, p, "5432")
	direct, err := conf.ParseDirect(peerAddr + ":5432")
	if err != nil {
		t.Fatal(err)
	}
	s := enforceWithProxy(t, p, "ctr-directlog", []conf.Direct{direct})

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

// A live change of allowDirect (sandbox.UpdateDirect) reaches the running
// proxy: a sandbox enforced without any (so its proxy opened no conntrack
// socket) logs the flows of a destination added later, without a restart,
// and a destination taken out again gets no line.
func TestLiveAllowDirectChangeIsLogged(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	listenPeer(t, p, "5432", "5433")
	s := enforceWithProxy(t, p, "ctr-livedirect", nil)
	stateDir, key := filepath.Dir(s.Dir), s.Key
	// dial connects from the sandbox to the peer's port, returning the
	// client's address ("" if the connection was refused).
	dial := func(port string) string {
		t.Helper()
		var client string
		in(t, p.sandbox, func() error {
			c, err := net.DialTimeout("tcp4", peerAddr+":"+port, time.Second)
			if err != nil {
				return nil
			}
			client = c.LocalAddr().String()
			c.Close()
			return nil
		})
		return client
	}
	// line waits up to within for the allowDirect line of client.
	line := func(client string, within time.Duration) map[string]any {
		deadline := time.Now().Add(within)
		for {
			data, _ := os.ReadFile(s.LogFile)
			for _, l := range strings.Split(string(data), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "connection" && m["reason"] == "allowDirect" && m["client"] == client {
					return m
				}
			}
			if time.Now().After(deadline) {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	update := func(entries ...string) {
		t.Helper()
		var ds []conf.Direct
		for _, e := range entries {
			d, err := conf.ParseDirect(e)
			if err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		u, err := sandbox.UpdateDirect(stateDir, key, ds, false)
		if err != nil {
			t.Fatal(err)
		}
		// The proxy confirmed the list before the rules admitted it.
		if len(u.Notes) > 0 {
			t.Errorf("UpdateDirect(%v): %v", entries, u.Notes)
		}
	}

	// (A connection not admitted directly still connects: to the
	// proxy, which has no name to read. The lines tell the two apart.)
	update(peerAddr + ":5432")
	client := dial("5432")
	if client == "" {
		t.Fatal("the direct connection failed after allowDirect was widened")
	}
	m := line(client, 5*time.Second)
	if m == nil {
		data, _ := os.ReadFile(s.LogFile)
		cfg, _ := os.ReadFile(filepath.Join(s.Dir, "proxy-config.json"))
		t.Fatalf("no allowDirect line for %s after a live widening; log:\n%s\nproxy config:\n%s", client, data, cfg)
	}
	if m["dst"] != peerAddr+":5432" || m["verdict"] != "allow" || m["rule"] != peerAddr+":5432" {
		t.Errorf("line: %v", m)
	}

	// Moved to another port: that one's flows get lines, and the old
	// one's no more (its connections go to the proxy now).
	update(peerAddr + ":5433")
	if c := dial("5432"); c != "" {
		if m := line(c, time.Second); m != nil {
			t.Errorf("an allowDirect line for %s to the port taken out: %v", c, m)
		}
	}
	client = dial("5433")
	if client == "" {
		t.Fatal("the direct connection to the new port failed")
	}
	if m := line(client, 5*time.Second); m == nil || m["dst"] != peerAddr+":5433" {
		data, _ := os.ReadFile(s.LogFile)
		t.Fatalf("line for %s after the second change: %v; log:\n%s", client, m, data)
	}
}

// listenPeer serves TCP on ports of p's peer (serveTCP).
func listenPeer(t *testing.T, p pair, ports ...string) {
	t.Helper()
	in(t, p.peer, func() error {
		for _, port := range ports {
			ln, err := net.Listen("tcp4", "0.0.0.0:"+port)
			if err != nil {
				return err
			}
			serveTCP(t, ln)
		}
		return nil
	})
}

// enforceWithProxy enforces p's sandbox as the CNI plugin would, with
// the doorman binary built from this tree as its proxy, the policy
// allowing example.com, and direct as its allowDirect; the sandbox is
// torn down when the test ends.
func enforceWithProxy(t *testing.T, p pair, id string, direct []conf.Direct) *sandbox.State {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "doorman")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/doorman-net/doorman/cmd/doorman").CombinedOutput(); err != nil {
		t.Fatalf("build doorman: %v\n%s", err, out)
	}
	pol, err := conf.NewPolicy(conf.ModeAllowlist, []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	key := filepath.Base(p.sandbox)
	s, err := sandbox.Enforce(sandbox.Request{
		Attachment: sandbox.Attachment{Key: key, ID: id, Runtime: "cni", NetNS: p.sandbox, Label: "full"},
		Spec:       spec.Spec{Policy: pol, LogDir: t.TempDir(), Proxy: spec.Proxy{AllowDirect: direct}},
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
	return s
}
