package cniinstall

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// node is a fake node's CNI dirs in a test's temporary directory.
type node struct {
	confDir, binDir string
	// binary is the "doorman binary" the installer copies.
	binary string
}

// newNode makes the dirs and writes files into the conf dir.
func newNode(t *testing.T, files map[string][]byte) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{confDir: filepath.Join(root, "net.d"), binDir: filepath.Join(root, "bin"), binary: filepath.Join(root, "doorman-src")}
	for _, d := range []string{n.confDir, n.binDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(n.binary, []byte("#!/bin/false\n# not really doorman\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		n.write(t, name, data)
	}
	return n
}

func (n *node) path(name string) string { return filepath.Join(n.confDir, name) }

func (n *node) write(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(n.path(name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (n *node) read(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(n.path(name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// installer is an Installer for n logging into log (nil: discarded).
func (n *node) installer(log *logBuffer) *Installer {
	in := &Installer{BinDir: n.binDir, ConfDir: n.confDir, Binary: n.binary}
	if log != nil {
		in.Log = log.logger()
	}
	return in
}

// snapshot is every file of the node's dirs with its bytes, for asserting
// that nothing changed.
func (n *node) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range []string{n.confDir, n.binDir} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			data, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Join(filepath.Base(d), e.Name())] = string(data)
		}
	}
	return out
}

func (n *node) assertUnchanged(t *testing.T, before map[string]string) {
	t.Helper()
	after := n.snapshot(t)
	for k, v := range before {
		if a, ok := after[k]; !ok {
			t.Errorf("%s was removed", k)
		} else if a != v {
			t.Errorf("%s changed:\n%s", k, a)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s appeared", k)
		}
	}
}

// testdata reads a file of testdata/primary.
func testdata(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "primary", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// pluginTypes loads a conflist with libcni, as a runtime would, and
// returns its plugins' types.
func pluginTypes(t testing.TB, data []byte) []string {
	t.Helper()
	l, err := libcni.ConfListFromBytes(data)
	if err != nil {
		t.Fatalf("libcni cannot load the conflist: %v\n%s", err, data)
	}
	var out []string
	for _, p := range l.Plugins {
		out = append(out, p.Network.Type)
	}
	return out
}

// doormanEntries returns the doorman entries of a conflist as libcni
// reads them.
func doormanEntries(t testing.TB, data []byte) []map[string]any {
	t.Helper()
	l, err := libcni.ConfListFromBytes(data)
	if err != nil {
		t.Fatalf("libcni cannot load the conflist: %v\n%s", err, data)
	}
	var out []map[string]any
	for _, p := range l.Plugins {
		if p.Network.Type != PluginType {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(p.Bytes, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// assertOneEntry checks that data has exactly one doorman entry, last,
// declaring the three capabilities and valid for ValidateEntry.
func assertOneEntry(t testing.TB, data []byte) map[string]any {
	t.Helper()
	types := pluginTypes(t, data)
	es := doormanEntries(t, data)
	if len(es) != 1 {
		t.Fatalf("%d doorman entries, want 1:\n%s", len(es), data)
	}
	caps, _ := es[0]["capabilities"].(map[string]any)
	for _, c := range []string{CapPodAnnotations, CapDNS, CapCgroupPath} {
		if caps[c] != true {
			t.Errorf("capability %q is %v, want true", c, caps[c])
		}
	}
	raw, _ := json.Marshal(es[0])
	if _, err := ValidateEntry(raw); err != nil {
		t.Errorf("the entry does not validate: %v\n%s", err, raw)
	}
	_ = types
	return es[0]
}

// assertInsertedOnly checks that after is before with one contiguous run
// of bytes inserted (and nothing else changed).
func assertInsertedOnly(t testing.TB, before, after []byte) {
	t.Helper()
	p := 0
	for p < len(before) && p < len(after) && before[p] == after[p] {
		p++
	}
	s := 0
	for s < len(before)-p && s < len(after)-p && before[len(before)-1-s] == after[len(after)-1-s] {
		s++
	}
	if p+s < len(before) || len(after) <= len(before) {
		t.Fatalf("the file was changed beyond one insertion (common prefix %d, suffix %d, of %d bytes):\n%s", p, s, len(before), after)
	}
}

// logBuffer collects an Installer's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// lines returns the log lines decoded.
func (l *logBuffer) lines(t testing.TB) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

// find returns the first log line with msg whose file is file and whose
// reason contains reason.
func (l *logBuffer) find(t testing.TB, msg, file, reason string) map[string]any {
	t.Helper()
	for _, m := range l.lines(t) {
		r, _ := m["reason"].(string)
		if m["msg"] == msg && m["file"] == file && strings.Contains(r, reason) {
			return m
		}
	}
	return nil
}

// eventually polls cond until it holds or a generous deadline passes.
// The deadline only bounds a hung test: nothing here asserts a latency.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
