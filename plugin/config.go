package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/doorman-net/doorman/annotation"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/kube/agentclient"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// NetConf is doorman's entry in a conflist, as the runtime passes it:
// the CNI's keys (types.PluginConf), doorman's own (Settings, parsed and
// checked by ParseEntry), and the runtimeConfig of the capabilities the
// entry declares (RuntimeConfig).
type NetConf struct {
	types.PluginConf
	Settings
	// settingsErr says which of doorman's keys did not parse: ADD,
	// CHECK and STATUS fail with it, while DEL and GC tear down with
	// the defaults of those keys (a DEL must succeed).
	settingsErr error
	// RuntimeConfig is what the runtime passed for the capabilities;
	// runtimeErr says what of it did not parse (an ADD that needs it
	// fails with it).
	RuntimeConfig RuntimeConfig
	runtimeErr    error
}

// parseNetConf reads the conflist entry: one decode of data into its
// keys (decodeObject), each of whose values its parser then decodes once.
// It does not require prevResult: DEL and GC may come without one. Only an
// entry the CNI's types cannot decode is an error here; what doorman's
// keys and runtimeConfig hold is judged where a verb needs it (see valid).
func parseNetConf(data []byte) (*NetConf, error) {
	var n NetConf
	raw, err := decodeObject(data)
	if err == nil {
		err = decodePluginConf(raw, &n.PluginConf)
	}
	if err != nil {
		// Say it as encoding/json says it of a types.PluginConf, as the
		// CNI's own parsers would; a JSON null decodes into one, and has
		// none of doorman's keys, which doorman's keys say is wrong.
		var c types.PluginConf
		if jerr := json.Unmarshal(data, &c); jerr != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "doorman: cannot parse network configuration", jerr.Error())
		}
		n.Settings, n.settingsErr = *DefaultSettings(), err
		return &n, nil
	}
	s, err := parseSettings(raw, CNIKeys)
	n.Settings, n.settingsErr = *s, err
	n.RuntimeConfig, n.runtimeErr = ParseRuntimeConfig(lookup(raw, "runtimeConfig"))
	return &n, nil
}

// decodePluginConf decodes the CNI's keys among raw into c, as
// encoding/json decodes them into a types.PluginConf.
func decodePluginConf(raw map[string]json.RawMessage, c *types.PluginConf) error {
	for key, dst := range map[string]any{
		"cniVersion": &c.CNIVersion, "name": &c.Name, "type": &c.Type, "capabilities": &c.Capabilities,
		"ipam": &c.IPAM, "dns": &c.DNS, "prevResult": &c.RawPrevResult, "cni.dev/valid-attachments": &c.ValidAttachments,
	} {
		if v := lookup(raw, key); v != nil {
			if err := json.Unmarshal(v, dst); err != nil {
				return err
			}
		}
	}
	return nil
}

// lookup is the value of key in raw, or of a key that differs from it in
// case only, as encoding/json matches a struct's fields; nil if none.
func lookup(raw map[string]json.RawMessage, key string) json.RawMessage {
	if v, ok := raw[key]; ok {
		return v
	}
	for k, v := range raw {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return nil
}

// valid is the CNI error of an entry whose doorman keys do not all parse,
// naming each bad one, or nil.
func (n *NetConf) valid() error {
	if n.settingsErr == nil {
		return nil
	}
	return types.NewError(types.ErrInvalidNetworkConfig,
		fmt.Sprintf("doorman: invalid configuration of network %q: %s", n.Name, oneLine(n.settingsErr)), "")
}

// oneLine renders err, which may join several, on one line: a CNI error
// ends up in a pod's events and in a runtime's log line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// prevResult returns the previous plugin's result, required for ADD and
// CHECK: doorman enforces a namespace an interface plugin has wired.
func (n *NetConf) prevResult() (*current.Result, error) {
	if n.RawPrevResult == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			"prevResult missing: doorman must be chained after an interface plugin", "")
	}
	if err := version.ParsePrevResult(&n.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "doorman: cannot parse prevResult", err.Error())
	}
	res, err := current.NewResultFromResult(n.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "doorman: cannot convert prevResult", err.Error())
	}
	return res, nil
}

