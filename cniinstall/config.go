package cniinstall

import (
	"encoding/json"
	"fmt"

	"github.com/doorman-net/doorman/conf"
	cniplugin "github.com/doorman-net/doorman/plugin"
)

// Config is the node's defaults that the installer writes into doorman's
// entry: the policy of pods without doorman annotations, which namespaces
// doorman leaves alone, what the cluster's names may reach, and where the
// plugin keeps its state and logs. Its keys are the plugin's (plugin.Keys),
// and it is read from the installer's --config file with ValidateConfig,
// which judges them with the plugin's own parser; the zero value is not
// valid, DefaultConfig is.
type Config struct {
	// Mode and AllowedHosts are the policy of a pod that carries no
	// doorman.io/mode or doorman.io/allowed-hosts annotation (default:
	// allowlist with no hosts, so nothing but DNS).
	Mode         string   `json:"mode"`
	AllowedHosts []string `json:"allowedHosts"`
	// ExcludeNamespaces are the namespaces whose pods doorman passes
	// through untouched (default ["kube-system"]: CoreDNS and the CNI's
	// own pods must keep working).
	ExcludeNamespaces []string `json:"excludeNamespaces"`
	// ClusterDomain is the DNS domain of the cluster's services (default
	// "cluster.local").
	ClusterDomain string `json:"clusterDomain"`
	// ServiceCIDRs and PodCIDRs are the private ranges that names under
	// ClusterDomain may reach. Names elsewhere may never reach a private
	// address, and names under the cluster domain reach only these.
	ServiceCIDRs []string `json:"serviceCIDRs,omitempty"`
	PodCIDRs     []string `json:"podCIDRs,omitempty"`
	// NAT64Prefixes are the prefixes of the NAT64 translators the nodes
	// reach besides 64:ff9b::/96 and 64:ff9b:1::/48: the proxies judge
	// their addresses by the IPv4 address they carry.
	NAT64Prefixes []string `json:"nat64Prefixes,omitempty"`
	// AllowDirect are IP or CIDR entries (optionally with a port) every
	// pod reaches without the proxy.
	AllowDirect []string `json:"allowDirect,omitempty"`
	// Resolvers, UpstreamResolver and PolicyDir are the plugin's keys of
	// those names (see the CNI configuration reference); on a cluster
	// the pod's DNS comes from the runtime, and none is needed.
	Resolvers        []string `json:"resolvers,omitempty"`
	UpstreamResolver string   `json:"upstreamResolver,omitempty"`
	PolicyDir        string   `json:"policyDir,omitempty"`
	// StateDir and LogDir are the plugin's (defaults /run/doorman and
	// /var/log/doorman), on the node.
	StateDir string `json:"stateDir,omitempty"`
	LogDir   string `json:"logDir,omitempty"`
	// OTLPEndpoint, OTLPInsecure and OTLPHeaders export every proxy's
	// records to an OpenTelemetry collector (see otlplog.Config).
	OTLPEndpoint string            `json:"otlpEndpoint,omitempty"`
	OTLPInsecure bool              `json:"otlpInsecure,omitempty"`
	OTLPHeaders  map[string]string `json:"otlpHeaders,omitempty"`
	// DNSFilter and HostLayer turn the protective layers off when false
	// (both default true); AllowICMP lets small echo requests out to
	// AllowDirect destinations (default false).
	DNSFilter *bool `json:"dnsFilter,omitempty"`
	HostLayer *bool `json:"hostLayer,omitempty"`
	AllowICMP bool  `json:"allowICMP,omitempty"`
	// Inspect is the request rules of the pods without annotations
	// (conf.ParseInspectJSON), CADir and UpstreamCAFile the plugin's keys
	// of those names (see "Request rules: inspected hosts").
	Inspect        json.RawMessage `json:"inspect,omitempty"`
	CADir          string          `json:"caDir,omitempty"`
	UpstreamCAFile string          `json:"upstreamCAFile,omitempty"`
	// Limits are every pod proxy's caps (spec.Limits), ProxyLimits
	// the limits of its cgroup (spec.ProxyLimitsConfig), as the
	// plugin reads them; passed on as written.
	Limits      json.RawMessage `json:"limits,omitempty"`
	ProxyLimits json.RawMessage `json:"proxyLimits,omitempty"`
	// Agent says that the doorman node agent computes each pod's policy
	// (plugin.AgentSettings: dir, wait, withoutAgent, annotations).
	Agent json.RawMessage `json:"agent,omitempty"`
}

