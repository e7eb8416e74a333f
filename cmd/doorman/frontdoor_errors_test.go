package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/annotation"
	"github.com/doorman-net/doorman/cniinstall"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/internal/strictjson"
	"github.com/doorman-net/doorman/plugin"
	"github.com/doorman-net/doorman/proxy/launch"
	"github.com/doorman-net/doorman/spec"
)

// envAsDoorman makes the test binary run main(): the front doors are fed
// the way a runtime or a user feeds the doorman binary.
const envAsDoorman = "DOORMAN_TEST_AS_DOORMAN"

func TestMain(m *testing.M) {
	if os.Getenv(envAsDoorman) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// runDoorman runs this binary as doorman with args, stdin and the extra
// environment env, and returns what it printed (stdout, then stderr).
func runDoorman(t *testing.T, env []string, stdin []byte, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), envAsDoorman+"=1"), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("doorman %s: still running after 20s (the bad value was taken?): %s", strings.Join(args, " "), out.String())
	} else if err == nil {
		t.Errorf("doorman %s: exit 0, want a failure: %s", strings.Join(args, " "), out.String())
	}
	return out.String()
}

// frontDoor is one way settings reach doorman. keys are its keys, listed
// from the code that reads them, so that a key added later without a row
// here fails the test; feed gives the front door a valid input with the
// value of key replaced by value and returns what doorman printed.
type frontDoor struct {
	name string
	keys []string
	feed func(t *testing.T, dir, key, value string) string
	// path is what an error for key must name, in order (default: the
	// key itself).
	path func(key string) []string
	// unknown are misspelt keys, one at each level of nesting, and the
	// value fed with each: each must be refused, naming it.
	unknown map[string]string
}

// badValue is one bad value of a key. value is as the front door takes
// it (JSON for a JSON key, text for a flag, an annotation or a line).
// shown is what the error must hold of it (default: value, or the text
// of a JSON string).
type badValue struct{ value, shown string }

// TestFrontDoorErrors: for every key of every front door, a bad value
// is refused with an error that names the key by its full path, the
// value, and why.
func TestFrontDoorErrors(t *testing.T) {
	for _, door := range frontDoors() {
		t.Run(door.name, func(t *testing.T) {
			for _, key := range door.keys {
				values, ok := badValues[door.name][key]
				if !ok {
					values, ok = badValues["*"][key]
				}
				if !ok {
					t.Errorf("key %s of %s has no bad value in this table: add one", key, door.name)
					continue
				}
				for _, bv := range values {
					out := door.feed(t, t.TempDir(), key, bv.value)
					path := []string{key}
					if door.path != nil {
						path = door.path(key)
					}
					checkError(t, door.name, key, bv, path, out)
				}
			}
			if len(door.unknown) == 0 {
				t.Errorf("%s: no misspelt key is tried", door.name)
			}
			for key, value := range door.unknown {
				out := door.feed(t, t.TempDir(), key, value)
				name := key[strings.LastIndexAny(key, ".- ")+1:]
				if !strings.Contains(out, name) || !(strings.Contains(out, "unknown") || strings.Contains(out, "not defined") || strings.Contains(out, "want ")) {
					t.Errorf("%s: the misspelt key %s is not refused by name:\n%s", door.name, key, out)
				}
			}
		})
	}
}

// checkError checks that out names path (its parts in order), the value,
// and a reason.
func checkError(t *testing.T, door, key string, bv badValue, path []string, out string) {
	t.Helper()
	rest := out
	for _, p := range path {
		i := strings.Index(rest, p)
		if i < 0 {
			t.Errorf("%s: %s=%s: the error does not name %q (path %q):\n%s", door, key, bv.value, p, path, out)
			return
		}
		rest = rest[i+len(p):]
	}
	shown := []string{bv.shown}
	if bv.shown == "" {
		// The value, or (an error may name the element of a list or an
		// object that is bad, by its own path) one of its parts.
		shown = valueTexts(bv.value)
	}
	for _, v := range shown {
		// The value, after the key (or, as the flag package words it,
		// before: `invalid boolean value "x" for -flag: parse error`).
		after := rest
		if i := strings.Index(rest, v); i >= 0 {
			after = rest[i+len(v):]
		} else if !strings.Contains(out[:len(out)-len(rest)], v) {
			continue
		}
		// Why: words after the key and the value.
		why := strings.TrimLeft(after, `"'\]}): `)
		if len(strings.Fields(why)) < 2 {
			t.Errorf("%s: %s=%s: the error does not say why:\n%s", door, key, bv.value, out)
		}
		return
	}
	t.Errorf("%s: %s=%s: the error does not show the value (any of %q):\n%s", door, key, bv.value, shown, out)
}

// valueTexts are the ways an error may show value: as written, and for
// JSON, compact, a string's text, and the keys and leaves of a list or an
// object, longest first.
func valueTexts(value string) []string {
	out := []string{value}
	var v any
	if json.Unmarshal([]byte(value), &v) != nil {
		return out
	}
	var walk func(v any)
	walk = func(v any) {
		b, _ := json.Marshal(v)
		out = append(out, string(b))
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				out = append(out, strconv.Quote(k), k)
				walk(e)
			}
		}
	}
	walk(v)
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// prefixed is keys each prefixed with prefix and ".".
func prefixed(prefix string, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = prefix + "." + k
	}
	return out
}