// policy is the policy for this container: the one its pod's annotations
// ask for (see package annotation), else a policy file in PolicyDir named
// by the container's id or name, else the network's; with the rule sets
// the pod's doorman.io/rulesets annotation names, if it has one, instead
// of that policy's. Any error here refuses the ADD (fail closed):
// annotations that do not parse never fall back to a policy they did not
// ask for.
func (n *NetConf) policy(args *skel.CmdArgs) (*conf.Policy, error) {
	if err := annotation.CheckKnown(n.RuntimeConfig.PodAnnotations); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "doorman: "+describePod(args)+": "+err.Error(), "")
	}
	p, err := n.basePolicy(args)
	if err != nil {
		return nil, err
	}
	if p, err = annotation.WithRuleSets(p, n.RuntimeConfig.PodAnnotations); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "doorman: "+describePod(args)+": "+err.Error(), "")
	}
	return p, nil
}

// basePolicy is policy before the rulesets annotation.
func (n *NetConf) basePolicy(args *skel.CmdArgs) (*conf.Policy, error) {
	if p, ok, err := annotation.Policy(n.RuntimeConfig.PodAnnotations); ok {
		if err != nil {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, "doorman: "+describePod(args)+": "+err.Error(), "")
		}
		return p, nil
	}
	if n.PolicyDir != "" {
		for _, name := range policyNames(args) {
			path := filepath.Join(n.PolicyDir, name)
			p, err := conf.LoadFile(path)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, types.NewError(types.ErrInvalidNetworkConfig, "doorman: per-container policy file", err.Error())
			}
			return p, nil
		}
	}
	return n.Settings.Policy, nil
}

// fromAgent sets the policy, allowDirect and ICMP of pod's spec s from
// the doorman node agent (package agentclient): its answer, else the
// file it last wrote for the pod. Without either, the ADD fails so that
// the kubelet retries (withoutAgent "refuse", the default), or the pod
// gets the network's policy narrowed by its annotations (withoutAgent
// "default"). A pod the agent refuses (its annotations do not parse)
// fails with the agent's reason.
func (n *NetConf) fromAgent(pod Pod, s *spec.Spec) error {
	a, fromFile, err := agentclient.Get(n.Agent.Dir, pod.Namespace, pod.Name, pod.UID, time.Duration(n.Agent.Wait))
	var pe *agentclient.PodError
	switch {
	case errors.As(err, &pe):
		return types.NewError(types.ErrInvalidNetworkConfig, "doorman: pod "+pod.ID()+": "+pe.Reason, "")
	case err != nil && n.Agent.WithoutAgent == "default":
		fmt.Fprintf(os.Stderr, "doorman: pod %s: %v: it gets the node's default policy (withoutAgent: default)\n", pod.ID(), err)
		return n.withoutAgent(pod, s)
	case err != nil:
		return types.NewError(types.ErrTryAgainLater,
			"doorman: pod "+pod.ID()+": no policy from the doorman node agent (withoutAgent: refuse): the pod waits until the agent answers", err.Error())
	}
	if fromFile {
		fmt.Fprintf(os.Stderr, "doorman: pod %s: the node agent did not answer: the policy it last wrote for the pod (computed %s) applies\n", pod.ID(), a.Computed.Format(time.RFC3339))
	}
	s.Policy, s.AllowDirect, s.AllowICMP = a.Policy, a.AllowDirect, a.AllowICMP
	return nil
}

