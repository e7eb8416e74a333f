package hook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/enforce/sandbox"
)

// Options configure the hook; the zero value uses the defaults.
type Options struct {
	StateDir         string // default sandbox.DefaultStateDir
	LogDir           string // default sandbox.DefaultLogDir
	DefaultPolicy    string // default DefaultPolicyFile
	UpstreamResolver string // addr:port the proxy resolves allowed names with; "" the host's
	AllowICMP        bool
	ProxyBinary      string // default this executable
}

// Stages the hook acts on.
const (
	StageCreateRuntime = "createRuntime"
	StagePrestart      = "prestart"
	StagePoststop      = "poststop"
)

// Run is the OCI hook for stage, with the runtime's state JSON on stdin. At
// createRuntime (or prestart) it enforces the container's policy; at
// poststop it tears the enforcement down and never fails (a container's
// removal must not be blocked by its cleanup). Errors say what and why.
func Run(stage string, stdin io.Reader, opts Options) error {
	switch stage {
	case StageCreateRuntime, StagePrestart:
		return enforceContainer(stdin, opts)
	case StagePoststop:
		teardown(stdin, opts)
		return nil
	}
	return fmt.Errorf("doorman hook: unknown stage %q (want %s, %s or %s)", stage, StageCreateRuntime, StagePrestart, StagePoststop)
}

// readState decodes the runtime's state JSON.
func readState(stdin io.Reader) (*specs.State, error) {
	data, err := io.ReadAll(io.LimitReader(stdin, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read the container state on stdin: %w", err)
	}
	var st specs.State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("the container state on stdin is not the runtime's state JSON: %w", err)
	}
	if st.ID == "" || st.Bundle == "" {
		return nil, fmt.Errorf("the container state on stdin has no id or bundle")
	}
	return &st, nil
}

// loadSpec reads the bundle's config.json.
func loadSpec(bundle string) (*specs.Spec, error) {
	path := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the bundle's config: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &spec, nil
}

func enforceContainer(stdin io.Reader, opts Options) error {
	st, err := readState(stdin)
	if err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("doorman: container %s not started: %w", st.ID, err) }
	spec, err := loadSpec(st.Bundle)
	if err != nil {
		return fail(err)
	}
	annotations := mergeAnnotations(spec.Annotations, st.Annotations)
	pol, _, err := policyFor(annotations, opts.DefaultPolicy)
	if err != nil {
		return fail(err)
	}
	netns, err := containerNetNS(spec, st.Pid)
	if err != nil {
		return fail(err)
	}
	if netns == "" {
		// The container shares the runtime's namespace. That is fine
		// only where it is itself a doorman sandbox (a host-network
		// container of a daemon inside one: the enclosing sandbox's
		// rules hold it), or where the policy is open.
		if inside, _ := enforce.Present("/proc/self/ns/net"); inside || pol.Mode == conf.ModeOpen {
			return nil
		}
		return fail(fmt.Errorf("it shares the host's network namespace, where doorman cannot enforce %s mode (run it with its own network, or set %s=open)", pol.Mode, AnnotationMode))
	}
	stateDir := orDefault(opts.StateDir, sandbox.DefaultStateDir)
	if enforcedByCNI(stateDir, netns) {
		return nil
	}
	res, err := resolvers(spec, st.Bundle)
	if err != nil {
		return fail(err)
	}
	_, err = sandbox.Enforce(sandbox.Request{
		Key:           Key(st.ID),
		ID:            st.ID,
		Name:          containerName(annotations),
		Runtime:       "hook",
		NetNS:         netns,
		Policy:        pol,
		Resolvers:     res,
		AllowICMP:     opts.AllowICMP,
		Label:         Label(spec, pol.Mode),
		StateDir:      stateDir,
		LogDir:        opts.LogDir,
		ProxyBinary:   opts.ProxyBinary,
		ProxyResolver: opts.UpstreamResolver,
	})
	if err != nil {
		return fail(err)
	}
	return nil
}

// teardown undoes enforceContainer; errors only go to stderr.
func teardown(stdin io.Reader, opts Options) {
	st, err := readState(stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "doorman hook poststop: %v\n", err)
		return
	}
	if err := sandbox.Teardown(orDefault(opts.StateDir, sandbox.DefaultStateDir), Key(st.ID)); err != nil {
		fmt.Fprintf(os.Stderr, "doorman hook poststop: %v\n", err)
	}
}

// enforcedByCNI reports whether a live CNI sandbox already holds netns: its
// table is there and its proxy runs. The hook then has nothing to add.
func enforcedByCNI(stateDir, netns string) bool {
	if ok, _ := enforce.Present(netns); !ok {
		return false
	}
	states, _ := sandbox.List(stateDir)
	for _, s := range states {
		if s.Runtime != "cni" || !s.ProxyAlive() {
			continue
		}
		if same, err := sameNetNS(s.NetNS, netns); err == nil && same {
			return true
		}
	}
	return false
}

// Key names a hook sandbox's state: the container id, hashed if it cannot
// name a directory.
func Key(id string) string {
	if sandbox.ValidKey(id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "h" + hex.EncodeToString(sum[:16])
}

// containerName finds a human name among the annotations engines set.
func containerName(a map[string]string) string {
	for _, k := range []string{"io.kubernetes.cri.container-name", "nerdctl/name", "io.podman.annotations.name", "org.opencontainers.container.name", annotationDockerName} {
		if v := a[k]; v != "" {
			return v
		}
	}
	return ""
}

// mergeAnnotations combines the spec's annotations with the state's (the
// state's win: it is what the runtime reports now).
func mergeAnnotations(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
