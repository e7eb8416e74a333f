package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/annotation"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/internal/atomicfile"
	"github.com/doorman-net/doorman/internal/runtimekind"
	"github.com/doorman-net/doorman/internal/strictjson"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// RuntimeConfigFile configures the runtime wrapper; it is optional.
const RuntimeConfigFile = "/etc/doorman/runtime.json"

// DockerLabels are the container labels the runc wrapper reads from
// Docker's own container config and passes to the hook as annotations,
// for a container whose spec has no doorman.io/mode nor
// doorman.io/allowed-hosts annotation. Any other doorman.io/* label is
// passed on too, and refused as unknown.
var DockerLabels = []string{AnnotationMode, AnnotationAllowedHosts, AnnotationAllowDirect, AnnotationRuleSets, AnnotationInspect}

// annotationDockerName carries a Docker container's name into the hook.
const annotationDockerName = "doorman.io/container-name"

// Environment variables the wrapper sets in every container it starts.
const (
	EnvNetworkMode = "DOORMAN_NETWORK_MODE"
	EnvEnforcement = "DOORMAN_ENFORCEMENT"
)

// RuntimeConfig is the wrapper's configuration (RuntimeConfigFile, JSON).
// dockerd starts the wrapper with runc's arguments only, so this file is
// where the wrapper learns everything else.
type RuntimeConfig struct {
	// Runc is the real runc (default: "runc" on PATH, not this binary).
	Runc string `json:"runc,omitempty"`
	// DockerRoot is dockerd's data root, where containers/<id>/config.v2.json
	// holds a container's labels (default /var/lib/docker).
	DockerRoot    string `json:"dockerRoot,omitempty"`
	StateDir      string `json:"stateDir,omitempty"`
	LogDir        string `json:"logDir,omitempty"`
	DefaultPolicy string `json:"defaultPolicy,omitempty"`
	// UpstreamResolver is the DNS server ("addr" or "addr:port", see
	// resolver.ParseServer) the proxies resolve allowed names with;
	// default each container's own resolvers.
	UpstreamResolver string `json:"upstreamResolver,omitempty"`
	// AllowICMP lets echo requests (at most 64 bytes of data) out to
	// the allowDirect destinations (default false).
	AllowICMP *bool `json:"allowICMP,omitempty"`
	// DNSFilter sends containers' DNS through the proxy's filter
	// (default true).
	DNSFilter *bool `json:"dnsFilter,omitempty"`
	// HostLayer adds the host-side layer on each container's veth
	// (default true).
	HostLayer *bool `json:"hostLayer,omitempty"`
	// CADir holds the networks' CAs (default /var/lib/doorman/ca); the
	// hook's containers share CADir/hook. UpstreamCAFile, if set, holds
	// the PEM roots inspected hosts are verified against.
	CADir          string `json:"caDir,omitempty"`
	UpstreamCAFile string `json:"upstreamCAFile,omitempty"`
	// ProxyLimits are the limits of each proxy's cgroup: {"memory":
	// "256Mi", "pids": 512, "cpuWeight": 100} (the defaults).
	ProxyLimits *spec.ProxyLimitsConfig `json:"proxyLimits,omitempty"`
	// Runtimes are the other OCI runtimes the wrapper can wrap, by the
	// name an engine's runtime entry passes it first as
	// --doorman-runtime=NAME (Docker's daemon.json runtimeArgs):
	// {"runsc": {"path": "/usr/local/bin/runsc", "args":
	// ["--network=sandbox"]}}. Without that argument the wrapper wraps
	// Runc.
	Runtimes map[string]RuntimeEntry `json:"runtimes,omitempty"`
	// NAT64Prefixes are the prefixes of the NAT64 translators the host
	// reaches besides 64:ff9b::/96 and 64:ff9b:1::/48 (see
	// spec.ParseNAT64Prefixes).
	NAT64Prefixes []string `json:"nat64Prefixes,omitempty"`

	source string // the file this was read from, for messages
}

// RuntimeEntry is one of RuntimeConfig.Runtimes: the runtime's binary
// (an absolute path, or a name on PATH) and the global flags the wrapper
// passes it before the engine's arguments.
type RuntimeEntry struct {
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
}

// runtimeFlag is the argument that names, among the wrapper's first
// arguments, which of RuntimeConfig.Runtimes to wrap.
const runtimeFlag = "--doorman-runtime"

