package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy/launch"
	"github.com/doorman-net/doorman/spec"
)

// Run serves an inherited listener with the policy file and decision log
// its config names, and returns once its context ends.
func TestRunServesItsConfig(t *testing.T) {
	dir := t.TempDir()
	policy, logFile := filepath.Join(dir, "policy"), filepath.Join(dir, "decisions.log")
	if err := os.WriteFile(policy, []byte("mode: allowlist\napi.example.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A descriptor of its own, as a proxy inherits it: Run takes it over.
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	cfg := launch.Config{
		Sandbox:      "ctr-run",
		PolicyFile:   policy,
		LogFile:      logFile,
		DrainTimeout: spec.Duration(100 * time.Millisecond),
		Listeners:    launch.Listeners{TCP: []int{fd}},
		Proxy:        spec.Proxy{Limits: spec.Limits{Connections: 77}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready, done := make(chan struct{}), make(chan error, 1)
	var stderr bytes.Buffer
	go func() { done <- Run(ctx, cfg, "", &stderr, func() { close(ready) }, -1) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before serving: %v (%s)", err, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not get ready")
	}

	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, c)
	c.Close()

	var line, limits map[string]any
	for deadline := time.Now().Add(5 * time.Second); line == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(logFile)
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "connection" {
				line = m
			}
			if m["msg"] == "limits" {
				limits = m
			}
		}
	}
	if line == nil || line["sandbox"] != "ctr-run" || line["verdict"] != "deny" {
		data, _ := os.ReadFile(logFile)
		t.Fatalf("decision line %v; want a denial of sandbox ctr-run in %s:\n%s", line, logFile, data)
	}
	// The limits line says the caps in force: the configured one, and
	// the defaults of the rest.
	if limits == nil || limits["connections"] != 77.0 || limits["idleTimeout"] != "1h0m0s" || limits["nofile"].(float64) < 1024 {
		t.Errorf("limits line %v", limits)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if s := stderr.String(); strings.Contains(s, "denying everything") {
		t.Errorf("the policy file did not load: %s", s)
	}
}

// A config Run cannot serve is an error before anything starts.
func TestRunRefuses(t *testing.T) {
	for _, cfg := range []launch.Config{
		{PolicyFile: "p", Listeners: launch.Listeners{Addrs: []string{"127.0.0.1:0"}}},
		{Sandbox: "s", PolicyFile: "p", Listeners: launch.Listeners{Addrs: []string{"no-such-address"}}},
		{Sandbox: "s", PolicyFile: "p", LogFile: "/nonexistent/dir/log", Listeners: launch.Listeners{Addrs: []string{"127.0.0.1:0"}}},
	} {
		if err := Run(context.Background(), cfg, "", io.Discard, func() { t.Errorf("%+v: ready", cfg) }, -1); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}
