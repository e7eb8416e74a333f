package runner

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// Defaults of the run network.
const (
	// DefaultBridge is the host bridge run sandboxes are attached to. It
	// is created by the first run and removed by the last.
	DefaultBridge = "doorman-run0"
	// DefaultSubnet is the run network's address range. It has to be a
	// range nothing else on the host routes; see Config.Subnets.
	DefaultSubnet = "10.213.253.0/24"
	// DefaultRunDir holds the runs' records, CNI caches, generated
	// resolv.conf files and the IPAM data of the run network.
	DefaultRunDir = "/run/doorman-run"
	// IfName is the sandbox's interface.
	IfName = "eth0"
	// cniVersion is the newest spec version that both doorman and
	// Debian's reference plugins (v1.1.1, in /usr/lib/cni) speak.
	cniVersion = "1.0.0"
	// loopbackNetwork names the network that only brings lo up.
	loopbackNetwork = "doorman-run-lo"
	// maxBridgeName is IFNAMSIZ-1.
	maxBridgeName = 15
)

// Config says how to attach one sandbox.
type Config struct {
	// Policy is what the command may reach (required).
	Policy *conf.Policy
	// Name is the sandbox's container id: it names the namespace
	// (doorman-<Name>), the sandbox state (<Name>-eth0) and its decision
	// log (<LogDir>/<Name>-eth0.log). Default "run-" and 8 hex digits.
	Name string
	// Resolvers are the DNS servers the command may query; they are the
	// only nameservers in its /etc/resolv.conf. Default: hostconf.Resolvers,
	// keeping the families the subnets provide.
	Resolvers []netip.Addr
	// Search is the resolv.conf search list (default: the host's).
	Search []string
	// UpstreamResolver is the DNS server the proxy resolves allowed
	// names with; the zero value means the sandbox's Resolvers, the ones
	// the command queries.
	UpstreamResolver netip.AddrPort
	// AllowICMP lets ICMP echo requests (at most 64 bytes of data) out of
	// the sandbox to the AllowDirect destinations.
	AllowICMP bool
	// AllowDirect are the destinations the command reaches without the
	// proxy (the plugin's allowDirect).
	AllowDirect []conf.Direct
	// NAT64Prefixes are the NAT64 prefixes the host reaches besides the
	// well-known and local-use ones (the plugin's nat64Prefixes).
	NAT64Prefixes []netip.Prefix
	// Bridge is the host bridge (default DefaultBridge).
	Bridge string
	// Subnets are the run network's ranges, at most one per family
	// (default DefaultSubnet). Each must not be routed elsewhere on the host.
	Subnets []netip.Prefix
	// CNIPath are the directories searched for the plugins loopback,
	// bridge, host-local and doorman (default SearchPath of this binary).
	CNIPath []string
	// StateDir and LogDir are the doorman plugin's (default
	// /run/doorman and /var/log/doorman).
	StateDir, LogDir string
	// CADir holds the networks' CAs (default hostconf.DefaultCADir); a
	// run's is CADir/<Bridge>. UpstreamCAFile, if set, holds the PEM
	// roots inspected hosts' certificates are verified against.
	CADir, UpstreamCAFile string
	// Limits are the proxy's caps, written as the network's "limits"
	// (the zero value: the host's /etc/doorman/limits.json, else the
	// defaults).
	Limits spec.Limits
	// RunDir is this package's own directory (default DefaultRunDir).
	RunDir string
	// ProxyLimits are the limits of the sandbox proxy's cgroup (the
	// plugin's proxyLimits; zero fields: its defaults).
	ProxyLimits cgroup.Limits
	// Logf reports what is worth a user's attention but does not stop the
	// run (a stale run reaped, a leftover it could not remove). Default:
	// discard.
	Logf func(format string, args ...any)
}

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Policy == nil {
		return c, errors.New("no policy")
	}
	if c.Name == "" {
		b := make([]byte, 4)
		if _, err := rand.Read(b); err != nil {
			return c, fmt.Errorf("random sandbox name: %w", err)
		}
		c.Name = "run-" + hex.EncodeToString(b)
	}
	if err := CheckName(c.Name); err != nil {
		return c, err
	}
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if err := CheckBridgeName(c.Bridge); err != nil {
		return c, err
	}
	if len(c.Subnets) == 0 {
		c.Subnets = []netip.Prefix{netip.MustParsePrefix(DefaultSubnet)}
	}
	if err := CheckSubnets(c.Subnets); err != nil {
		return c, err
	}
	if len(c.Resolvers) == 0 {
		host, err := hostconf.Resolvers()
		if err != nil {
			return c, fmt.Errorf("%w: give the resolvers with --dns", err)
		}
		c.Resolvers = usableResolvers(host, c.Subnets)
		if len(c.Resolvers) == 0 {
			return c, fmt.Errorf("none of the host's resolvers (%s) is reachable from subnets %s: give the resolvers with --dns",
				joinAddrs(host), joinPrefixes(c.Subnets))
		}
		if c.Search == nil {
			c.Search = hostconf.Search()
		}
	}
	if err := checkResolvers(c.Resolvers, c.Subnets); err != nil {
		return c, err
	}
	if c.StateDir == "" {
		c.StateDir = hostconf.DefaultStateDir
	}
	if c.LogDir == "" {
		c.LogDir = hostconf.DefaultLogDir
	}
	if c.RunDir == "" {
		c.RunDir = DefaultRunDir
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c, nil
}