// LoadRuntimeConfig reads path; a missing file means the defaults. An
// unknown key, or a value of the wrong type, is an error naming the file,
// the key and the value.
func LoadRuntimeConfig(path string) (RuntimeConfig, error) {
	var c RuntimeConfig
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("runtime config: %w", err)
	}
	if err := strictjson.Decode("", data, &c); err != nil {
		return RuntimeConfig{}, fmt.Errorf("runtime config %s: %w", path, err)
	}
	for _, p := range []struct{ key, value string }{
		{"dockerRoot", c.DockerRoot}, {"stateDir", c.StateDir}, {"logDir", c.LogDir},
		{"defaultPolicy", c.DefaultPolicy}, {"caDir", c.CADir}, {"upstreamCAFile", c.UpstreamCAFile},
	} {
		if p.value != "" && (!filepath.IsAbs(p.value) || filepath.Clean(p.value) != p.value) {
			return RuntimeConfig{}, fmt.Errorf("runtime config %s: %s %q: want a clean absolute path", path, p.key, p.value)
		}
	}
	if c.Runc != "" && strings.Contains(c.Runc, "/") && !filepath.IsAbs(c.Runc) {
		return RuntimeConfig{}, fmt.Errorf("runtime config %s: runc %q: want a name on PATH or an absolute path", path, c.Runc)
	}
	for name, r := range c.Runtimes {
		switch {
		case name == "" || strings.ContainsAny(name, "=/ \t"):
			return RuntimeConfig{}, fmt.Errorf("runtime config %s: runtimes %q: want a name without '=', '/' or spaces", path, name)
		case r.Path == "" || strings.Contains(r.Path, "/") && (!filepath.IsAbs(r.Path) || filepath.Clean(r.Path) != r.Path):
			return RuntimeConfig{}, fmt.Errorf("runtime config %s: runtimes.%s.path %q: want a name on PATH or a clean absolute path", path, name, r.Path)
		}
		for i, a := range r.Args {
			if !strings.HasPrefix(a, "-") {
				return RuntimeConfig{}, fmt.Errorf("runtime config %s: runtimes.%s.args[%d] %q: want a global flag (--name=value): the wrapper finds the verb after them", path, name, i, a)
			}
		}
	}
	c.source = path
	return c, nil
}

// hookArgs are the doorman hook's flags for this configuration. A value
// the hook would refuse is an error here, naming the file and the key,
// so that the container is refused before runc starts.
func (c RuntimeConfig) hookArgs() ([]string, error) {
	var a []string
	add := func(flag, v string) {
		if v != "" {
			a = append(a, flag+"="+v)
		}
	}
	add("--state-dir", c.StateDir)
	add("--log-dir", c.LogDir)
	add("--default-policy", c.DefaultPolicy)
	add("--ca-dir", c.CADir)
	add("--upstream-ca-file", c.UpstreamCAFile)
	ups, err := spec.ParseUpstreamResolver("upstreamResolver", c.UpstreamResolver)
	if err != nil {
		return nil, fmt.Errorf("runtime config %s: %w", orDefault(c.source, RuntimeConfigFile), err)
	}
	for _, ap := range ups {
		add("--upstream-resolver", ap.String())
	}
	nat64, err := spec.ParseNAT64Prefixes("nat64Prefixes", c.NAT64Prefixes)
	if err != nil {
		return nil, fmt.Errorf("runtime config %s: %w", orDefault(c.source, RuntimeConfigFile), err)
	}
	for _, p := range nat64 {
		add("--nat64-prefix", p.String())
	}
	if c.HostLayer != nil {
		a = append(a, fmt.Sprintf("--host-layer=%t", *c.HostLayer))
	}
	if c.DNSFilter != nil {
		a = append(a, fmt.Sprintf("--dns-filter=%t", *c.DNSFilter))
	}
	if c.AllowICMP != nil {
		a = append(a, fmt.Sprintf("--allow-icmp=%t", *c.AllowICMP))
	}
	if _, err := c.ProxyLimits.Limits("proxyLimits"); err != nil {
		return nil, fmt.Errorf("runtime config %s: %w", orDefault(c.source, RuntimeConfigFile), err)
	}
	if l := c.ProxyLimits; l != nil {
		add("--proxy-memory", string(l.Memory))
		add("--proxy-pids", string(l.Pids))
		add("--proxy-cpu-weight", string(l.CPUWeight))
	}
	return a, nil
}

// runc's global flags that take a value (the rest are booleans), by name.
var runcGlobalValueFlags = []string{"root", "log", "log-format", "criu", "rootless"}

