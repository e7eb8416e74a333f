package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/internal/runtimekind"
)

// TestRunGVisor is `doorman run --runtime runsc`: the command runs in
// gVisor, whose own network stack sends past the run's in-namespace
// rules, on the run network's bridge. The host-side layer holds it: the
// allowed name is fetched through the proxy, a denied name at its address
// gets the proxy's TLS alert and the denied host sees no connection, the
// decisions are in the run's log, and while it runs doorman tells its
// kind (runsc) and labels it full.
func TestRunGVisor(t *testing.T) {
	dir := runscDir(t)
	e := newRunEnv(t)
	name := runName()
	flags := []string{"--allow", apiName, "--runtime", filepath.Join(dir, "runsc"), "--runtime-arg", "--platform=systrap"}
	evilAt := evilName + ":443:" + evilAddr4.String()

	// The command sees doorman's state directory covered, and none of
	// the runtime's own state.
	r := e.run(name, flags, "sh", "-c", "echo hidden $(find "+e.stateDir+" /run/doorman-oci -mindepth 1 | wc -l); curl -sS --max-time 8 --cacert "+e.caFile+" https://"+apiName+"/")
	if r.exit != 0 || !strings.Contains(r.stdout, apiName+" ") {
		t.Fatalf("allowed HTTPS from runsc under doorman run: %v", r)
	}
	if !strings.HasPrefix(r.stdout, "hidden 0\n") {
		t.Errorf("the runsc command sees doorman's state or the runtime's: %v", r)
	}
	r = e.run(name, flags, "curl", "-sS", "--max-time", "8", "--cacert", e.caFile, "--resolve", evilAt, "https://"+evilName+"/")
	if r.exit != 35 || !strings.Contains(strings.ToLower(r.stderr), "access denied") {
		t.Fatalf("denied HTTPS from runsc under doorman run: want curl's exit 35 and a TLS access_denied alert, got %v", r)
	}
	if n := e.evil.Connections(testnet.PortHTTPS); n != 0 {
		t.Fatalf("the denied host accepted %d connections from the runsc command", n)
	}
	log, err := os.ReadFile(filepath.Join(e.logDir, name+"-eth0.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !logHas(log, "connection", apiName, "allow") || !logHas(log, "connection", evilName, "deny") {
		t.Errorf("decision log lacks the allowed connection to %s or the denied one to %s:\n%s", apiName, evilName, log)
	}
	if !bytes.Contains(log, []byte(`"name":"`+apiName+`"`)) {
		t.Errorf("decision log names no %s:\n%s", apiName, log)
	}

	// While it runs: the kind and the label.
	running := runName()
	s := e.start(running, flags, "sh", "-c", "echo ready; sleep 30")
	// doorman ls where the run's namespace is mounted (ip netns exec
	// gave doorman run a mount namespace of its own), as a user runs it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(s.cmd.Process.Pid), "-m", "-n", "--",
		doormanBin(), "ls", "-o", "json", "--state-dir", e.stateDir).Output()
	if err != nil {
		t.Fatalf("doorman ls: %v", err)
	}
	var listed []struct {
		Key, RuntimeKind, Label string
	}
	if err := json.Unmarshal(out, &listed); err != nil {
		t.Fatalf("doorman ls -o json: %v\n%s", err, out)
	}
	found := false
	for _, st := range listed {
		if st.Key != running+"-eth0" {
			continue
		}
		found = true
		if st.RuntimeKind != string(runtimekind.Runsc) || st.Label != "full" {
			t.Errorf("a running `doorman run --runtime runsc`: kind %q, label %q; want runsc, full", st.RuntimeKind, st.Label)
		}
	}
	if !found {
		t.Errorf("doorman ls lists no %s:\n%s", running, out)
	}
	// The table's KIND column says it too.
	table, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(s.cmd.Process.Pid), "-m", "-n", "--",
		doormanBin(), "ls", "--state-dir", e.stateDir).Output()
	if err != nil {
		t.Fatalf("doorman ls: %v", err)
	}
	lines := strings.Split(string(table), "\n")
	kind := slices.Index(strings.Fields(lines[0]), "KIND")
	if kind < 0 || !slices.ContainsFunc(lines[1:], func(l string) bool {
		f := strings.Fields(l)
		return len(f) > kind && strings.HasPrefix(f[0], running) && f[kind] == "runsc"
	}) {
		t.Errorf("doorman ls: no row for %s with KIND runsc:\n%s", running, table)
	}
	s.cmd.Process.Signal(os.Interrupt)
	if code, _ := s.wait(t); code != 130 {
		t.Errorf("SIGINT to doorman run --runtime runsc: exit %d, want 130", code)
	}
	e.assertNothingLeft(name, running)
}