// Defaults of the keys a --config file may leave out: the plugin's.
const (
	DefaultMode          = string(conf.ModeAllowlist)
	DefaultClusterDomain = cniplugin.DefaultClusterDomain
)

// DefaultExcludeNamespaces is the default of Config.ExcludeNamespaces.
func DefaultExcludeNamespaces() []string { return cniplugin.DefaultExcludeNamespaces() }

// DefaultConfig is the configuration of an installer run without --config.
func DefaultConfig() *Config {
	return &Config{
		Mode:              DefaultMode,
		AllowedHosts:      []string{},
		ExcludeNamespaces: DefaultExcludeNamespaces(),
		ClusterDomain:     DefaultClusterDomain,
	}
}

// ValidateConfig parses an installer configuration (a JSON object with the
// keys of Config) and checks every value, filling in the defaults of the
// keys it leaves out. It reports every problem at once, each naming the key
// and the value and saying why; an unknown key is one of them, so that a
// misspelt key is never silently a default. On any error it returns nil.
//
// The values are judged by the CNI plugin's own parser (plugin.ParseSettings),
// the one that reads them from the entry at every ADD: a --config the
// installer accepts is one the plugin accepts.
func ValidateConfig(data []byte) (*Config, error) {
	if _, err := cniplugin.ParseSettings(data); err != nil {
		return nil, err
	}
	return decodeConfig(data)
}

// ValidateEntry is ValidateConfig for doorman's entry in a conflist, as the
// plugin receives it (plugin.ParseEntry): the same keys and checks, and the
// CNI's own keys (plugin.CNIKeys: type, name, cniVersion, capabilities,
// runtimeConfig, prevResult, args, ...) besides, which it leaves to the
// CNI's parsers.
func ValidateEntry(data []byte) (*Config, error) {
	if _, err := cniplugin.ParseEntry(data); err != nil {
		return nil, err
	}
	return decodeConfig(data)
}

// decodeConfig reads the keys of data, which the plugin's parser
// accepted, into a Config over the defaults, as they are written.
func decodeConfig(data []byte) (*Config, error) {
	c := DefaultConfig()
	if err := json.Unmarshal(data, c); err != nil {
		// The plugin's parser checked every key's type.
		return nil, fmt.Errorf("not a configuration: %w", err)
	}
	// Empty optional lists are left out of the entry: they are nil, as
	// if absent.
	for _, l := range []*[]string{&c.ServiceCIDRs, &c.PodCIDRs, &c.NAT64Prefixes, &c.AllowDirect, &c.Resolvers} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	if len(c.OTLPHeaders) == 0 {
		c.OTLPHeaders = nil
	}
	return c, nil
}

// PluginType is the type of doorman's entry in a conflist: the name of its
// binary in the CNI bin dir.
const PluginType = "doorman"

// The capabilities doorman's entry declares, so that the runtime passes
// the pod's annotations (its per-pod policy), its DNS servers (the
// resolvers of its sandbox) and its cgroup (where its proxy runs) in the
// entry's runtimeConfig.
const (
	CapPodAnnotations = "io.kubernetes.cri.pod-annotations"
	CapDNS            = "dns"
	CapCgroupPath     = "cgroupPath"
)

// entryCapabilities is the capabilities object of doorman's entry.
type entryCapabilities struct {
	PodAnnotations bool `json:"io.kubernetes.cri.pod-annotations"`
	DNS            bool `json:"dns"`
	CgroupPath     bool `json:"cgroupPath"`
}

// entryJSON is doorman's entry: its type, the Config's keys, then its
// capabilities, in that order.
type entryJSON struct {
	Type string `json:"type"`
	*Config
	Capabilities entryCapabilities `json:"capabilities"`
}

// Entry renders doorman's conflist entry for c. With indent empty it is
// one line; otherwise every line after the first begins with prefix and
// one indent per level, as json.MarshalIndent writes them.
func (c *Config) Entry(prefix, indent string) []byte {
	cc := *c
	if cc.AllowedHosts == nil {
		cc.AllowedHosts = []string{}
	}
	if cc.ExcludeNamespaces == nil {
		cc.ExcludeNamespaces = []string{}
	}
	e := entryJSON{Type: PluginType, Config: &cc, Capabilities: entryCapabilities{true, true, true}}
	var b []byte
	var err error
	if indent == "" {
		b, err = json.Marshal(e)
	} else {
		b, err = json.MarshalIndent(e, prefix, indent)
	}
	if err != nil {
		// Strings, string slices, a string map and bools: nothing here
		// fails to encode.
		panic("cniinstall: encoding doorman's entry: " + err.Error())
	}
	return b
}