// runc create/run flags that take a value, by name.
var runcCreateValueFlags = []string{"bundle", "b", "console-socket", "pid-file", "preserve-fds"}

// flagName splits a flag argument into its name (without dashes) and its
// value, if given with '='. runc parses flags with Go's flag package, to
// which -root and --root, -bundle and --bundle are the same flag: reading
// only one form would let a create through unprepared.
func flagName(a string) (name, value string, hasValue bool) {
	return strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
}

// Wrap prepares one runtime invocation: for `create` and `run` it adds
// doorman's hooks to the bundle's config.json (see PrepareBundle); every
// verb's arguments pass through untouched. It returns the real runtime's
// path and the arguments to exec it with: args, less a leading
// --doorman-runtime=NAME, which picks one of cfg.Runtimes (whose own
// flags go first) in place of runc. An error is also written to the
// runtime log the engine named with --log (see logRuntimeError):
// containerd shows the user that log's last error, never the runtime's
// stderr.
func Wrap(args []string, cfg RuntimeConfig, self string) (string, []string, error) {
	name, args, err := pickRuntime(args, cfg)
	if err != nil {
		logRuntimeError(args, err)
		return "", nil, err
	}
	if name != "" {
		r := cfg.Runtimes[name]
		cfg.Runc = r.Path
		args = append(slices.Clip(r.Args), args...)
	}
	runc, err := wrap(args, cfg, self)
	if err != nil {
		logRuntimeError(args, err)
	}
	return runc, args, err
}

// pickRuntime takes --doorman-runtime=NAME (or --doorman-runtime NAME)
// out of the global flags in args and returns NAME, "" for runc. A name
// that cfg.Runtimes does not have is an error: the container must not
// run on another runtime than the one its engine asked for.
func pickRuntime(args []string, cfg RuntimeConfig) (string, []string, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		v, ok := strings.CutPrefix(a, runtimeFlag+"=")
		end := i + 1
		if !ok && a == runtimeFlag && i+1 < len(args) {
			v, ok, end = args[i+1], true, i+2
		}
		if !ok {
			if name, _, hasValue := flagName(a); !hasValue && slices.Contains(runcGlobalValueFlags, name) {
				i++ // the flag's value
			}
			continue
		}
		if _, known := cfg.Runtimes[v]; !known {
			return "", args, fmt.Errorf("doorman: %s=%s: no such runtime in %s's \"runtimes\" (it has %s)", runtimeFlag, v, orDefault(cfg.source, RuntimeConfigFile), strings.Join(slices.Sorted(maps.Keys(cfg.Runtimes)), ", "))
		}
		return v, slices.Concat(args[:i], args[end:]), nil
	}
	return "", args, nil
}

func wrap(args []string, cfg RuntimeConfig, self string) (string, error) {
	runc, err := findRunc(cfg.Runc, self)
	if err != nil {
		return "", err
	}
	verb, rest := splitVerb(args)
	if verb == "exec" {
		prepareExec(args, rest)
		return runc, nil
	}
	if verb == "start" {
		return runc, completeHostLayer(rest, cfg)
	}
	if verb != "create" && verb != "run" {
		return runc, nil
	}
	bundle, id := parseCreate(rest)
	if id == "" {
		return runc, nil // runc will report the missing id itself
	}
	if bundle == "" {
		bundle = "."
	}
	if err := PrepareBundle(bundle, id, cfg, self); err != nil {
		return "", fmt.Errorf("doorman: container %s: %w", id, err)
	}
	return runc, nil
}

// completeHostLayer adds the host-side layer, at `runc start`, to a
// container whose interfaces did not exist yet when its createRuntime hook
// ran (Docker >= 28 adds them between create and start). A container
// doorman does not hold is left alone; one whose layer cannot be installed
// does not start.
func completeHostLayer(args []string, cfg RuntimeConfig) error {
	id := ""
	for _, a := range args { // runc start takes no flags but --help
		if !strings.HasPrefix(a, "-") {
			id = a
		}
	}
	if id == "" {
		return nil
	}
	s, err := sandbox.CompleteHostLayer(orDefault(cfg.StateDir, hostconf.DefaultStateDir), Key(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("doorman: container %s: %w", id, err)
	}
	// A workload with a network stack of its own is held from the host
	// side of its link only: one with a way out and no layer on it is
	// enforced by nothing (--network none has no way out).
	if kind := runtimekind.Kind(s.RuntimeKind); kind.OwnStack() && !s.HostLayer && s.Mode != conf.ModeOpen && runtimekind.HasLink(s.NetNS) {
		return fmt.Errorf("doorman: container %s: %s, and its interface has no host side doorman can hold (no veth peer in this namespace): doorman would enforce nothing", id, kind.Describe())
	}
	return nil
}

// splitVerb skips runc's global flags and returns the command and its args.
func splitVerb(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" { // end of flags: the verb follows
			if i+1 < len(args) {
				return args[i+1], args[i+2:]
			}
			return "", nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return a, args[i+1:]
		}
		if name, _, hasValue := flagName(a); !hasValue && slices.Contains(runcGlobalValueFlags, name) {
			i++
		}
	}
	return "", nil
}

