package sandbox

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/proxy/launch"
)

func TestProxyResolversFor(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		override  []netip.AddrPort
		resolvers []netip.Addr
		want      []netip.AddrPort
	}{
		{"the sandbox's, in order", nil, addrs("203.0.113.53", "2001:db8::53"), addrPorts("203.0.113.53:53", "[2001:db8::53]:53")},
		// Docker's embedded DNS lives in the sandbox: the servers
		// behind it (listed after it, see hook) are the ones to ask.
		{"past Docker's embedded DNS", nil, addrs("127.0.0.11", "198.51.100.53"), addrPorts("198.51.100.53:53")},
		{"IPv4-mapped", nil, addrs("::ffff:203.0.113.53"), addrPorts("203.0.113.53:53")},
		{"only loopback: the host's resolv.conf", nil, addrs("127.0.0.11", "::1"), nil},
		{"none: the host's resolv.conf", nil, nil, nil},
		{"upstreamResolver overrides", addrPorts("198.51.100.53:5353"), addrs("203.0.113.53"), addrPorts("198.51.100.53:5353")},
	} {
		if got := ProxyResolversFor(tc.override, tc.resolvers); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ProxyResolversFor(%v, %v) = %v, want %v", tc.name, tc.override, tc.resolvers, got, tc.want)
		}
	}
}

// A state an older doorman wrote names one resolver in "proxyResolver":
// it loads as ProxyResolvers, and is saved in the new field only.
func TestLoadOlderProxyResolver(t *testing.T) {
	stateDir, s := fakeSandbox(t, conf.ModeAllowlist)
	path := filepath.Join(s.Dir, stateFile)
	var raw map[string]any
	if err := json.Unmarshal([]byte(readFile(t, path)), &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["proxyResolvers"]; ok {
		t.Fatalf("fake sandbox already has resolvers: %v", raw)
	}
	delete(raw, "version") // as an older doorman wrote it
	raw["proxyResolver"] = "203.0.113.53:53"
	data, _ := json.Marshal(raw)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(stateDir, s.Key)
	if err != nil || !slices.Equal(got.ProxyResolvers, addrPorts("203.0.113.53:53")) {
		t.Fatalf("older state: %v, %v; want the resolver 203.0.113.53:53", got.ProxyResolvers, err)
	}
	if err := got.save(); err != nil {
		t.Fatal(err)
	}
	if saved := readFile(t, path); strings.Contains(saved, `"proxyResolver"`) || !strings.Contains(saved, `"proxyResolvers": [`) {
		t.Errorf("saved again:\n%s", saved)
	}
	// An older state that recorded none: still none (the host's
	// resolv.conf, as its proxy had).
	delete(raw, "proxyResolver")
	data, _ = json.Marshal(raw)
	os.WriteFile(path, data, 0o600)
	if got, err := Load(stateDir, s.Key); err != nil || got.ProxyResolvers != nil {
		t.Errorf("older state without a resolver: %v, %v", got.ProxyResolvers, err)
	}
}

// Leaving mode none starts the new proxy with the resolvers the sandbox
// recorded: its own list, an older doorman's single proxyResolver, or an
// older launch record's. The "proxy" here writes its arguments down and
// fails, so the sandbox stays in mode none.
func TestLeaveNoneKeepsResolvers(t *testing.T) {
	nsPath := newNetNS(t, "resolv")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, s *State, script string)
		want  []string
	}{
		{"recorded in the state", func(t *testing.T, s *State, script string) {
			s.ProxyBinary, s.ProxyResolvers = script, addrPorts("203.0.113.53:53", "[2001:db8::53]:5353")
			if err := s.save(); err != nil {
				t.Fatal(err)
			}
		}, []string{"203.0.113.53:53", "[2001:db8::53]:5353"}},
		{"an older doorman's state", func(t *testing.T, s *State, script string) {
			writeOlderState(t, s, map[string]any{"proxyBinary": script, "proxyResolver": "198.51.100.53:53"})
		}, []string{"198.51.100.53:53"}},
		{"an older doorman's state, the host's resolv.conf", func(t *testing.T, s *State, script string) {
			writeOlderState(t, s, map[string]any{"proxyBinary": script})
		}, nil},
		{"an older launch record", func(t *testing.T, s *State, script string) {
			writeOlderState(t, s, nil)
			data, _ := json.Marshal(map[string]string{"binary": script, "resolver": "198.51.100.54:53"})
			if err := os.WriteFile(filepath.Join(s.Dir, launchFile), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"198.51.100.54:53"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateDir, s := fakeSandbox(t, conf.ModeNone, "api.example.test")
			s.NetNS, s.LogFile = nsPath, filepath.Join(t.TempDir(), "s.log")
			s.Resolvers = []netip.Addr{netip.MustParseAddr("203.0.113.99")}
			if err := s.save(); err != nil {
				t.Fatal(err)
			}
			if err := enforce.Apply(nsPath, enforce.Spec{DenyAll: true}); err != nil {
				t.Fatal(err)
			}
			argsFile := filepath.Join(t.TempDir(), "args")
			script := filepath.Join(t.TempDir(), "proxy")
			if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+argsFile+"\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, s, script)
			_, err := EditPolicy(stateDir, s.Key, func(cur *conf.Policy) (*conf.Policy, error) {
				return &conf.Policy{Mode: conf.ModeAllowlist, Entries: cur.Entries}, nil
			})
			if err == nil {
				t.Fatal("a proxy that exits at once: no error")
			}
			if got := startedResolvers(t, s.Dir, argsFile); !slices.Equal(got, tc.want) {
				t.Errorf("the new proxy's resolvers: %q, want %q", got, tc.want)
			}
		})
	}
}

