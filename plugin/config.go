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
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/proxy/otlplog"
	"github.com/doorman-net/doorman/sandbox"
)

// NetConf is doorman's entry in a conflist. The network-wide policy, its
// keys mode and allowedHosts, is no field of it: conf.ParseJSON reads it
// from the same bytes, once, when an ADD needs it (see spec).
type NetConf struct {
	types.PluginConf
	// Resolvers are the DNS servers containers may query. Default: the
	// DNS servers in prevResult or the runtime's dns capability, else the
	// host's /etc/resolv.conf (systemd-resolved's upstreams when that
	// names only a loopback stub).
	Resolvers []string `json:"resolvers,omitempty"`
	// AllowICMP lets ICMP and ICMPv6 echo requests out to the AllowDirect
	// destinations, with at most 64 bytes of data (default false). The
	// ICMP errors of admitted flows and IPv6 neighbour discovery pass
	// either way; no other ICMP does.
	AllowICMP bool `json:"allowICMP,omitempty"`
	// PolicyDir holds per-container policy files (plain allowlist form)
	// named by container id or name; one there overrides the network's.
	PolicyDir string `json:"policyDir,omitempty"`
	// StateDir (default /run/doorman) and LogDir (default /var/log/doorman).
	StateDir string `json:"stateDir,omitempty"`
	LogDir   string `json:"logDir,omitempty"`
	// UpstreamResolver is the DNS server ("addr" or "addr:port", see
	// resolver.ParseServer) the proxy resolves allowed names with.
	// Default: the container's resolvers (those of Resolvers the proxy
	// can reach), else the host's resolv.conf.
	UpstreamResolver string `json:"upstreamResolver,omitempty"`
	// HostLayer adds rules on the container's host-side veth that a
	// workload holding CAP_NET_ADMIN cannot remove (default true).
	HostLayer *bool `json:"hostLayer,omitempty"`
	// AllowDirect are IP or CIDR entries, optionally with a port
	// ("10.0.0.5:5432"), the containers reach without the proxy.
	AllowDirect []string `json:"allowDirect,omitempty"`
	// OTLPEndpoint makes each proxy also export its records to this
	// OpenTelemetry collector (OTLP/HTTP: a URL, or host:port with
	// OTLPInsecure for plaintext). Default: /etc/doorman/otlp.json if it
	// exists (host-wide), else none.
	OTLPEndpoint string            `json:"otlpEndpoint,omitempty"`
	OTLPInsecure bool              `json:"otlpInsecure,omitempty"`
	OTLPHeaders  map[string]string `json:"otlpHeaders,omitempty"`
	// DNSFilter sends the containers' DNS through the proxy's filter,
	// which answers only names the policy could admit (default true).
	DNSFilter *bool `json:"dnsFilter,omitempty"`
	// ProxyLimits are the limits of each proxy's cgroup: {"memory":
	// "256Mi", "pids": 512, "cpuWeight": 100} (the defaults).
	ProxyLimits *sandbox.ProxyLimitsConfig `json:"proxyLimits,omitempty"`

	RuntimeConfig struct {
		DNS *struct {
			Servers []string `json:"servers,omitempty"`
		} `json:"dns,omitempty"`
		// CgroupPath is the pod's cgroup (the cgroupPath capability),
		// where the proxy's cgroup goes.
		CgroupPath string `json:"cgroupPath,omitempty"`
	} `json:"runtimeConfig,omitempty"`
}

// parseNetConf reads the conflist entry. It does not require prevResult:
// DEL and GC may come without one.
func parseNetConf(data []byte) (*NetConf, error) {
	var n NetConf
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "doorman: cannot parse network configuration", err.Error())
	}
	if n.StateDir == "" {
		n.StateDir = hostconf.DefaultStateDir
	}
	if n.LogDir == "" {
		n.LogDir = hostconf.DefaultLogDir
	}
	return &n, nil
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

// policy is the policy for this container: a policy file in PolicyDir named
// by the container's id or name if there is one, else the network's. Any
// error here refuses the ADD (fail closed).
func (n *NetConf) policy(raw []byte, args *skel.CmdArgs) (*conf.Policy, string, error) {
	if n.PolicyDir != "" {
		for _, name := range policyNames(args) {
			path := filepath.Join(n.PolicyDir, name)
			p, err := conf.LoadFile(path)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, "", types.NewError(types.ErrInvalidNetworkConfig, "doorman: per-container policy file", err.Error())
			}
			return p, path, nil
		}
	}
	p, err := conf.ParseJSON(raw)
	if err != nil {
		return nil, "", types.NewError(types.ErrInvalidNetworkConfig, "doorman: invalid policy in network "+quote(n.Name), err.Error())
	}
	return p, "", nil
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