// withoutAgent is a pod's policy when the agent has none for it and the
// installer says "default": the network's, narrowed by the pod's
// annotations (or replaced, with annotations "replace").
func (n *NetConf) withoutAgent(pod Pod, s *spec.Spec) error {
	ann := n.RuntimeConfig.PodAnnotations
	fail := func(err error) error {
		return types.NewError(types.ErrInvalidNetworkConfig, "doorman: pod "+pod.ID()+": "+err.Error(), "")
	}
	if err := annotation.CheckKnown(ann); err != nil {
		return fail(err)
	}
	asked, ok, err := annotation.Policy(ann)
	if err != nil {
		return fail(err)
	}
	direct, err := annotation.Direct(ann)
	if err != nil {
		return fail(err)
	}
	replace := n.Agent.Annotations == "replace"
	s.Policy = n.Settings.Policy
	if ok {
		if replace {
			s.Policy = asked
		} else {
			s.Policy, _ = annotation.Narrow(n.Settings.Policy, asked)
		}
	}
	if replace {
		s.AllowDirect = append(s.AllowDirect, direct...)
	} else if _, has := ann[annotation.AllowDirect]; has {
		var kept []conf.Direct
		for _, d := range direct {
			x, _ := annotation.NarrowDirect(d, s.AllowDirect)
			kept = append(kept, x...)
		}
		s.AllowDirect = kept
	}
	return nil
}

// describePod names the pod (or container) of args in an error.
func describePod(args *skel.CmdArgs) string {
	if pod, ok := podOf(cniArgs(args.Args)); ok {
		return "pod " + pod.ID()
	}
	return "container " + args.ContainerID
}

