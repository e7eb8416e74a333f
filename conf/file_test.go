package conf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFile(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		mode  Mode
		hosts string
	}{
		{"empty file", "", ModeAllowlist, ""},
		{"only comments", "# nothing\n\n   # still nothing\n", ModeAllowlist, ""},
		{"entries", "api.example.com\n*.github.com:443\n", ModeAllowlist, "api.example.com *.github.com:443"},
		{"mode and entries", "mode: open\nx.com\n", ModeOpen, "x.com"},
		{"mode anywhere", "x.com\nMODE : None\ny.com", ModeNone, "x.com y.com"},
		{"mode without space", "mode:open", ModeOpen, ""},
		{"mode with comment", "mode: allowlist # phase 2\n", ModeAllowlist, ""},
		{"trailing comments", "x.com # the API\ny.com\t#tab\n", ModeAllowlist, "x.com y.com"},
		{"indented", "   x.com   \n\t*.y.com\t\n", ModeAllowlist, "x.com *.y.com"},
		{"crlf", "mode: open\r\nx.com\r\n# c\r\n", ModeOpen, "x.com"},
		{"bom", "\ufeffmode: none\nx.com\n", ModeNone, "x.com"},
		{"host named mode with port", "mode:443\nmode:8000-8999\nmode\n", ModeAllowlist, "mode:443 mode:8000-8999 mode"},
		{"no final newline", "x.com", ModeAllowlist, "x.com"},
		{"ipv6", "[2001:db8::1]:443\n2001:db8::/32 # docs\n", ModeAllowlist, "[2001:db8::1]:443 2001:db8::/32"},
		{"non-ASCII comment", "# Zugriff für bücher.de\nbücher.de\n", ModeAllowlist, "xn--bcher-kva.de"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseFile([]byte(tt.in))
			if err != nil {
				t.Fatalf("ParseFile(%q): %v", tt.in, err)
			}
			if p.Mode != tt.mode || strings.Join(p.Hosts(), " ") != tt.hosts {
				t.Errorf("ParseFile(%q) = %v, want %s [%s]", tt.in, p, tt.mode, tt.hosts)
			}
		})
	}
}

func TestParseFileErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"bad entry", "ok.com\nx.com:0\n", []string{`line 2: "x.com:0": port out of range`}},
		{"every error", "*\n\nok.com\n a*b.com # c\nx.com:9-3\n", []string{
			`line 1: "*": a bare * is not allowed (use mode: open)`,
			`line 4: "a*b.com": wildcard only allowed as the whole first label`,
			`line 5: "x.com:9-3": port range reversed`,
		}},
		{"two entries on a line", "a.com b.com\n", []string{`line 1: "a.com b.com": whitespace inside the entry`}},
		{"hash inside entry", "x.com#c\n", []string{`line 1: "x.com#c": bad character '#'`}},
		{"bad mode", "mode: deny\n", []string{`line 1: invalid mode "deny"`, "none, allowlist, open"}},
		{"empty mode", "mode:\n", []string{`line 1: invalid mode ""`}},
		{"mode port with space", "mode: 443\n", []string{`line 1: invalid mode "443"`}},
		{"mode twice", "mode: open\nx.com\nmode: open\n", []string{"line 3: mode set twice (first on line 1)"}},
		{"url", "https://x.com/\n", []string{`line 1: "https://x.com/": give the host, not a URL`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseFile([]byte(tt.in))
			if err == nil || p != nil {
				t.Fatalf("ParseFile(%q) = %v, %v; want nil and an error", tt.in, p, err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tt.want) && tt.name == "every error" {
				t.Errorf("got %d error lines, want %d: %v", n, len(tt.want), err)
			}
		})
	}
}

