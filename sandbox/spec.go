package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/guard"
	"github.com/doorman-net/doorman/proxy/otlplog"
	"github.com/doorman-net/doorman/proxy/proxyconf"
	"github.com/doorman-net/doorman/proxy/resolver"
)

// Spec is the one typed description of what a sandbox enforces. Each front
// door (a CNI conflist and its runtimeConfig, OCI annotations and Docker
// labels with the hook's flags, the flags of `doorman run`) turns its own
// keys into a Spec once, with the parsers below, and hands it to Enforce;
// nothing after that parses a setting again.
type Spec struct {
	// Policy is the policy to enforce (required): its mode and entries.
	Policy *conf.Policy
	// Resolvers are the DNS servers the sandbox may query.
	Resolvers []netip.Addr
	// UpstreamResolvers, if any, are the DNS servers the proxy resolves
	// allowed names with, in order, instead of the sandbox's own
	// Resolvers (see ProxyResolversFor): an operator's upstreamResolver.
	UpstreamResolvers []netip.AddrPort
	// AllowDirect are the destinations the sandbox reaches without the
	// proxy, on both layers.
	AllowDirect []conf.Direct
	// AllowICMP lets small ICMP echo requests out to the AllowDirect
	// destinations.
	AllowICMP bool
	// DNSFilter sends the sandbox's DNS through the proxy's DNS filter,
	// which answers only names the policy could admit, instead of
	// straight to its resolvers (where DNS is a tunnel).
	DNSFilter bool
	// HostLayer adds the host-side layer (package hostlayer) in the
	// caller's namespace: rules on the sandbox's host interfaces that a
	// workload holding CAP_NET_ADMIN cannot remove.
	HostLayer bool
	// LogDir receives the decision log, <LogDir>/<key>.log (default
	// hostconf.DefaultLogDir).
	LogDir string
	// OTLP, when its Endpoint is set, makes the proxy also export its
	// decision and DNS records to that OpenTelemetry collector.
	OTLP otlplog.Config
	// ClusterNames open private ranges to the names under a domain, for
	// the proxy and its DNS filter: a Kubernetes cluster's service and
	// pod CIDRs to the names under its cluster domain (see guard.Scope).
	ClusterNames []proxyconf.NameScope
	// NAT64Prefixes are the prefixes of the NAT64 translators the
	// host reaches besides the well-known and local-use ones, whose
	// addresses the proxy and its DNS filter judge by the IPv4 address
	// they carry (see guard.Config.NAT64Prefixes; ParseNAT64Prefixes).
	NAT64Prefixes []netip.Prefix
	// CADir is the sandbox's network's CA directory (package ca,
	// hostconf.DefaultCADir/<network>), which a policy with request
	// rules creates on first use and the proxy signs inspected hosts'
	// certificates with.
	CADir string
	// UpstreamCAFile, if set, holds the PEM roots the proxy verifies
	// inspected hosts' certificates against instead of the system's.
	UpstreamCAFile string
	// Limits are the caps of the sandbox's proxy (the zero value: the
	// defaults; see proxyconf.Limits).
	Limits proxyconf.Limits
	// ProxyLimits are the limits of the proxy's cgroup; a zero field
	// means its default (DefaultProxyMemory, DefaultProxyPids,
	// DefaultProxyCPUWeight), cgroup.Max no limit (see ParseMemoryLimit,
	// ParsePidsLimit, ParseCPUWeight).
	ProxyLimits cgroup.Limits
}

// Attachment is who a sandbox is: the container and, for CNI, the
// attachment of it that the sandbox enforces.
type Attachment struct {
	Key string // unique per attachment; names the state directory (see ValidKey)
	// ID is what the sandbox is called (default Key): the container id,
	// or for a Kubernetes pod "<namespace>/<pod name>". The decision log
	// and the CLI show it, and the CLI takes it as a selector.
	ID      string
	Name    string // container name, if known
	PodUID  string // a Kubernetes pod's uid, if known: in the decision log with the ID
	Runtime string // "cni" or "hook"
	Network string // CNI network name, if any
	IfName  string // CNI interface name, if any
	NetNS   string // path of the sandbox's network namespace
	// Label is what the in-namespace rules cover given the workload's
	// capabilities: full or partial (...); see ComposeLabel.
	Label string
	// HostIfaces names the sandbox's host interfaces for the host-side
	// layer (the CNI prevResult's host veth); empty means find the veth
	// peers of the sandbox. With the layer in place the label is "full";
	// where no host interface can be found (macvlan, or a runtime that
	// adds the interface later) the sandbox runs without it and keeps its
	// Label.
	HostIfaces []string
	// Addrs are the addresses IPAM assigned interface IfName (the CNI
	// result's): where the host-side layer first pins the sandbox's
	// identity on that interface, it pins these rather than those the
	// interface has. Empty means read them from the interface.
	Addrs []netip.Addr
	// CgroupParent is the cgroup the proxy's cgroup goes below, as the
	// runtime names it (see cgroup.ParsePath): a pod's cgroup, from the
	// CNI cgroupPath capability, or the parent of a container's own
	// cgroup, for the OCI hook. Empty, or one that cannot be used, means
	// doorman's slice (DefaultCgroupSlice).
	CgroupParent string
}