// parseCreate finds the bundle (--bundle, -b, with a space or '=') and the
// container id (the positional argument) of runc create/run.
func parseCreate(args []string) (bundle, id string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" { // end of flags: the rest is positional
			if i+1 < len(args) {
				id = args[len(args)-1]
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			id = a
			continue
		}
		name, v, hasValue := flagName(a)
		isBundle := name == "bundle" || name == "b"
		switch {
		case hasValue:
			if isBundle {
				bundle = v
			}
		case slices.Contains(runcCreateValueFlags, name):
			if isBundle && i+1 < len(args) {
				bundle = args[i+1]
			}
			i++
		}
	}
	return bundle, id
}

// findRunc returns the runc to exec: configured, or the first "runc" on
// PATH (then /usr/sbin, /usr/bin) that is not this binary. A configured
// name without a slash is looked up on PATH.
func findRunc(configured, self string) (string, error) {
	if configured == "" {
		configured = os.Getenv("DOORMAN_RUNC")
	}
	if configured != "" && !strings.Contains(configured, "/") {
		p, err := exec.LookPath(configured)
		if err != nil {
			return "", fmt.Errorf("doorman: runtime %s: %w", configured, err)
		}
		configured = p
	}
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("doorman: runc %s: %w", configured, err)
		}
		return configured, nil
	}
	selfInfo, _ := os.Stat(self)
	dirs := append(filepath.SplitList(os.Getenv("PATH")), "/usr/local/sbin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
	for _, d := range dirs {
		p := filepath.Join(d, "runc")
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || (selfInfo != nil && os.SameFile(fi, selfInfo)) {
			continue
		}
		return p, nil
	}
	return "", errors.New("doorman: no runc found on PATH; set \"runc\" in " + RuntimeConfigFile)
}

// PrepareBundle rewrites bundle/config.json of container id: doorman's
// createRuntime and poststop hooks (once), doorman.io/* labels from
// Docker's container config as annotations where the spec has none, and the
// DOORMAN_* environment. It fails, and the container does not start, when
// the container has no valid policy.
func PrepareBundle(bundle, id string, cfg RuntimeConfig, self string) error {
	flags, err := cfg.hookArgs()
	if err != nil {
		return err
	}
	path := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var raw map[string]any // every field kept as the engine wrote it
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}

	annotations := dockerAnnotations(raw, spec.Annotations, cfg, id)
	if err := annotation.CheckKnown(annotations, hookAnnotations...); err != nil {
		return err
	}
	pol, _, err := policyFor(annotations, cfg.DefaultPolicy)
	if err != nil {
		return err
	}
	if pol, err = withInspectAnnotation(pol, annotations); err != nil {
		return err
	}
	if _, err := annotation.Direct(annotations); err != nil {
		return err
	}
	if err := addTrust(raw, &spec, bundle, id, pol, cfg.CADir); err != nil {
		return err
	}

	label := Label(&spec, pol.Mode)
	if sharesRuntimeNetNS(&spec) {
		if inside, _ := enforce.Present("/proc/self/ns/net"); inside {
			label = "inherited (the enclosing sandbox's rules)"
		}
	}
	setEnv(raw, EnvNetworkMode, string(pol.Mode))
	if pol.Mode != conf.ModeOpen && !hasNetNSShared(label) {
		// What the sandbox will record: the hook adds the host-side
		// layer only where it finds the veth, so it is not counted here.
		label = sandbox.ComposeLabel(label, false, cfg.DNSFilter == nil || *cfg.DNSFilter, pol.Mode)
	}
	setEnv(raw, EnvEnforcement, label)
	addHooks(raw, self, flags)

	out, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	return writeFileKeepMode(path, out)
}