// policyNames are the file names a container's policy may have in
// PolicyDir: its id (for nerdctl's "<namespace>-<id>", also the id alone,
// as `nerdctl create` prints it), then the pod/container name a runtime
// passed in CNI_ARGS (Podman and Kubernetes pass K8S_POD_NAME). Names that
// could leave the directory are skipped.
func policyNames(args *skel.CmdArgs) []string {
	names := []string{args.ContainerID}
	if _, id, ok := sandbox.SplitNamespacedID(args.ContainerID); ok {
		names = append(names, id)
	}
	kv := cniArgs(args.Args)
	if ns, name := kv["K8S_POD_NAMESPACE"], kv["K8S_POD_NAME"]; name != "" {
		if ns != "" {
			names = append(names, ns+"_"+name)
		}
		names = append(names, name)
	}
	var out []string
	for _, s := range names {
		if s != "" && sandbox.ValidKey(s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// spec is what the ADD of this conflist entry enforces on the container
// of args: the network's spec (Settings), with the container's policy
// (see policy), its pod's allowDirect besides the network's, its resolvers
// (see resolvers), its network's CA directory, the cluster's names, and
// the host's OTLP export and caps where the network gives none. Each
// setting was parsed once (by ParseEntry, ParseRuntimeConfig and the
// annotation package).
func (n *NetConf) spec(args *skel.CmdArgs, prev *current.Result) (spec.Spec, error) {
	s := n.Settings.Spec.Clone()
	s.CADir = filepath.Join(n.CADir, n.Name)
	if n.Name == "" || n.Name == "." || n.Name == ".." || filepath.Base(n.Name) != n.Name {
		return s, types.NewError(types.ErrInvalidNetworkConfig, "doorman: network name", fmt.Sprintf("%q cannot name a CA directory", n.Name))
	}
	var err error
	if pod, ok := podOf(cniArgs(args.Args)); ok && n.Agent != nil {
		if err := n.fromAgent(pod, &s); err != nil {
			return s, err
		}
	} else {
		if s.Policy, err = n.policy(args); err != nil {
			return s, err
		}
		podDirect, err := annotation.Direct(n.RuntimeConfig.PodAnnotations)
		if err != nil {
			return s, types.NewError(types.ErrInvalidNetworkConfig, "doorman: "+describePod(args)+": "+err.Error(), "")
		}
		s.AllowDirect = append(s.AllowDirect, podDirect...)
	}
	if s.Resolvers, err = n.resolvers(prev); err != nil {
		return s, err
	}
	if s.OTLP, err = n.otlp(); err != nil {
		return s, err
	}
	s.ClusterNames = n.clusterNames()
	if s.Limits, err = n.limits(hostconf.LimitsFile); err != nil {
		return s, err
	}
	return s, nil
}

// clusterNames open the network's serviceCIDRs and podCIDRs to the names
// under its clusterDomain (none if it names no CIDR).
func (n *NetConf) clusterNames() []spec.NameScope {
	prefixes := slices.Concat(n.ServiceCIDRs, n.PodCIDRs)
	if len(prefixes) == 0 {
		return nil
	}
	return []spec.NameScope{{Domain: n.ClusterDomain, Prefixes: prefixes}}
}

// resolvers picks the DNS servers containers may query: the network's
// resolvers key, else the servers of the runtime's dns capability (a
// Kubernetes pod's dns_config: what the kubelet writes into its
// resolv.conf, whatever the interface plugin's result says), else the
// interface plugin's, else the conflist's dns.nameservers, else the
// host's.
func (n *NetConf) resolvers(prev *current.Result) ([]netip.Addr, error) {
	if len(n.Settings.Resolvers) > 0 {
		return n.Settings.Resolvers, nil
	}
	if dns := n.RuntimeConfig.DNS; dns != nil && len(dns.Servers) > 0 {
		return parseAddrs("runtimeConfig dns.servers", dns.Servers)
	}
	if prev != nil && len(prev.DNS.Nameservers) > 0 {
		return parseAddrs("prevResult dns.nameservers", prev.DNS.Nameservers)
	}
	if len(n.DNS.Nameservers) > 0 {
		return parseAddrs("dns.nameservers", n.DNS.Nameservers)
	}
	host, err := hostconf.Resolvers()
	if err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "doorman: no resolvers configured", err.Error()+": set resolvers in the network configuration")
	}
	return host, nil
}

// ipamAddrs are the addresses prev assigns the container's interface
// ifName, for the host-side layer to pin; nil if prev does not say which
// of its addresses are that interface's (the layer then reads them from
// the interface).
func ipamAddrs(prev *current.Result, ifName string) []netip.Addr {
	var out []netip.Addr
	for _, c := range prev.IPs {
		if c.Interface == nil || *c.Interface < 0 || *c.Interface >= len(prev.Interfaces) {
			continue
		}
		if i := prev.Interfaces[*c.Interface]; i.Name != ifName || i.Sandbox == "" {
			continue
		}
		if a, ok := netip.AddrFromSlice(c.Address.IP); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// parseAddrs parses the addresses of key.
func parseAddrs(key string, values []string) ([]netip.Addr, error) {
	addrs, err := spec.ParseAddrs(key, values)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "doorman: "+err.Error(), "")
	}
	return addrs, nil
}

// sandboxKey names an attachment's state: container id and interface.
// Ids that cannot name a directory are hashed.
func sandboxKey(containerID, ifName string) string {
	k := containerID + "-" + ifName
	if sandbox.ValidKey(k) == nil {
		return k
	}
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifName))
	return "h" + hex.EncodeToString(sum[:16])
}

// otlp returns the OTLP export settings: the network's, else the host's.
func (n *NetConf) otlp() (spec.OTLP, error) {
	if n.OTLP.Endpoint != "" {
		return n.OTLP, nil
	}
	return hostconf.OTLP(hostconf.OTLPFile)
}

// limits returns the caps: the network's limits key (Settings.Limits,
// checked by ParseEntry) over those of the host's file at hostFile.
func (n *NetConf) limits(hostFile string) (spec.Limits, error) {
	host, err := hostconf.Limits(hostFile)
	if err != nil {
		return host, types.NewError(types.ErrInvalidNetworkConfig, "doorman: "+err.Error(), "")
	}
	return host.Or(n.Settings.Limits), nil
}
