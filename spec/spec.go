package spec

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
)

// Spec is the one typed description of what a sandbox enforces. Each
// front door (a CNI conflist and its runtimeConfig, OCI annotations and
// Docker labels with the hook's flags and runtime.json, the flags of
// `doorman run`, the Kubernetes installer's config) fills one Spec, once,
// with the parsers of this package, and hands it on; nothing after that
// parses a setting again.
//
// The sandbox's state embeds it (package sandbox: state.json), and the
// proxy's config file embeds its Proxy part (package launch), so that a
// setting added here reaches both without a line of copying. Its JSON
// keys are those files' keys.
type Spec struct {
	// Policy is the policy to enforce (required): its mode, entries and
	// request rules. It is not in the state: the sandbox's live policy
	// file holds it, which edits change and the proxy watches.
	Policy *conf.Policy `json:"-"`
	// Resolvers are the DNS servers the sandbox may query.
	Resolvers []netip.Addr `json:"resolvers"`
	// UpstreamResolvers, if any, are the DNS servers the proxy resolves
	// allowed names with, in order, instead of the sandbox's own
	// Resolvers: an operator's upstreamResolver.
	UpstreamResolvers []netip.AddrPort `json:"upstreamResolvers,omitempty"`
	// AllowICMP lets small ICMP echo requests out to the AllowDirect
	// destinations.
	AllowICMP bool `json:"allowICMP"`
	// DNSFilter sends the sandbox's DNS through the proxy's DNS filter,
	// which answers only names the policy could admit, instead of
	// straight to its resolvers (where DNS is a tunnel).
	DNSFilter bool `json:"dnsFilter,omitempty"`
	// HostLayer asks for the host-side layer (package hostlayer) in the
	// caller's namespace: rules on the sandbox's host interfaces that a
	// workload holding CAP_NET_ADMIN cannot remove. (Whether it holds is
	// the state's to say: a sandbox may have no host interface yet.)
	HostLayer bool `json:"hostLayerWanted,omitempty"`
	// LogDir receives the decision log, <LogDir>/<key>.log (default
	// hostconf.DefaultLogDir).
	LogDir string `json:"logDir,omitempty"`
	// ProxyLimits are the limits of the proxy's cgroup; a zero field
	// means its default (DefaultProxyMemory, DefaultProxyPids,
	// DefaultProxyCPUWeight), cgroup.Max no limit (see ParseMemoryLimit,
	// ParsePidsLimit, ParseCPUWeight).
	ProxyLimits cgroup.Limits `json:"proxyLimits,omitzero"`
	// Proxy is what the sandbox's proxy enforces besides the policy.
	Proxy
}

// Proxy is the part of a Spec that the sandbox's proxy reads from its
// config file.
type Proxy struct {
	// AllowDirect are the destinations the sandbox reaches without the
	// proxy, on both layers; the proxy logs their flows from conntrack.
	AllowDirect []conf.Direct `json:"allowDirect,omitempty"`
	// ClusterNames open private ranges to the names under a domain, for
	// the proxy and its DNS filter: a Kubernetes cluster's service and
	// pod CIDRs to the names under its cluster domain (see guard.Scope).
	ClusterNames []NameScope `json:"clusterNames,omitempty"`
	// NAT64Prefixes are the prefixes of the NAT64 translators the host
	// reaches besides the well-known and local-use ones, whose addresses
	// the proxy and its DNS filter judge by the IPv4 address they carry
	// (see guard.Config.NAT64Prefixes; ParseNAT64Prefixes).
	NAT64Prefixes []netip.Prefix `json:"nat64Prefixes,omitempty"`
	// OTLP, when its Endpoint is set, makes the proxy also export its
	// decision and DNS records to that OpenTelemetry collector.
	OTLP OTLP `json:"otlp,omitzero"`
	// CADir is the sandbox's network's CA directory (package ca,
	// hostconf.DefaultCADir/<network>), which a policy with request
	// rules creates on first use and the proxy signs inspected hosts'
	// certificates with; "" means none.
	CADir string `json:"caDir,omitempty"`
	// UpstreamCAFile, if set, holds the PEM roots the proxy verifies
	// inspected hosts' certificates against instead of the system's
	// (which SSL_CERT_FILE in the proxy's environment can also name).
	UpstreamCAFile string `json:"upstreamCAFile,omitempty"`
	// Limits are the caps of the sandbox's proxy (the zero value: the
	// defaults; see Limits).
	Limits Limits `json:"limits,omitzero"`
}