// dockerAnnotations adds to the annotations of container id (both the
// raw config, which is written back, and the map returned) what dockerd
// records of it and does not pass to the runtime: its doorman.io/* labels
// and its name, where the spec carries no doorman annotation, and always
// its DNS servers (Docker's own record, whatever the spec says).
func dockerAnnotations(raw map[string]any, annotations map[string]string, cfg RuntimeConfig, id string) map[string]string {
	root := orDefault(cfg.DockerRoot, "/var/lib/docker")
	added := map[string]string{}
	_, hasMode := annotations[AnnotationMode]
	_, hasHosts := annotations[AnnotationAllowedHosts]
	if !hasMode && !hasHosts {
		labels, name := dockerLabels(root, id)
		for k, v := range labels {
			if strings.HasPrefix(k, annotation.Prefix) {
				added[k] = v
			}
		}
		if name != "" {
			added[annotationDockerName] = name
		}
	}
	if dns, ok := dockerDNS(root, id); ok {
		added[annotationDockerDNS] = dns
	}
	if len(added) == 0 {
		return annotations
	}
	rawAnn, _ := raw["annotations"].(map[string]any)
	if rawAnn == nil {
		rawAnn = map[string]any{}
	}
	for k, v := range added {
		rawAnn[k] = v
	}
	raw["annotations"] = rawAnn
	return mergeAnnotations(annotations, added)
}

// sharesRuntimeNetNS reports whether the container will run in the
// runtime's own network namespace: its spec has no network namespace, or
// names one by a path that is the runtime's (Docker's --network host names
// its bind mount of the daemon's namespace, <exec-root>/netns/default).
func sharesRuntimeNetNS(spec *specs.Spec) bool {
	if spec.Linux == nil {
		return true
	}
	for _, n := range spec.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			if n.Path == "" {
				return false
			}
			same, err := sameNetNS(n.Path, "/proc/self/ns/net")
			return err == nil && same
		}
	}
	return true
}

// dockerLabels reads a container's labels and name from dockerd's own
// container config, the only place Docker 20.10 keeps them.
func dockerLabels(root, id string) (map[string]string, string) {
	if filepath.Base(id) != id {
		return nil, ""
	}
	data, err := os.ReadFile(filepath.Join(root, "containers", id, "config.v2.json"))
	if err != nil {
		return nil, ""
	}
	var c struct {
		Name   string
		Config struct{ Labels map[string]string }
	}
	if json.Unmarshal(data, &c) != nil {
		return nil, ""
	}
	return c.Config.Labels, strings.TrimPrefix(c.Name, "/")
}

// setEnv sets KEY=value in process.env, replacing an earlier KEY.
func setEnv(raw map[string]any, key, value string) {
	proc, _ := raw["process"].(map[string]any)
	if proc == nil {
		return
	}
	env, _ := proc["env"].([]any)
	kv := key + "=" + value
	for i, e := range env {
		if s, _ := e.(string); strings.HasPrefix(s, key+"=") {
			env[i] = kv
			proc["env"] = env
			return
		}
	}
	proc["env"] = append(env, kv)
}

// addHooks appends doorman's createRuntime and poststop hooks unless
// already there. Existing hooks (Docker 20.10's libnetwork-setkey prestart
// hook among them) stay first and untouched; runc runs prestart hooks
// before createRuntime ones.
func addHooks(raw map[string]any, self string, flags []string) {
	hooks, _ := raw["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	for _, stage := range []string{StageCreateRuntime, StagePoststop} {
		list, _ := hooks[stage].([]any)
		present := false
		for _, h := range list {
			m, _ := h.(map[string]any)
			args, _ := m["args"].([]any)
			if m["path"] == self && len(args) > 1 && args[1] == "hook" {
				present = true
			}
		}
		if present {
			continue
		}
		args := []any{"doorman", "hook"}
		for _, f := range flags {
			args = append(args, f)
		}
		args = append(args, stage)
		hooks[stage] = append(list, map[string]any{"path": self, "args": args})
	}
	raw["hooks"] = hooks
}

func writeFileKeepMode(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	return atomicfile.Write(path, bytes.NewReader(data), atomicfile.Options{Perm: mode, TempInfix: ".doorman-tmp-"})
}

// ExecRunc replaces this process with runc.
func ExecRunc(runc string, args []string) error {
	return execve(runc, append([]string{runc}, args...), os.Environ())
}

// hasNetNSShared reports a label for a container that shares an enclosing
// sandbox's namespace (its coverage is that sandbox's).
func hasNetNSShared(label string) bool { return strings.HasPrefix(label, "inherited") }
