package launch

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain makes this test binary the other side of Start when a test
// starts it as `doorman supervise`: it takes what it was handed with
// Supervise, says ready, and waits to be killed.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "supervise" {
		sup, err := Supervise(os.Args[2:], os.Stderr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "doorman supervise: %v\n", err)
			os.Exit(1)
		}
		if sup.Ready == nil || len(sup.Listeners) != 1 || !sup.ReadyOnStart || sup.Cgroup != nil {
			fmt.Fprintf(os.Stderr, "doorman supervise: handed %+v\n", sup)
			os.Exit(1)
		}
		sup.Ready()
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startWith starts this test binary as the supervisor of a config whose
// sandbox is "sb", over one listener, and says the supervisor's sandbox
// is sandbox.
func startWith(t *testing.T, sandbox string) *Process {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	config := filepath.Join(dir, "proxy-config.json")
	cfg := Config{Sandbox: "sb", PolicyFile: filepath.Join(dir, "policy"), LogFile: filepath.Join(dir, "log"), Listeners: Listeners{TCP: []int{3}}}
	if err := cfg.WriteFile(config); err != nil {
		t.Fatal(err)
	}
	p, err := Start(Request{Binary: os.Args[0], Sandbox: sandbox, ConfigFile: config, StatusFile: filepath.Join(dir, "status.json"),
		LogFile: cfg.LogFile, Listeners: []*os.File{f}, ReadyOnStart: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// What Start hands a supervisor is what Supervise takes: the command
// line, the config, the listener at 3 and the readiness pipe after it.
func TestStartSupervise(t *testing.T) {
	if err := startWith(t, "sb").Ready(10 * time.Second); err != nil {
		t.Fatalf("the supervisor did not take what Start handed it: %v", err)
	}
}

// A supervisor that refuses what it was handed is Start's error, with
// what it said on its way out.
func TestStartRefused(t *testing.T) {
	err := startWith(t, "other").Ready(10 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "proxy exited before serving") && !strings.Contains(err.Error(), "did not signal ready") ||
		!strings.Contains(err.Error(), `--sandbox "other"`) {
		t.Errorf("Ready: %v, want the supervisor's own reason quoted", err)
	}
}

// A worker's command: `doorman proxy --sandbox ID --config FILE`, with
// the listeners, the heartbeat socket and the readiness pipe in that
// order, which its environment names.
func TestWorkerCommand(t *testing.T) {
	l1, l2, hb, ready := os.NewFile(10, "a"), os.NewFile(11, "b"), os.NewFile(12, "hb"), os.NewFile(13, "ready")
	cmd := Worker{Path: "/proc/self/exe", Sandbox: "sb", ConfigFile: "/run/doorman/sb/proxy-config.json", Env: []string{"A=1"},
		Listeners: []*os.File{l1, l2}}.Command(hb, ready)
	if want := []string{os.Args[0], "proxy", "--sandbox", "sb", "--config", "/run/doorman/sb/proxy-config.json"}; !slices.Equal(cmd.Args, want) {
		t.Errorf("args %q, want %q", cmd.Args, want)
	}
	if !slices.Equal(cmd.ExtraFiles, []*os.File{l1, l2, hb, ready}) {
		t.Errorf("descriptors %v", cmd.ExtraFiles)
	}
	if !slices.Equal(cmd.Env, []string{"A=1", EnvWorkerFDs + "=5 6"}) {
		t.Errorf("environment %q", cmd.Env)
	}
	if h, r, err := workerFDs("5 6", 2); h != 5 || r != 6 || err != nil {
		t.Errorf("workerFDs: %d %d %v", h, r, err)
	}
	for _, bad := range []string{"", "5", "6 5", "5 6 7", "x y", "4 5"} {
		if _, _, err := workerFDs(bad, 2); err == nil || !strings.Contains(err.Error(), EnvWorkerFDs) {
			t.Errorf("workerFDs(%q): %v, want an error naming %s", bad, err, EnvWorkerFDs)
		}
	}
}

// The readiness protocol: "ready" and a newline; anything else, or a pipe
// closed without a word, is why not.
func TestAwaitReady(t *testing.T) {
	for said, ok := range map[string]bool{"ready\n": true, "": false, "rea": false, "starting\n": false} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ready := AwaitReady(r)
		w.WriteString(said)
		w.Close()
		if err := <-ready; (err == nil) != ok {
			t.Errorf("%q: %v", said, err)
		}
	}
	r, w, _ := os.Pipe()
	ready := AwaitReady(r)
	readySignal(int(w.Fd()))()
	if err := <-ready; err != nil {
		t.Errorf("readySignal: %v", err)
	}
}