func TestMarshalFile(t *testing.T) {
	p, err := NewPolicy(ModeOpen, []string{"Bücher.de.", "*.Example.com:0443", "10.0.0.0/8", "[2001:db8::1]:443", "mode:443"})
	if err != nil {
		t.Fatal(err)
	}
	out := string(p.MarshalFile())
	if !strings.HasPrefix(out, "# ") {
		t.Errorf("no header comment:\n%s", out)
	}
	wantTail := "mode: open\nxn--bcher-kva.de\n*.example.com:443\n10.0.0.0/8\n[2001:db8::1]:443\nmode:443\n"
	if !strings.HasSuffix(out, wantTail) {
		t.Errorf("MarshalFile:\n%s\nwant it to end in:\n%s", out, wantTail)
	}
	q, err := ParseFile([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if !q.Equal(p) {
		t.Errorf("ParseFile(MarshalFile(p)) = %v, want %v", q, p)
	}
	if again := string(q.MarshalFile()); again != out {
		t.Errorf("MarshalFile is not stable:\n%s\nvs\n%s", again, out)
	}

	var nilPolicy *Policy
	d, err := ParseFile(nilPolicy.MarshalFile())
	if err != nil || !d.Equal(DenyAll()) {
		t.Errorf("nil policy renders as %v, %v; want deny-all", d, err)
	}
	for _, mode := range []Mode{ModeNone, ModeAllowlist, ModeOpen} {
		e, err := ParseFile((&Policy{Mode: mode}).MarshalFile())
		if err != nil || !e.Equal(&Policy{Mode: mode}) {
			t.Errorf("empty %s policy round trip: %v, %v", mode, e, err)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sandbox.policy")
	if err := os.WriteFile(path, []byte("mode: allowlist\napi.example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := NewPolicy(ModeAllowlist, []string{"api.example.com"}); !p.Equal(want) {
		t.Errorf("LoadFile = %v, want %v", p, want)
	}

	missing := filepath.Join(dir, "missing.policy")
	if _, err := LoadFile(missing); err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadFile(missing) error %v: want ErrNotExist naming the path", err)
	}

	bad := filepath.Join(dir, "bad.policy")
	if err := os.WriteFile(bad, []byte("ok.com\n*\nmode: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err = LoadFile(bad)
	if p != nil || err == nil {
		t.Fatalf("LoadFile(bad) = %v, %v", p, err)
	}
	for _, want := range []string{bad + `:2: "*": a bare *`, bad + `:3: invalid mode "x"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sandbox.policy")
	p1, _ := NewPolicy(ModeAllowlist, []string{"a.example.com", "10.0.0.0/8:443"})
	if err := WriteFileAtomic(path, p1); err != nil {
		t.Fatal(err)
	}
	got, err := LoadFile(path)
	if err != nil || !got.Equal(p1) {
		t.Fatalf("LoadFile after write = %v, %v; want %v", got, err, p1)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o644 {
		t.Errorf("new file mode %o, want 644", perm)
	}

	// Replacing keeps the file's permissions and leaves no temp files.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	p2, _ := NewPolicy(ModeOpen, nil)
	if err := WriteFileAtomic(path, p2); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadFile(path); err != nil || !got.Equal(p2) {
		t.Errorf("after replace: %v, %v; want %v", got, err, p2)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("replace changed mode to %o, want 600", fi.Mode().Perm())
	}
	assertOnlyFile(t, dir, "sandbox.policy")

	// Invalid policies are refused and the old file stays.
	for _, bad := range []*Policy{nil, {Mode: "bogus"}, {Mode: ModeAllowlist, Entries: []Entry{{Kind: KindName, Name: "a b"}}}} {
		if err := WriteFileAtomic(path, bad); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("WriteFileAtomic(%v) error %v: want a refusal naming the path", bad, err)
		}
	}
	if got, err := LoadFile(path); err != nil || !got.Equal(p2) {
		t.Errorf("after refused writes: %v, %v; want %v", got, err, p2)
	}
	assertOnlyFile(t, dir, "sandbox.policy")

	// A missing directory is an error naming the path.
	nowhere := filepath.Join(dir, "no", "such", "dir", "x.policy")
	if err := WriteFileAtomic(nowhere, p1); err == nil || !strings.Contains(err.Error(), nowhere) {
		t.Errorf("WriteFileAtomic into a missing dir: %v", err)
	}
}

// assertOnlyFile checks that dir holds exactly the file name.
func assertOnlyFile(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != name {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %v, want only %s", names, name)
	}
}