// startedResolvers are the resolvers of the proxy last started for the
// sandbox in dir: those of its config file, which the proxy was given
// (as the arguments it wrote to argsFile say, where it did: a sandbox an
// older doorman recorded starts this test binary, not the script).
func startedResolvers(t *testing.T, dir, argsFile string) []string {
	t.Helper()
	path := filepath.Join(dir, proxyConfigFile)
	if data, err := os.ReadFile(argsFile); err == nil {
		args := strings.Split(strings.TrimSpace(string(data)), "\n")
		if files := flagValues(args, "config"); len(files) != 1 || files[0] != path {
			t.Fatalf("the proxy was started without --config %s: %q", path, args)
		}
	}
	cfg, err := launch.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ap := range cfg.Resolvers {
		out = append(out, ap.String())
	}
	return out
}

// writeOlderState rewrites s's state file as an older doorman wrote it:
// without version, proxyBinary and proxyResolvers, with the fields in
// extra.
func writeOlderState(t *testing.T, s *State, extra map[string]any) {
	t.Helper()
	path := filepath.Join(s.Dir, stateFile)
	var raw map[string]any
	if err := json.Unmarshal([]byte(readFile(t, path)), &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw, "version")
	delete(raw, "proxyBinary")
	delete(raw, "proxyResolvers")
	for k, v := range extra {
		raw[k] = v
	}
	data, _ := json.Marshal(raw)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A proxy that does not start says why in the error, not only in a file.
func TestProxyStartErrorSaysWhy(t *testing.T) {
	nsPath := newNetNS(t, "starterr")
	stateDir, s := fakeSandbox(t, conf.ModeNone, "api.example.test")
	s.NetNS, s.LogFile = nsPath, filepath.Join(t.TempDir(), "s.log")
	script := filepath.Join(t.TempDir(), "proxy")
	os.WriteFile(script, []byte("#!/bin/sh\necho 'doorman proxy: --resolver \"x\": why' >&2\nexit 1\n"), 0o755)
	s.ProxyBinary = script
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	if err := enforce.Apply(nsPath, enforce.Spec{DenyAll: true}); err != nil {
		t.Fatal(err)
	}
	// Output of an earlier proxy in the same file is not this one's.
	os.WriteFile(s.LogFile+".stderr", []byte("an earlier proxy's last words\n"), 0o640)
	_, err := EditPolicy(stateDir, s.Key, func(cur *conf.Policy) (*conf.Policy, error) {
		return &conf.Policy{Mode: conf.ModeAllowlist, Entries: cur.Entries}, nil
	})
	if err == nil || !strings.Contains(err.Error(), `doorman proxy: --resolver "x": why (in `+s.LogFile+".stderr)") || strings.Contains(err.Error(), "earlier") {
		t.Errorf("start error: %v; want the proxy's own message", err)
	}
}

// A state an older doorman wrote names its OTLP settings file: Load reads
// the settings into the state, which the next proxy's config carries; a
// file that is gone fails that start, saying so, and nothing else.
func TestLoadOlderOTLPConfig(t *testing.T) {
	stateDir, s := fakeSandbox(t, conf.ModeAllowlist)
	otlpFile := filepath.Join(s.Dir, "otlp.json")
	os.WriteFile(otlpFile, []byte(`{"endpoint":"https://otel.example.test:4318","headers":{"Authorization":"Bearer x"}}`), 0o600)
	writeOlderState(t, s, map[string]any{"proxyBinary": "/usr/bin/doorman", "otlpConfig": otlpFile})
	got, err := Load(stateDir, s.Key)
	if err != nil || got.OTLP.Endpoint != "https://otel.example.test:4318" || got.OTLP.Headers["Authorization"] != "Bearer x" || got.legacyErr != nil {
		t.Fatalf("older OTLP settings: %+v, %v", got.OTLP, err)
	}
	if err := got.save(); err != nil {
		t.Fatal(err)
	}
	if saved := readFile(t, filepath.Join(s.Dir, stateFile)); strings.Contains(saved, "otlpConfig") || !strings.Contains(saved, `"endpoint": "https://otel.example.test:4318"`) {
		t.Errorf("saved again:\n%s", saved)
	}
	writeOlderState(t, s, map[string]any{"proxyBinary": "/usr/bin/doorman", "otlp": nil, "otlpConfig": otlpFile + ".gone"})
	got, err = Load(stateDir, s.Key)
	if err != nil || got.legacyErr == nil || !strings.Contains(got.legacyErr.Error(), otlpFile+".gone") {
		t.Fatalf("older state naming a missing OTLP file: %v, %v", got, err)
	}
	if _, err := got.spawnProxy(nil, workerServing); err == nil || !strings.Contains(err.Error(), otlpFile+".gone") {
		t.Errorf("starting its proxy: %v", err)
	}
}

// A proxy started for a sandbox gets the NAT64 prefixes it recorded
// (Spec.NAT64Prefixes) in its config file, as it gets its cluster names.
func TestProxyConfigNAT64Prefixes(t *testing.T) {
	nsPath := newNetNS(t, "nat64")
	stateDir, s := fakeSandbox(t, conf.ModeNone, "api.example.test")
	s.NetNS, s.LogFile = nsPath, filepath.Join(t.TempDir(), "s.log")
	s.NAT64Prefixes = []netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96")}
	s.ProxyBinary = filepath.Join(t.TempDir(), "proxy")
	if err := os.WriteFile(s.ProxyBinary, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	if err := enforce.Apply(nsPath, enforce.Spec{DenyAll: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := EditPolicy(stateDir, s.Key, func(cur *conf.Policy) (*conf.Policy, error) {
		return &conf.Policy{Mode: conf.ModeAllowlist, Entries: cur.Entries}, nil
	}); err == nil {
		t.Fatal("a proxy that exits at once: no error")
	}
	cfg, err := launch.Load(filepath.Join(s.Dir, proxyConfigFile))
	if err != nil || !slices.Equal(cfg.NAT64Prefixes, s.NAT64Prefixes) {
		t.Errorf("the proxy's config: NAT64 prefixes %v, %v; want %v", cfg.NAT64Prefixes, err, s.NAT64Prefixes)
	}
}