// cniArgs parses CNI_ARGS ("K=V;K=V").
func cniArgs(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// containerName is the name the runtime passed, if any.
func containerName(args *skel.CmdArgs) string {
	return cniArgs(args.Args)["K8S_POD_NAME"]
}

// spec is what the ADD of this conflist entry enforces, each setting
// parsed once: the container's policy (see policy), its resolvers, the
// upstream resolver, allowDirect, the layers, the log directory and the
// OTLP export.
func (n *NetConf) spec(raw []byte, args *skel.CmdArgs, prev *current.Result) (sandbox.Spec, error) {
	s := sandbox.Spec{
		AllowICMP: n.AllowICMP,
		DNSFilter: n.DNSFilter == nil || *n.DNSFilter,
		HostLayer: n.HostLayer == nil || *n.HostLayer,
		LogDir:    n.LogDir,
	}
	var err error
	if s.Policy, _, err = n.policy(raw, args); err != nil {
		return s, err
	}
	if s.Resolvers, err = n.resolvers(prev); err != nil {
		return s, err
	}
	if s.UpstreamResolvers, err = n.upstreamResolver(); err != nil {
		return s, err
	}
	if s.AllowDirect, err = n.allowDirect(); err != nil {
		return s, err
	}
	if s.OTLP, err = n.otlp(); err != nil {
		return s, err
	}
	if s.ProxyLimits, err = n.ProxyLimits.Limits("proxyLimits"); err != nil {
		return s, invalidConfig(err)
	}
	return s, nil
}

// resolvers picks the DNS servers containers may query.
func (n *NetConf) resolvers(prev *current.Result) ([]netip.Addr, error) {
	if len(n.Resolvers) > 0 {
		return parseAddrs("resolvers", n.Resolvers)
	}
	if prev != nil && len(prev.DNS.Nameservers) > 0 {
		return parseAddrs("prevResult dns.nameservers", prev.DNS.Nameservers)
	}
	if n.RuntimeConfig.DNS != nil && len(n.RuntimeConfig.DNS.Servers) > 0 {
		return parseAddrs("runtimeConfig dns.servers", n.RuntimeConfig.DNS.Servers)
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
	addrs, err := sandbox.ParseAddrs(key, values)
	if err != nil {
		return nil, invalidConfig(err)
	}
	return addrs, nil
}

// invalidConfig is the CNI error of a bad setting (a sandbox.FieldError,
// which names the key, the value and why).
func invalidConfig(err error) error {
	return types.NewError(types.ErrInvalidNetworkConfig, "doorman: "+err.Error(), "")
}

// upstreamResolver parses UpstreamResolver: none (the proxy then asks the
// sandbox's resolvers), or the one server the proxy asks instead.
func (n *NetConf) upstreamResolver() ([]netip.AddrPort, error) {
	ups, err := sandbox.ParseUpstreamResolver("upstreamResolver", n.UpstreamResolver)
	if err != nil {
		return nil, invalidConfig(err)
	}
	return ups, nil
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

func quote(s string) string { return fmt.Sprintf("%q", s) }

// allowDirect parses AllowDirect: address entries only.
func (n *NetConf) allowDirect() ([]conf.Direct, error) {
	direct, err := sandbox.ParseAllowDirect("allowDirect", n.AllowDirect)
	if err != nil {
		return nil, invalidConfig(err)
	}
	return direct, nil
}

// otlp returns the OTLP export settings: the network's, else the host's.
func (n *NetConf) otlp() (otlplog.Config, error) {
	if n.OTLPEndpoint != "" {
		c := otlplog.Config{Endpoint: n.OTLPEndpoint, Insecure: n.OTLPInsecure, Headers: n.OTLPHeaders}
		if err := c.Validate(); err != nil {
			return c, types.NewError(types.ErrInvalidNetworkConfig, "doorman: otlpEndpoint", err.Error())
		}
		return c, nil
	}
	return hostconf.OTLP(hostconf.OTLPFile)
}