// CheckName accepts the names Config.Name may be: those that can be a
// sandbox key once "-eth0" is added.
func CheckName(name string) error {
	if err := sandbox.ValidKey(name + "-" + IfName); err != nil {
		return fmt.Errorf("sandbox name %q: want letters, digits, '_', '.', '-', starting with a letter or digit, at most 195", name)
	}
	return nil
}

// CheckBridgeName accepts the names Config.Bridge may be: interface
// names.
func CheckBridgeName(name string) error {
	if len(name) > maxBridgeName || strings.ContainsAny(name, "/ \t\n:%") || name == "." || name == ".." {
		return fmt.Errorf("bridge name %q: want an interface name of at most %d characters without '/', ':', '%%' or spaces", name, maxBridgeName)
	}
	return nil
}

// CheckSubnets accepts what Config.Subnets may be: one IPv4 and one IPv6
// prefix at most, each with room for the gateway and at least one
// sandbox.
func CheckSubnets(subnets []netip.Prefix) error {
	var v4, v6 int
	for _, p := range subnets {
		if !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return fmt.Errorf("subnet %q: not a plain IPv4 or IPv6 prefix", p)
		}
		if p != p.Masked() {
			return fmt.Errorf("subnet %s: host bits are set; did you mean %s?", p, p.Masked())
		}
		if p.Addr().Is4() {
			v4++
			if p.Bits() > 29 {
				return fmt.Errorf("subnet %s: too small, want /29 or larger", p)
			}
		} else {
			v6++
			if p.Bits() > 120 {
				return fmt.Errorf("subnet %s: too small, want /120 or larger", p)
			}
		}
	}
	if v4 > 1 || v6 > 1 {
		return fmt.Errorf("subnets %s: at most one IPv4 and one IPv6 subnet", joinPrefixes(subnets))
	}
	return nil
}

// checkResolvers refuses resolvers the sandbox has no route to: an IPv6
// resolver without an IPv6 subnet, loopback and link-local ones.
func checkResolvers(resolvers []netip.Addr, subnets []netip.Prefix) error {
	for _, r := range resolvers {
		switch {
		case !r.IsValid() || r.Zone() != "":
			return fmt.Errorf("resolver %q: not a plain IP address", r)
		case r.IsLoopback() || r.IsUnspecified():
			return fmt.Errorf("resolver %s: a loopback address is the sandbox's own; give a resolver it can reach", r)
		case r.IsLinkLocalUnicast():
			return fmt.Errorf("resolver %s: link-local addresses are not reachable from the sandbox", r)
		case !hasFamily(subnets, r):
			return fmt.Errorf("resolver %s: the sandbox has no %s subnet; add one with --subnet", r, family(r))
		}
	}
	return nil
}