// validate checks what Enforce needs of s and a; each value in them was
// parsed once, by its front door.
func (s *Spec) validate(a Attachment) error {
	if s.Policy == nil {
		return errors.New("no policy")
	}
	if m, err := conf.ParseMode(string(s.Policy.Mode)); err != nil || m != s.Policy.Mode {
		return fmt.Errorf("policy mode %q: want none, allowlist or open", s.Policy.Mode)
	}
	if a.NetNS == "" {
		return errors.New("no network namespace")
	}
	if err := s.Limits.Validate(); err != nil {
		return err
	}
	for _, p := range s.NAT64Prefixes {
		if err := guard.ValidateNAT64Prefix(p); err != nil {
			return fmt.Errorf("NAT64 prefix %v: %w", p, err)
		}
	}
	if w := s.ProxyLimits.CPUWeight; w > cgroup.MaxCPUWeight {
		return fmt.Errorf("proxy CPU weight %d: want 1 to %d", w, cgroup.MaxCPUWeight)
	}
	return ValidKey(a.Key)
}

// FieldError is a setting a front door was given that is not valid. Its
// text names the key as that front door spells it (allowDirect in a
// conflist, annotation doorman.io/allow-direct, --allow-direct as a flag),
// the value as given, and why: `allowDirect "db.example": only an IP
// address or CIDR (with an optional port) can bypass the proxy`.
type FieldError struct {
	Key    string
	Value  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s %q: %s", e.Key, e.Value, e.Reason) }

// ParseAllowDirect parses the allowDirect entries given under key (see
// conf.ParseDirect). The error is a *FieldError.
func ParseAllowDirect(key string, values []string) ([]conf.Direct, error) {
	var out []conf.Direct
	for _, v := range values {
		d, err := conf.ParseDirect(v)
		if err != nil {
			var ee *conf.EntryError
			if errors.As(err, &ee) {
				return nil, &FieldError{Key: key, Value: ee.Entry, Reason: ee.Reason}
			}
			return nil, &FieldError{Key: key, Value: v, Reason: err.Error()}
		}
		out = append(out, d)
	}
	return out, nil
}

// ParseServers parses DNS servers given under key, in every form
// resolver.ParseServer takes ("203.0.113.53", "[2001:db8::53]:5353"). The
// error is a *FieldError.
func ParseServers(key string, values ...string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, v := range values {
		ap, err := resolver.ParseServer(v)
		if err != nil {
			// ParseServer names the value first; the key goes before it.
			value := strings.TrimSpace(v)
			reason := strings.TrimPrefix(err.Error(), strconv.Quote(value)+": ")
			return nil, &FieldError{Key: key, Value: value, Reason: reason}
		}
		out = append(out, ap)
	}
	return out, nil
}

// ParseUpstreamResolver parses the upstreamResolver given under key: none
// for "" (the proxy then asks the sandbox's resolvers), else the one
// server the proxy asks instead.
func ParseUpstreamResolver(key, value string) ([]netip.AddrPort, error) {
	if value == "" {
		return nil, nil
	}
	return ParseServers(key, value)
}

// ParseNAT64Prefixes parses the NAT64 prefixes given under key: IPv6
// prefixes of a length RFC 6052 lays out (/32, /40, /48, /56, /64 or
// /96), without host bits (see guard.ValidateNAT64Prefix). The error is a
// *FieldError.
func ParseNAT64Prefixes(key string, values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return nil, &FieldError{Key: key, Value: v, Reason: "not an IPv6 prefix (such as 64:ff9b::/96 or 2001:db8:64::/96)"}
		}
		if err := guard.ValidateNAT64Prefix(p); err != nil {
			return nil, &FieldError{Key: key, Value: v, Reason: err.Error()}
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseAddrs parses the IP addresses given under key (resolvers a sandbox
// may query), IPv4-mapped ones as IPv4. The error is a *FieldError.
func ParseAddrs(key string, values []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, v := range values {
		a, err := netip.ParseAddr(strings.TrimSpace(v))
		if err != nil {
			return nil, &FieldError{Key: key, Value: v, Reason: "not an IP address"}
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}