// flagNames are the flags register defines, as --name.
func flagNames(register func(*flag.FlagSet)) []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	register(fs)
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, "--"+f.Name) })
	return out
}

// flagPath is what an error names a flag by: "-name" (the flag package
// says "-allow-icmp"; doorman's own errors "--allow-icmp").
func flagPath(key string) []string { return []string{strings.TrimPrefix(key, "-")} }

// setPath puts value (JSON) at the dotted key in obj; a part ending in
// "[]" is a list of one object. The inspected host and the
// pod-annotations capability are one part each, and so is an annotation
// after the latter, dots and all.
func setPath(obj map[string]any, key string, value string) {
	var parts []string
	if before, after, ok := strings.Cut(key, cniinstall.CapPodAnnotations); ok {
		// An annotation's name is one key, dots and all.
		parts = append(strings.Split(strings.TrimSuffix(before, "."), "."), cniinstall.CapPodAnnotations)
		if after = strings.TrimPrefix(after, "."); after != "" {
			parts = append(parts, after)
		}
	} else if before, after, ok := strings.Cut(key, inspectHost); ok {
		parts = append(strings.Split(strings.TrimSuffix(before, "."), "."), inspectHost)
		if after = strings.TrimPrefix(after, "."); after != "" {
			parts = append(parts, strings.Split(after, ".")...)
		}
	} else {
		parts = strings.Split(key, ".")
	}
	for _, p := range parts[:len(parts)-1] {
		if name, ok := strings.CutSuffix(p, "[]"); ok {
			next := map[string]any{}
			obj[name] = []any{next}
			obj = next
			continue
		}
		next, ok := obj[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[p] = next
		}
		obj = next
	}
	obj[parts[len(parts)-1]] = json.RawMessage(value)
}