// usableResolvers keeps the resolvers checkResolvers would accept.
func usableResolvers(resolvers []netip.Addr, subnets []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, r := range resolvers {
		if checkResolvers([]netip.Addr{r}, subnets) == nil {
			out = append(out, r)
		}
	}
	return out
}

func hasFamily(subnets []netip.Prefix, a netip.Addr) bool {
	for _, p := range subnets {
		if p.Addr().Is4() == a.Is4() {
			return true
		}
	}
	return false
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// loopbackList is the network that brings the sandbox's lo up: the proxy's
// listeners are reached over it.
func loopbackList() []byte {
	data, _ := json.Marshal(map[string]any{
		"cniVersion": cniVersion,
		"name":       loopbackNetwork,
		"plugins":    []any{map[string]any{"type": "loopback"}},
	})
	return data
}

// chainList is the run network: bridge (host-local IPAM on the subnets,
// a default route per family, no masquerading of its own: Attach adds
// it), then doorman with the policy. The network is named after the bridge,
// so two bridges never share IPAM data.
func (c Config) chainList(ipamDir string) ([]byte, error) {
	var ranges, routes []any
	for _, p := range c.Subnets {
		ranges = append(ranges, []any{map[string]any{"subnet": p.String()}})
		dst := "0.0.0.0/0"
		if p.Addr().Is6() {
			dst = "::/0"
		}
		routes = append(routes, map[string]any{"dst": dst})
	}
	resolvers := make([]string, len(c.Resolvers))
	for i, r := range c.Resolvers {
		resolvers[i] = r.String()
	}
	bridge := map[string]any{
		"type":      "bridge",
		"bridge":    c.Bridge,
		"isGateway": true,
		"ipMasq":    false,
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": ipamDir,
			"ranges":  ranges,
			"routes":  routes,
		},
		"dns": map[string]any{"nameservers": resolvers},
	}
	// The policy in the keys conf.ParseJSON reads.
	doorman := map[string]any{
		"type":         "doorman",
		"mode":         c.Policy.Mode,
		"allowedHosts": c.Policy.Hosts(),
		"resolvers":    resolvers,
		"allowICMP":    c.AllowICMP,
		"stateDir":     c.StateDir,
		"logDir":       c.LogDir,
	}
	if len(c.AllowDirect) > 0 {
		doorman["allowDirect"] = c.AllowDirect
	}
	if c.UpstreamResolver.IsValid() {
		doorman["upstreamResolver"] = c.UpstreamResolver
	}
	if len(c.NAT64Prefixes) > 0 {
		doorman["nat64Prefixes"] = c.NAT64Prefixes
	}
	if c.Policy.HasInspection() {
		// The request rules and rule sets, in the form ParseJSON reads
		// (placeholders as their SHA-256).
		js, err := c.Policy.MarshalInspectRules()
		if err != nil {
			return nil, err
		}
		doorman["inspect"] = json.RawMessage(js)
	}
	if c.UpstreamCAFile != "" {
		doorman["upstreamCAFile"] = c.UpstreamCAFile
	}
	if c.CADir != "" {
		doorman["caDir"] = c.CADir
	}
	if c.Limits != (spec.Limits{}) {
		doorman["limits"] = c.Limits
	}
	if l := spec.ProxyLimitsConfigOf(c.ProxyLimits); l != nil {
		doorman["proxyLimits"] = l
	}
	return json.Marshal(map[string]any{
		"cniVersion": cniVersion,
		"name":       c.Bridge,
		"plugins":    []any{bridge, doorman},
	})
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