// NameScope is one of Proxy.ClusterNames: the names under Domain (a DNS
// name in canonical form, such as "cluster.local") may reach the private
// addresses inside Prefixes.
type NameScope struct {
	Domain   string         `json:"domain"`
	Prefixes []netip.Prefix `json:"prefixes"`
}

// Validate reports the first setting of s that a sandbox cannot be
// enforced with, naming it. The front doors' parsers refuse every such
// value with the key as they spell it; this is the last check of a Spec
// built in code.
func (s *Spec) Validate() error {
	if s.Policy == nil {
		return errors.New("no policy")
	}
	if m, err := conf.ParseMode(string(s.Policy.Mode)); err != nil || m != s.Policy.Mode {
		return fmt.Errorf("policy mode %q: want none, allowlist or open", s.Policy.Mode)
	}
	if w := s.ProxyLimits.CPUWeight; w > cgroup.MaxCPUWeight {
		return fmt.Errorf("proxyLimits.cpuWeight %d: want 1 to %d", w, cgroup.MaxCPUWeight)
	}
	return s.Proxy.Validate()
}

// Validate reports the first setting of p that a proxy would refuse,
// naming its key as the proxy's config file spells it.
func (p *Proxy) Validate() error {
	if err := p.OTLP.Validate(); err != nil {
		var se *SettingError
		if errors.As(err, &se) {
			return fmt.Errorf("otlp.%w", err)
		}
		return fmt.Errorf("otlp: %w", err)
	}
	for i, n := range p.ClusterNames {
		if d, err := conf.NormalizeName(n.Domain); err != nil || d != n.Domain || d == "" {
			return fmt.Errorf("clusterNames[%d].domain %q: want a DNS name in canonical form, such as cluster.local", i, n.Domain)
		}
		for j, pr := range n.Prefixes {
			if !pr.IsValid() || pr.Masked() != pr {
				return fmt.Errorf("clusterNames[%d].prefixes[%d] %q: want a CIDR prefix without host bits", i, j, pr)
			}
		}
	}
	for i, pr := range p.NAT64Prefixes {
		if err := guard.ValidateNAT64Prefix(pr); err != nil {
			return fmt.Errorf("nat64Prefixes[%d] %q: %w", i, pr.String(), err)
		}
	}
	return p.Limits.Validate()
}

// Clone returns a copy of s whose lists and maps are its own (the policy,
// which is never changed once made, is shared).
func (s Spec) Clone() Spec {
	s.Resolvers = slices.Clone(s.Resolvers)
	s.UpstreamResolvers = slices.Clone(s.UpstreamResolvers)
	s.Proxy = s.Proxy.Clone()
	return s
}

// Clone returns a copy of p whose lists and maps are its own.
func (p Proxy) Clone() Proxy {
	p.AllowDirect = slices.Clone(p.AllowDirect)
	p.NAT64Prefixes = slices.Clone(p.NAT64Prefixes)
	p.OTLP.Headers = maps.Clone(p.OTLP.Headers)
	p.ClusterNames = slices.Clone(p.ClusterNames)
	for i := range p.ClusterNames {
		p.ClusterNames[i].Prefixes = slices.Clone(p.ClusterNames[i].Prefixes)
	}
	if p.Limits.IdleTimeout != nil {
		d := *p.Limits.IdleTimeout
		p.Limits.IdleTimeout = &d
	}
	return p
}
