package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
)

// modeOpenWatch puts the sandbox's live policy in mode open (its entries
// kept) while the attempt runs, and back as it was afterwards, each time
// waiting for the proxy's "policy loaded" line of the new mode: the
// open-nat64 row measures what mode open lets a workload name directly.
// It counts nothing itself.
func modeOpenWatch(t *testing.T, _ escapeWorld, s *escapeSandbox) func() (counters, string) {
	t.Helper()
	path := s.state.PolicyPath()
	orig, err := conf.LoadFile(path)
	if err != nil {
		t.Fatalf("the sandbox's live policy: %v", err)
	}
	open, err := conf.NewPolicy(conf.ModeOpen, orig.Hosts())
	if err != nil {
		t.Fatal(err)
	}
	setLivePolicy(t, s, path, open)
	return func() (counters, string) {
		setLivePolicy(t, s, path, orig)
		return nil, "the sandbox's policy was in mode open while it ran"
	}
}

// setLivePolicy writes p to the sandbox's live policy file at path and
// waits until its proxy logs that it loaded p's mode.
func setLivePolicy(t *testing.T, s *escapeSandbox, path string, p *conf.Policy) {
	t.Helper()
	before := policyLoads(s.logFile, string(p.Mode))
	if err := conf.WriteFileAtomic(path, p); err != nil {
		t.Fatalf("write the sandbox's live policy: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for policyLoads(s.logFile, string(p.Mode)) <= before {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy of %s did not load its policy in mode %s (log %s)", s.state.ID, p.Mode, s.logFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// policyLoads counts the "policy loaded" lines of mode in the decision
// log at path.
func policyLoads(path, mode string) int {
	data, _ := os.ReadFile(path)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "policy loaded" && m["mode"] == mode {
			n++
		}
	}
	return n
}
