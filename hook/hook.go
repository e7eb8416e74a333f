package hook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/annotation"
	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/internal/runtimekind"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// Options configure the hook; the zero value uses the defaults.
type Options struct {
	StateDir         string         // default hostconf.DefaultStateDir
	LogDir           string         // default hostconf.DefaultLogDir
	DefaultPolicy    string         // default DefaultPolicyFile
	UpstreamResolver string         // DNS server (addr or addr:port) the proxy resolves allowed names with; "" the container's own resolvers
	AllowICMP        bool           // let echo requests (at most 64 bytes of data) out to allowDirect destinations
	DNSFilter        bool           // send DNS through the proxy's filter
	HostLayer        bool           // add the host-side layer on the container's veth
	OTLP             spec.OTLP      // export records to this collector, if its Endpoint is set
	Limits           spec.Limits    // the proxies' caps (zero: the defaults)
	ProxyBinary      string         // default this executable
	ProxyLimits      cgroup.Limits  // the limits of each proxy's cgroup (zero fields: the defaults)
	CADir            string         // the networks' CAs (default hostconf.DefaultCADir); the hook's is CADir/hook
	UpstreamCAFile   string         // PEM roots inspected hosts are verified against, if not the system's
	NAT64Prefixes    []netip.Prefix // NAT64 prefixes besides 64:ff9b::/96 and 64:ff9b:1::/48 (see sandbox.Spec)
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
// removal must not be blocked by its cleanup). Errors say what and why;
// where the runtime discards the hook's stderr (crun), a createRuntime error
// is also written to the runtime's stderr, so the engine shows it.
func Run(stage string, stdin io.Reader, opts Options) error {
	switch stage {
	case StageCreateRuntime, StagePrestart:
		err := enforceContainer(stdin, opts)
		if err != nil {
			reportToRuntime(err)
		}
		return err
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
	if err := enforceState(st, opts); err != nil {
		return fmt.Errorf("doorman: container %s not started: %w", st.ID, err)
	}
	return nil
}

// hookAnnotations are the doorman annotations the hook reads besides
// annotation.Keys: the request rules, and what the runc wrapper adds.
var hookAnnotations = []string{AnnotationInspect, annotationDockerName, annotationDockerDNS}

// container is what the hook reads about one container before it
// enforces it: its bundle's spec, its annotations, its policy and its
// network namespace ("" for the runtime's own).
type container struct {
	st          *specs.State
	oci         *specs.Spec
	annotations map[string]string
	policy      *conf.Policy
	netns       string
}

// enforceState enforces the container whose runtime state is st.
func enforceState(st *specs.State, opts Options) error {
	upstream, err := opts.upstreamResolvers()
	if err != nil {
		return err
	}
	c, err := loadContainer(st, opts.DefaultPolicy)
	if err != nil {
		return err
	}
	if c.netns == "" {
		// The container shares the runtime's namespace. That is fine
		// only where it is itself a doorman sandbox (a host-network
		// container of a daemon inside one: the enclosing sandbox's
		// rules hold it), or where the policy is open.
		if inside, _ := enforce.Present("/proc/self/ns/net"); inside || c.policy.Mode == conf.ModeOpen {
			return nil
		}
		return fmt.Errorf("it shares the host's network namespace, where doorman cannot enforce %s mode (run it with its own network, or set %s=open)", c.policy.Mode, AnnotationMode)
	}
	stateDir := orDefault(opts.StateDir, hostconf.DefaultStateDir)
	holder, err := heldBy(stateDir, Key(st.ID), c.netns)
	if err != nil {
		return err
	}
	if holder != nil {
		return c.join(holder)
	}
	spec, err := c.spec(opts, upstream)
	if err != nil {
		return err
	}
	// The runtime's kind, from the process the state names (runsc's
	// sandbox, a VM monitor, or the container's own init): a workload
	// with a network stack of its own is held only from the host side of
	// its link.
	kind := runtimekind.OfPID("/proc", st.Pid)
	if kind.OwnStack() && !spec.HostLayer && c.policy.Mode != conf.ModeOpen {
		return fmt.Errorf("%s; the host-side layer, which alone sees its traffic, is off (--host-layer=false): doorman would enforce nothing", kind.Describe())
	}
	_, err = sandbox.Enforce(sandbox.Request{
		Attachment: sandbox.Attachment{
			Key: Key(st.ID), ID: st.ID, Name: containerName(c.annotations), Runtime: "hook", RuntimeKind: string(kind),
			NetNS: c.netns, Label: Coverage(c.oci), CgroupParent: cgroupParent(c.oci),
		},
		Spec:        spec,
		StateDir:    stateDir,
		ProxyBinary: opts.ProxyBinary,
	})
	return err
}

// loadContainer reads the container's bundle, its policy and its network
// namespace.
func loadContainer(st *specs.State, defaultPolicy string) (*container, error) {
	oci, err := loadSpec(st.Bundle)
	if err != nil {
		return nil, err
	}
	c := &container{st: st, oci: oci, annotations: mergeAnnotations(oci.Annotations, st.Annotations)}
	if err := annotation.CheckKnown(c.annotations, hookAnnotations...); err != nil {
		return nil, err
	}
	if c.policy, _, err = policyFor(c.annotations, defaultPolicy); err != nil {
		return nil, err
	}
	if c.policy, err = withInspectAnnotation(c.policy, c.annotations); err != nil {
		return nil, err
	}
	if c.netns, err = containerNetNS(oci, st.Pid); err != nil {
		return nil, err
	}
	return c, nil
}

// join makes the container part of holder's enforcement: another sandbox
// holds its namespace (the CNI attachment of the same container, or a
// container it shares the namespace with: a pod, `--network container:`).
// One namespace has one ruleset and one proxy: a second sandbox would
// replace the first's rules, and its teardown would then leave the first's
// container with none. So this container joins the holder's enforcement,
// provided it asks for the same policy; the holder's label then covers it
// too.
func (c *container) join(holder *sandbox.State) error {
	if holder.Runtime == "cni" {
		return nil
	}
	if err := samePolicy(holder, c.policy); err != nil {
		return err
	}
	return joinLabel(holder, Coverage(c.oci))
}

// spec is what the hook enforces on the container, each setting parsed
// once: its policy, its resolvers (those of the resolv.conf it will see),
// the allow-direct annotation, the upstream resolver (the flag's, else
// Docker's record of the container's), and the hook's flags.
func (c *container) spec(opts Options, upstream []netip.AddrPort) (spec.Spec, error) {
	s := spec.Spec{
		Policy: c.policy, AllowICMP: opts.AllowICMP, DNSFilter: opts.DNSFilter, HostLayer: opts.HostLayer,
		LogDir: opts.LogDir, UpstreamResolvers: upstream, ProxyLimits: opts.ProxyLimits,
		Proxy: spec.Proxy{OTLP: opts.OTLP, Limits: opts.Limits, CADir: caDirFor(opts.CADir), UpstreamCAFile: opts.UpstreamCAFile, NAT64Prefixes: opts.NAT64Prefixes},
	}
	var err error
	if s.AllowDirect, err = annotation.Direct(c.annotations); err != nil {
		return s, err
	}
	if s.Resolvers, err = resolvers(c.oci, c.st.Bundle); err != nil {
		return s, err
	}
	if s.UpstreamResolvers == nil {
		s.UpstreamResolvers = dockerProxyResolvers(c.annotations)
	}
	return s, nil
}

// upstreamResolvers parses UpstreamResolver: none (the proxy then asks
// the container's resolvers), or the one server it asks instead.
func (o Options) upstreamResolvers() ([]netip.AddrPort, error) {
	return spec.ParseUpstreamResolver("--upstream-resolver", o.UpstreamResolver)
}

// teardown undoes enforceContainer; errors only go to stderr.
func teardown(stdin io.Reader, opts Options) {
	st, err := readState(stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "doorman hook poststop: %v\n", err)
		return
	}
	if err := sandbox.Teardown(orDefault(opts.StateDir, hostconf.DefaultStateDir), Key(st.ID)); err != nil {
		fmt.Fprintf(os.Stderr, "doorman hook poststop: %v\n", err)
	}
}

// heldBy returns the sandbox, other than key, that already holds netns, or
// nil: a live CNI or hook sandbox (its table there and its proxy running,
// see sandbox.Holder). A hook sandbox recorded on it that is not live
// (table gone, or proxy dead) is an error rather than something to
// replace: its teardown would remove whatever ruleset the namespace has by
// then.
func heldBy(stateDir, key, netns string) (*sandbox.State, error) {
	holder, stale := sandbox.Holder(stateDir, key, netns)
	if holder != nil {
		return holder, nil
	}
	for _, s := range stale {
		if s.Runtime != "cni" {
			return nil, fmt.Errorf("its network namespace %s is held by doorman sandbox %s (container %s, state in %s), whose enforcement is not running: remove that container first", netns, s.Key, s.ID, s.Dir)
		}
	}
	return nil, nil
}

// samePolicy checks that pol is the policy sandbox s enforces, so that a
// container sharing s's namespace can join s's enforcement.
func samePolicy(s *sandbox.State, pol *conf.Policy) error {
	held, err := conf.LoadFile(s.PolicyPath())
	if err != nil {
		return fmt.Errorf("its network namespace %s is held by doorman sandbox %s (container %s): %w", s.NetNS, s.Key, s.ID, err)
	}
	if !held.Equal(pol) {
		return fmt.Errorf("it shares network namespace %s with container %s, which doorman holds to a different policy (%s, not %s): one network namespace has one policy", s.NetNS, s.ID, held, pol)
	}
	return nil
}

// joinLabel lowers the label of holder, whose namespace a container with
// label is joining, where that container is less covered (it holds
// CAP_NET_RAW or CAP_NET_ADMIN inside the same namespace): a label is never
// better than what holds for every container in the sandbox. Only the
// holder's label changes: its policy, rules and proxy are as they were.
func joinLabel(holder *sandbox.State, label string) error {
	if labelRank(label) <= labelRank(holder.BaseLabel) {
		return nil
	}
	_, err := sandbox.Relabel(filepath.Dir(holder.Dir), holder.Key, label)
	return err
}

// labelRank orders Label's results from the most covered (0) to the
// least.
func labelRank(label string) int {
	switch {
	case strings.Contains(label, "CAP_NET_ADMIN"):
		return 2
	case strings.HasPrefix(label, "partial"):
		return 1
	}
	return 0
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