// write writes data to path, making its directory; it panics (t nil) or
// fails t if it cannot.
func write(t *testing.T, path string, data []byte) string {
	err := os.MkdirAll(filepath.Dir(path), 0o755)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil && t == nil {
		panic(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// inspectHost is the host whose rules the inspect rows hold.
const inspectHost = "api.example.com"

// A valid policy file.
const validPolicy = "mode: allowlist\napi.example.com\n"

// cniEntry is a conflist entry that ADD would take but for key=value.
func cniEntry(dir, key, value string) []byte {
	entry := map[string]any{
		"cniVersion": "1.0.0", "name": "net", "type": "doorman",
		"stateDir": filepath.Join(dir, "state"), "logDir": filepath.Join(dir, "log"), "caDir": filepath.Join(dir, "ca"),
		"resolvers": []string{"203.0.113.53"},
		"prevResult": map[string]any{"cniVersion": "1.0.0",
			"interfaces": []any{map[string]any{"name": "eth0", "sandbox": "/x"}},
			"ips":        []any{map[string]any{"address": "198.51.100.2/24", "interface": 0}}},
	}
	switch {
	case strings.HasPrefix(key, "inspect."):
		entry["allowedHosts"] = []string{inspectHost}
		if strings.Contains(key, ".inject[].") {
			// A valid injection, but for the key.
			inject := map[string]any{"header": "x-api-key", "placeholder": "dm-placeholder-test",
				"secretFile": write(nil, filepath.Join(dir, "secret"), []byte("sk-test\n"))}
			k := key[strings.LastIndex(key, ".")+1:]
			if k == "placeholderSHA256" {
				delete(inject, "placeholder")
			}
			inject[k] = json.RawMessage(value)
			entry["inspect"] = map[string]any{inspectHost: map[string]any{"inject": []any{inject}}}
			return mustJSON(entry)
		}
	case strings.HasPrefix(key, "runtimeConfig.dns"):
		delete(entry, "resolvers") // the dns capability's servers are read
	case key == "otlpInsecure" || key == "otlpHeaders":
		entry["otlpEndpoint"] = "http://127.0.0.1:4318"
	}
	setPath(entry, key, value)
	return mustJSON(entry)
}

// cniAdd runs the plugin's ADD with entry on stdin, in a namespace that
// is a plain file: a bad value must refuse the ADD before it is opened.
func cniAdd(t *testing.T, dir string, entry []byte, args string) string {
	netns := write(t, filepath.Join(dir, "netns"), nil)
	out := runDoorman(t, []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=" + netns, "CNI_IFNAME=eth0",
		"CNI_PATH=" + dir, "CNI_ARGS=" + args}, entry)
	// The CNI error, as the runtime reads it: its JSON decoded.
	var e struct{ Msg, Details string }
	dec := json.NewDecoder(strings.NewReader(out))
	if dec.Decode(&e) != nil {
		return out
	}
	return e.Msg + ": " + e.Details
}

// hookCreate runs `doorman hook createRuntime` for a container whose
// bundle has annotations, with flags; its namespace is a plain file.
func hookCreate(t *testing.T, dir string, annotations map[string]string, flags ...string) string {
	netns := write(t, filepath.Join(dir, "netns"), nil)
	bundle := filepath.Join(dir, "bundle")
	write(t, filepath.Join(bundle, "config.json"), mustJSON(map[string]any{
		"ociVersion": "1.0.2", "annotations": annotations,
		"linux": map[string]any{"namespaces": []any{map[string]any{"type": "network", "path": netns}}},
	}))
	state := mustJSON(map[string]any{"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 0, "bundle": bundle})
	args := append([]string{"hook", "--state-dir", filepath.Join(dir, "state"), "--log-dir", filepath.Join(dir, "log"),
		"--otlp-config", filepath.Join(dir, "no-otlp.json"), "--limits-config", filepath.Join(dir, "no-limits.json"),
		"--default-policy", write(t, filepath.Join(dir, "default.policy"), []byte(validPolicy))}, flags...)
	return runDoorman(t, nil, state, append(args, "createRuntime")...)
}

// runtimeCreate runs the runc wrapper's create with the runtime.json
// config and a Docker container whose labels are labels; its runc is
// false(1), should a bad value be taken.
func runtimeCreate(t *testing.T, dir string, config map[string]any, labels map[string]string) string {
	docker := filepath.Join(dir, "docker")
	write(t, filepath.Join(docker, "containers", "c1", "config.v2.json"),
		mustJSON(map[string]any{"Name": "/web", "Config": map[string]any{"Labels": labels}}))
	bundle := filepath.Join(dir, "bundle")
	write(t, filepath.Join(bundle, "config.json"), mustJSON(map[string]any{"ociVersion": "1.0.2",
		"linux": map[string]any{"namespaces": []any{map[string]any{"type": "network"}}}}))
	base := map[string]any{"runc": "/bin/false", "dockerRoot": docker, "stateDir": filepath.Join(dir, "state"),
		"logDir": filepath.Join(dir, "log"), "caDir": filepath.Join(dir, "ca"),
		"defaultPolicy": write(t, filepath.Join(dir, "default.policy"), []byte(validPolicy))}
	raw := mustJSON(base)
	if config != nil {
		var m map[string]any
		json.Unmarshal(raw, &m)
		for k, v := range config {
			setPath(m, k, string(v.(json.RawMessage)))
		}
		raw = mustJSON(m)
	}
	cfg := write(t, filepath.Join(dir, "runtime.json"), raw)
	return runDoorman(t, []string{"DOORMAN_RUNTIME_CONFIG=" + cfg}, nil, "runtime", "create", "--bundle", bundle, "c1")
}

// jsonFile is {key: value} (key dotted) as a file's content.
func jsonFile(key, value string) []byte {
	m := map[string]any{}
	setPath(m, key, value)
	return mustJSON(m)
}

func frontDoors() []frontDoor {
	limitKeys := strictjson.Keys(spec.Limits{})
	proxyLimitKeys := strictjson.Keys(spec.ProxyLimitsConfig{})

	// The conflist entry: doorman's keys, with those of its nested
	// objects.
	var cniKeys []string
	for _, k := range plugin.Keys {
		cniKeys = append(cniKeys, k)
		switch k {
		case "limits":
			cniKeys = append(cniKeys, prefixed(k, limitKeys)...)
		case "proxyLimits":
			cniKeys = append(cniKeys, prefixed(k, proxyLimitKeys)...)
		case "inspect":
			cniKeys = append(cniKeys, k+".rulesets")
			cniKeys = append(cniKeys, prefixed(k+"."+inspectHost, conf.InspectJSONKeys())...)
		}
	}
	// runtimeConfig: the capabilities the entry declares, and the pod
	// annotations that carry a policy.
	rc := "runtimeConfig."
	rcKeys := []string{rc + cniinstall.CapDNS, rc + cniinstall.CapCgroupPath, rc + cniinstall.CapPodAnnotations}
	rcKeys = append(rcKeys, prefixed(rc+cniinstall.CapDNS, []string{"servers", "searches", "options"})...)
	rcKeys = append(rcKeys, prefixed(rc+cniinstall.CapPodAnnotations, annotation.Keys)...)

	// The proxy's config file, every key of its nested objects too.
	var proxyKeys []string
	for _, k := range strictjson.Keys(launch.Config{}) {
		proxyKeys = append(proxyKeys, k)
		switch k {
		case "limits":
			proxyKeys = append(proxyKeys, prefixed(k, limitKeys)...)
		case "listeners":
			proxyKeys = append(proxyKeys, prefixed(k, strictjson.Keys(launch.Listeners{}))...)
		case "otlp":
			proxyKeys = append(proxyKeys, prefixed(k, strictjson.Keys(spec.OTLP{}))...)
		case "clusterNames":
			proxyKeys = append(proxyKeys, prefixed(k+"[]", strictjson.Keys(spec.NameScope{}))...)
		}
	}
	runtimeKeys := strictjson.Keys(hook.RuntimeConfig{})
	runtimeKeys = append(runtimeKeys, prefixed("proxyLimits", proxyLimitKeys)...)

	// The policy file: the mode line, an entry, and each verb of a rule
	// line.
	policyKeys := []string{"mode", "entry", "ruleset"}
	for _, v := range conf.InspectVerbs {
		policyKeys = append(policyKeys, "inspect "+v)
	}

	idx := func(path string) []string {
		// "clusterNames[].domain" is named clusterNames[0].domain.
		return []string{strings.ReplaceAll(path, "[]", "[0]")}
	}
	return []frontDoor{
		{
			name: "conflist entry",
			keys: cniKeys,
			unknown: map[string]string{"allowedHost": `["x"]`, "limits.conections": `1`, "proxyLimits.memroy": `"1g"`,
				"inspect." + inspectHost + ".denny": `[]`, "inspect." + inspectHost + ".deny[].methd": `"GET"`},
			feed: func(t *testing.T, dir, key, value string) string {
				return cniAdd(t, dir, cniEntry(dir, key, value), "")
			},
			path: func(key string) []string {
				if rest, ok := strings.CutPrefix(key, "inspect."+inspectHost); ok {
					p := []string{"inspect", inspectHost}
					if rest != "" {
						parts := strings.Split(strings.TrimPrefix(rest, "."), ".")
						for i := range parts {
							parts[i] = strings.ReplaceAll(parts[i], "[]", "[0]")
						}
						p = append(p, parts...)
					}
					return p
				}
				return []string{key}
			},
		},
		{
			name:    "conflist runtimeConfig",
			keys:    rcKeys,
			unknown: map[string]string{rc + cniinstall.CapPodAnnotations + ".doorman.io/allowed-host": `"x"`},
			feed: func(t *testing.T, dir, key, value string) string {
				return cniAdd(t, dir, cniEntry(dir, key, value), "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod")
			},
			path: func(key string) []string {
				if a, ok := strings.CutPrefix(key, rc+cniinstall.CapPodAnnotations+"."); ok {
					return []string{"pod ns/pod", a}
				}
				return []string{"runtimeConfig", strings.TrimPrefix(key, rc)}
			},
		},
		{
			name:    "OCI annotations",
			keys:    append(slices.Clone(annotation.Keys), hook.AnnotationInspect),
			unknown: map[string]string{"doorman.io/allowed-host": "api.example.com"},
			feed: func(t *testing.T, dir, key, value string) string {
				return hookCreate(t, dir, map[string]string{key: value})
			},
		},
		{
			name:    "Docker labels",
			keys:    hook.DockerLabels,
			unknown: map[string]string{"doorman.io/allowed-host": "api.example.com"},
			feed: func(t *testing.T, dir, key, value string) string {
				return runtimeCreate(t, dir, nil, map[string]string{key: value})
			},
		},
		{
			name:    "runtime.json",
			keys:    runtimeKeys,
			unknown: map[string]string{"stateDirectory": `"/run/x"`, "proxyLimits.mem": `"1g"`},
			feed: func(t *testing.T, dir, key, value string) string {
				return runtimeCreate(t, dir, map[string]any{key: json.RawMessage(value)}, nil)
			},
		},
		{
			name:    "doorman run flags",
			unknown: map[string]string{"--alow": "x"},
			keys:    flagNames(func(fs *flag.FlagSet) { new(runFlags).register(fs) }),
			path:    flagPath,
			feed: func(t *testing.T, dir, key, value string) string {
				args := []string{"run", key + "=" + value}
				if key != "--cni-path" {
					// Should the value be taken, the run stops at
					// finding its plugins, before it makes anything.
					args = append(args, "--cni-path", filepath.Join(dir, "no-plugins"))
				}
				if key != "--run-dir" {
					args = append(args, "--run-dir", filepath.Join(dir, "run"))
				}
				return runDoorman(t, nil, nil, append(args, "--", "true")...)
			},
		},
		{
			name:    "doorman run --limits file",
			keys:    prefixed("limits", limitKeys),
			unknown: map[string]string{"limits.conections": `1`},
			feed: func(t *testing.T, dir, key, value string) string {
				f := write(t, filepath.Join(dir, "limits.json"), jsonFile(strings.TrimPrefix(key, "limits."), value))
				return runDoorman(t, nil, nil, "run", "--limits", f, "--cni-path", filepath.Join(dir, "no-plugins"),
					"--run-dir", filepath.Join(dir, "run"), "--", "true")
			},
		},
		{
			name:    "installer config",
			keys:    strictjson.Keys(cniinstall.Config{}),
			unknown: map[string]string{"allowedHost": `["x"]`, "limits.conections": `1`},
			feed: func(t *testing.T, dir, key, value string) string {
				f := write(t, filepath.Join(dir, "config.json"), jsonFile(key, value))
				return runDoorman(t, nil, nil, "install-cni", "--config", f, "--once", "--check",
					"--cni-bin-dir", filepath.Join(dir, "bin"), "--cni-conf-dir", filepath.Join(dir, "net.d"))
			},
		},
		{
			name:    "limits.json",
			keys:    prefixed("limits", limitKeys),
			unknown: map[string]string{"limits.conections": `1`},
			feed: func(t *testing.T, dir, key, value string) string {
				f := write(t, filepath.Join(dir, "limits.json"), jsonFile(strings.TrimPrefix(key, "limits."), value))
				return hookCreate(t, dir, nil, "--limits-config", f)
			},
		},
		{
			name:    "otlp.json",
			keys:    strictjson.Keys(spec.OTLP{}),
			unknown: map[string]string{"header": `{}`},
			feed: func(t *testing.T, dir, key, value string) string {
				m := map[string]any{}
				if key != "endpoint" {
					m["endpoint"] = "http://127.0.0.1:4318"
				}
				setPath(m, key, value)
				f := write(t, filepath.Join(dir, "otlp.json"), mustJSON(m))
				return hookCreate(t, dir, nil, "--otlp-config", f)
			},
		},
		{
			name:    "doorman hook flags",
			unknown: map[string]string{"--state-directory": "/run/x"},
			keys:    flagNames(func(fs *flag.FlagSet) { new(hookFlags).register(fs) }),
			path:    flagPath,
			feed: func(t *testing.T, dir, key, value string) string {
				return hookCreate(t, dir, nil, key+"="+value)
			},
		},
		{
			name: "proxy config",
			keys: proxyKeys,
			unknown: map[string]string{"resolver": `[]`, "listeners.tpc": `[3]`, "otlp.queue": `1`,
				"clusterNames[].domains": `[]`, "limits.conections": `1`},
			feed: func(t *testing.T, dir, key, value string) string {
				m := map[string]any{}
				json.Unmarshal(mustJSON(map[string]any{
					"sandbox": "s", "policyFile": write(t, filepath.Join(dir, "policy"), []byte(validPolicy)),
					"logFile": filepath.Join(dir, "log"), "listeners": map[string]any{"tcp": []int{99}},
				}), &m)
				if strings.HasPrefix(key, "clusterNames[].") {
					m["clusterNames"] = []any{map[string]any{"domain": "cluster.local", "prefixes": []string{"10.96.0.0/12"}}}
					m["clusterNames"].([]any)[0].(map[string]any)[strings.TrimPrefix(key, "clusterNames[].")] = json.RawMessage(value)
				} else {
					setPath(m, key, value)
					if strings.HasPrefix(key, "otlp.") && key != "otlp.endpoint" {
						m["otlp"].(map[string]any)["endpoint"] = "http://127.0.0.1:4318"
					}
				}
				f := write(t, filepath.Join(dir, "proxy.json"), mustJSON(m))
				return runDoorman(t, nil, nil, "proxy", "--config", f)
			},
			path: idx,
		},
		{
			name:    "policy file",
			keys:    policyKeys,
			unknown: map[string]string{"inspect denny": "inspect " + api + " denny GET"},
			feed: func(t *testing.T, dir, key, value string) string {
				f := write(t, filepath.Join(dir, "bad.policy"), []byte(api+"\n"+value+"\n"))
				return hookCreate(t, dir, nil, "--default-policy", f)
			},
			path: func(key string) []string {
				if v, ok := strings.CutPrefix(key, "inspect "); ok {
					return []string{"bad.policy:2", "inspect " + inspectHost, v}
				}
				if key == "mode" {
					return []string{"bad.policy:2", "mode"}
				}
				return []string{"bad.policy:2"}
			},
		},
	}
}

const api = "api.example.com"

// badValues are the bad values of each key, by front door ("*": any
// front door with that key).
var badValues = map[string]map[string][]badValue{
	"*": {
		// doorman's keys in a conflist entry and the installer's config.
		"mode":                                     {{value: `"permissive"`}, {value: `3`}},
		"allowedHosts":                             {{value: `["https://api.example.com/"]`}, {value: `"api.example.com"`}},
		"excludeNamespaces":                        {{value: `["Kube_System"]`}, {value: `"kube-system"`}},
		"clusterDomain":                            {{value: `"*.cluster.local"`}, {value: `1`}},
		"serviceCIDRs":                             {{value: `["10.96.0.1/12"]`}, {value: `"10.96.0.0/12"`}},
		"podCIDRs":                                 {{value: `["pods"]`}, {value: `[1]`}},
		"nat64Prefixes":                            {{value: `["2001:db8:64::/80"]`}, {value: `["10.0.0.0/8"]`}, {value: `"64:ff9b::/96"`}},
		"allowDirect":                              {{value: `["db.example.com"]`}, {value: `"203.0.113.7"`}},
		"resolvers":                                {{value: `["dns.example.com"]`}, {value: `"203.0.113.53"`}},
		"upstreamResolver":                         {{value: `"dns.example.com"`}, {value: `["203.0.113.53"]`}},
		"policyDir":                                {{value: `"policies"`}, {value: `true`}},
		"stateDir":                                 {{value: `"run/doorman"`}, {value: `1`}},
		"logDir":                                   {{value: `"/var/log/../log"`}, {value: `[]`}},
		"otlpEndpoint":                             {{value: `"ftp://collector.example.com"`}, {value: `4318`}},
		"otlpInsecure":                             {{value: `"yes"`}},
		"otlpHeaders":                              {{value: `{"bad name": "x"}`, shown: `"bad name"`}, {value: `["authorization"]`}},
		"dnsFilter":                                {{value: `"off"`}},
		"hostLayer":                                {{value: `0`}},
		"allowICMP":                                {{value: `"true"`}},
		"inspect":                                  {{value: `["api.example.com"]`}, {value: `{"https://api.example.com": {}}`, shown: "https://api.example.com"}},
		"caDir":                                    {{value: `"ca"`}, {value: `{}`}},
		"upstreamCAFile":                           {{value: `"roots.pem"`}},
		"limits":                                   {{value: `"4096"`}},
		"proxyLimits":                              {{value: `256`}},
		"agent":                                    {{value: `{"withoutAgent": "open"}`, shown: `"open"`}, {value: `{"wait": "2m"}`, shown: "2m"}, {value: `"on"`}},
		"limits.connections":                       {{value: `-1`}, {value: `"many"`}},
		"limits.pending":                           {{value: `-5`}, {value: `1.5`}},
		"limits.pendingBytes":                      {{value: `1000`}, {value: `"16MiB"`}},
		"limits.sniffTimeout":                      {{value: `"ten seconds"`}, {value: `10`}, {value: `"-1s"`}},
		"limits.perUpstream":                       {{value: `-1`}, {value: `true`}},
		"limits.idleTimeout":                       {{value: `"an hour"`}, {value: `3600`}},
		"limits.dnsQueriesPerSecond":               {{value: `-3`}, {value: `"fast"`}},
		"limits.logMaxSize":                        {{value: `1024`}, {value: `"64MiB"`}},
		"limits.bufferBytes":                       {{value: `65536`}, {value: `-1`}, {value: `"64MiB"`}},
		"limits.heartbeatTimeout":                  {{value: `"100ms"`}, {value: `"-2s"`}, {value: `5`}},
		"proxyLimits.memory":                       {{value: `"64"`}, {value: `"lots"`}, {value: `[]`}},
		"proxyLimits.pids":                         {{value: `"4"`}, {value: `"many"`}},
		"proxyLimits.cpuWeight":                    {{value: `0`}, {value: `20000`}, {value: `{}`}},
		"inspect.rulesets":                         {{value: `["open-book"]`}, {value: `[{"name": "closed-book", "action": "block"}]`, shown: "block"}, {value: `"closed-book"`}},
		"inspect." + api + ".deny":                 {{value: `{"method": "POST"}`}},
		"inspect." + api + ".allow":                {{value: `"GET"`}},
		"inspect." + api + ".default":              {{value: `"maybe"`}, {value: `false`}},
		"inspect." + api + ".inject":               {{value: `{"header": "x"}`}},
		"inspect." + api + ".maxBody":              {{value: `-1`}, {value: `"1MiB"`}},
		"inspect." + api + ".deny[].method":        {{value: `"post"`}, {value: `5`}},
		"inspect." + api + ".deny[].path":          {{value: `"v1/messages"`}, {value: `["/a"]`}},
		"inspect." + api + ".deny[].query":         {{value: `{"a b": "x"}`, shown: "a b"}, {value: `"a=b"`}},
		"inspect." + api + ".deny[].header":        {{value: `{"bad header": "x"}`, shown: "bad header"}, {value: `["x-api-key"]`}},
		"inspect." + api + ".deny[].json":          {{value: `{"a..b": "x"}`, shown: "a..b"}, {value: `"model"`}},
		"inspect." + api + ".allow[].method":       {{value: `"GET HEAD"`}},
		"inspect." + api + ".allow[].path":         {{value: `"*/x"`}},
		"inspect." + api + ".allow[].query":        {{value: `{"a&b": "x"}`, shown: "a&b"}},
		"inspect." + api + ".allow[].header":       {{value: `{"": "x"}`, shown: `""`}},
		"inspect." + api + ".allow[].json":         {{value: `{"[x]": "y"}`, shown: "[x]"}},
		"inspect." + api + ".inject[].header":      {{value: `"bad header"`}},
		"inspect." + api + ".inject[].placeholder": {{value: `"dm placeholder"`}},
		"inspect." + api + ".inject[].placeholderSHA256": {{value: `"zz"`}},
		"inspect." + api + ".inject[].secretFile":        {{value: `"secrets/x"`}},
		// runtimeConfig.
		"runtimeConfig.dns":                                                        {{value: `["203.0.113.53"]`}},
		"runtimeConfig.dns.servers":                                                {{value: `["dns.example.com"]`}, {value: `"203.0.113.53"`}},
		"runtimeConfig.dns.searches":                                               {{value: `[1]`}},
		"runtimeConfig.dns.options":                                                {{value: `"ndots:5"`}},
		"runtimeConfig.cgroupPath":                                                 {{value: `"kubepods/../x"`}, {value: `7`}},
		"runtimeConfig.io.kubernetes.cri.pod-annotations":                          {{value: `["doorman.io/mode=open"]`}},
		"runtimeConfig.io.kubernetes.cri.pod-annotations.doorman.io/mode":          {{value: `"permissive"`}},
		"runtimeConfig.io.kubernetes.cri.pod-annotations.doorman.io/allowed-hosts": {{value: `"api.example.com,https://x/"`, shown: "https://x/"}},
		"runtimeConfig.io.kubernetes.cri.pod-annotations.doorman.io/allow-direct":  {{value: `"db.example.com"`}},
		"runtimeConfig.io.kubernetes.cri.pod-annotations.doorman.io/rulesets":      {{value: `"closed-bok"`}, {value: `"closed-book:block"`}},
		// Annotations and labels (the text of the value).
		annotation.Mode:         {{value: "permissive"}},
		annotation.AllowedHosts: {{value: "api.example.com, https://x/", shown: "https://x/"}},
		annotation.AllowDirect:  {{value: "203.0.113.7, db.example.com", shown: "db.example.com"}},
		annotation.RuleSets:     {{value: "closed-bok"}, {value: "closed-book:block", shown: "block"}, {value: "closed-book,closed-book:strip", shown: "closed-book"}},
		hook.AnnotationInspect:  {{value: `{"api.example.com": {"default": "maybe"}}`, shown: "maybe"}, {value: `[1]`}, {value: `{"rulesets": ["open-book"]}`, shown: "open-book"}},
	},
	"runtime.json": {
		"runc":                  {{value: `1`}},
		"dockerRoot":            {{value: `["/var/lib/docker"]`}},
		"stateDir":              {{value: `"run/doorman"`}, {value: `1`}},
		"logDir":                {{value: `"log"`}},
		"defaultPolicy":         {{value: `"default.policy"`}},
		"upstreamResolver":      {{value: `"dns.example.com"`}},
		"allowICMP":             {{value: `"no"`}},
		"dnsFilter":             {{value: `1`}},
		"hostLayer":             {{value: `"on"`}},
		"caDir":                 {{value: `"ca"`}},
		"upstreamCAFile":        {{value: `"roots.pem"`}},
		"proxyLimits":           {{value: `"256Mi"`}},
		"proxyLimits.memory":    {{value: `"64"`}, {value: `true`}},
		"proxyLimits.pids":      {{value: `"4"`}},
		"proxyLimits.cpuWeight": {{value: `0`}},
		"runtimes":              {{value: `["runsc"]`}, {value: `{"runsc": {"path": "bin/runsc"}}`, shown: "bin/runsc"}, {value: `{"runsc": {"path": "runsc", "args": ["systrap"]}}`, shown: "systrap"}},
	},
	"installer config": {
		"mode":              {{value: `"permissive"`}},
		"allowedHosts":      {{value: `["https://api.example.com/"]`}},
		"excludeNamespaces": {{value: `["Kube_System"]`}},
		"clusterDomain":     {{value: `"*.cluster.local"`}},
		"serviceCIDRs":      {{value: `["10.96.0.1/12"]`}},
		"podCIDRs":          {{value: `["pods"]`}},
		"nat64Prefixes":     {{value: `["2001:db8:64::/80"]`}},
		"allowDirect":       {{value: `["db.example.com"]`}},
		"resolvers":         {{value: `["dns.example.com"]`}},
		"upstreamResolver":  {{value: `"dns.example.com"`}},
		"policyDir":         {{value: `"policies"`}},
		"stateDir":          {{value: `"run/doorman"`}},
		"logDir":            {{value: `"log"`}},
		"otlpEndpoint":      {{value: `"ftp://collector.example.com"`}},
		"otlpInsecure":      {{value: `"yes"`}},
		"otlpHeaders":       {{value: `["authorization"]`}},
		"dnsFilter":         {{value: `"off"`}},
		"hostLayer":         {{value: `0`}},
		"allowICMP":         {{value: `"true"`}},
		"inspect":           {{value: `["api.example.com"]`}},
		"caDir":             {{value: `"ca"`}},
		"upstreamCAFile":    {{value: `"roots.pem"`}},
		"limits":            {{value: `{"sniffTimeout": "ten seconds"}`, shown: "ten seconds"}},
		"proxyLimits":       {{value: `{"memory": "64"}`, shown: "64"}},
	},
	"otlp.json": {
		"endpoint":  {{value: `"ftp://collector.example.com"`}, {value: `4318`}},
		"insecure":  {{value: `"yes"`}},
		"headers":   {{value: `{"bad name": "x"}`, shown: `"bad name"`}, {value: `{"a": 1}`}},
		"queueSize": {{value: `-1`}, {value: `"big"`}},
	},
	"doorman run flags": {
		"--mode":              {{value: "permissive"}},
		"--policy":            {{value: "/nonexistent/doorman.policy"}},
		"--upstream-resolver": {{value: "dns.example.com"}},
		"--allow-icmp":        {{value: "maybe"}},
		"--bridge":            {{value: "br/0"}},
		"--cni-path":          {{value: "/nonexistent/cni"}},
		"--name":              {{value: "bad name"}},
		"--state-dir":         {{value: "run/doorman"}},
		"--log-dir":           {{value: "log"}},
		"--run-dir":           {{value: "run"}},
		"--limits":            {{value: "/nonexistent/limits.json"}},
		"--user":              {{value: "no-such-user-doorman"}},
		"--runtime":           {{value: "runc"}, {value: "/nonexistent/runsc"}},
		"--runtime-arg":       {{value: "platform"}, {value: "--platform=systrap"}},
		"--ca-dir":            {{value: "ca"}},
		"--upstream-ca-file":  {{value: "roots.pem"}},
		"--allow":             {{value: "https://api.example.com/"}},
		"--allow-direct":      {{value: "db.example.com"}},
		"--ruleset":           {{value: "closed-bok"}, {value: "closed-book:block", shown: "block"}},
		"--dns":               {{value: "dns.example.com"}},
		"--subnet":            {{value: "10.1.2.3/24"}, {value: "subnet"}},
		"--nat64-prefix":      {{value: "2001:db8:64::/80"}, {value: "10.0.0.0/8"}},
		"--proxy-memory":      {{value: "64"}},
		"--proxy-pids":        {{value: "many"}},
		"--proxy-cpu-weight":  {{value: "0"}},
	},
	"doorman hook flags": {
		"--state-dir":         {{value: "run/doorman"}},
		"--log-dir":           {{value: "log"}},
		"--default-policy":    {{value: "/nonexistent/default.policy"}},
		"--upstream-resolver": {{value: "dns.example.com"}},
		"--ca-dir":            {{value: "ca"}},
		"--upstream-ca-file":  {{value: "roots.pem"}},
		"--allow-icmp":        {{value: "maybe"}},
		"--otlp-config":       {{value: "/etc"}},
		"--limits-config":     {{value: "/etc"}},
		"--host-layer":        {{value: "sometimes"}},
		"--dns-filter":        {{value: "2"}},
		"--nat64-prefix":      {{value: "2001:db8:64::1/96"}},
		"--proxy-memory":      {{value: "64"}},
		"--proxy-pids":        {{value: "4"}},
		"--proxy-cpu-weight":  {{value: "10001"}},
	},
	"proxy config": {
		"sandbox":                 {{value: `1`}},
		"podUID":                  {{value: `[]`}},
		"policyFile":              {{value: `false`}},
		"logFile":                 {{value: `{}`}},
		"resolvers":               {{value: `["dns.example.com"]`}},
		"nat64Prefixes":           {{value: `["2001:db8:64::/80"]`}, {value: `["64:ff9b::"]`}},
		"dnsUpstreams":            {{value: `["203.0.113.53"]`}},
		"allowDirect":             {{value: `["db.example.com"]`}},
		"clusterNames":            {{value: `{"domain": "cluster.local"}`}},
		"clusterNames[].domain":   {{value: `"Cluster.Local"`}},
		"clusterNames[].prefixes": {{value: `["10.96.0.1/12"]`}, {value: `"10.96.0.0/12"`}},
		"netns":                   {{value: `1`}},
		"hostLayerKey":            {{value: `1`}, {value: `"../x"`}},
		"hostDropsState":          {{value: `"hostdrops.json"`}, {value: `7`}},
		"otlp":                    {{value: `"http://127.0.0.1:4318"`}},
		"otlp.endpoint":           {{value: `"ftp://collector.example.com"`}},
		"otlp.insecure":           {{value: `"yes"`}},
		"otlp.headers":            {{value: `{"bad name": "x"}`, shown: `"bad name"`}},
		"otlp.queueSize":          {{value: `-1`}},
		"sniffTimeout":            {{value: `"ten seconds"`}},
		"drainTimeout":            {{value: `"-1s"`}},
		"caDir":                   {{value: `7`}},
		"upstreamCAFile":          {{value: `["x"]`}},
		"listeners":               {{value: `[3]`}},
		"listeners.tcp":           {{value: `[1]`}, {value: `["3"]`}},
		"listeners.dnsUDP":        {{value: `[2]`}},
		"listeners.dnsTCP":        {{value: `"4"`}},
		"listeners.addrs":         {{value: `[80]`}},
	},
	"policy file": {
		"mode":            {{value: "mode: permissive", shown: "permissive"}},
		"entry":           {{value: "https://api.example.com/"}},
		"ruleset":         {{value: "ruleset closed-bok", shown: "closed-bok"}, {value: "ruleset closed-book block", shown: "block"}},
		"inspect allow":   {{value: "inspect " + api + " allow query:a&b", shown: "a&b"}, {value: "inspect " + api + " allow get", shown: "get"}},
		"inspect deny":    {{value: "inspect " + api + " deny json:a..b", shown: "a..b"}, {value: "inspect " + api + " deny colour:red", shown: "colour:red"}},
		"inspect default": {{value: "inspect " + api + " default maybe", shown: "maybe"}},
		"inspect inject": {
			{value: "inspect " + api + " inject x-api-key sha256:zz /etc/doorman/secrets/x", shown: "sha256:zz"},
			{value: "inspect " + api + " inject x-api-key dm-placeholder secrets/x", shown: "secrets/x"},
			{value: "inspect " + api + " inject bad:header dm-placeholder /etc/doorman/secrets/x", shown: "bad:header"},
		},
		"inspect max-body": {{value: "inspect " + api + " max-body lots", shown: "lots"}},
	},
}
