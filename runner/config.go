package runner

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/plugin"
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
	// Spec is what the sandbox enforces, handed to the doorman plugin
	// as its entry's keys (plugin.Settings.Entry), which it parses once:
	//   - Policy is what the command may reach (required);
	//   - Resolvers are the DNS servers the command may query, the only
	//     nameservers in its /etc/resolv.conf (default:
	//     hostconf.Resolvers, keeping the families the subnets provide);
	//   - UpstreamResolvers, at most one, is the DNS server the proxy
	//     resolves allowed names with (none: the sandbox's Resolvers);
	//   - CADir holds the networks' CAs (default hostconf.DefaultCADir):
	//     a run's is CADir/<Bridge>;
	//   - LogDir is the plugin's (default /var/log/doorman);
	//   - Limits (the zero value: the host's /etc/doorman/limits.json,
	//     else the defaults), ProxyLimits, AllowDirect, AllowICMP,
	//     NAT64Prefixes and UpstreamCAFile are the plugin's settings of
	//     those names (see plugin.Settings);
	//   - DNSFilter and HostLayer are ignored: a run always has both
	//     layers, whatever the zero value of a Config says.
	spec.Spec
	// Name is the sandbox's container id: it names the namespace
	// (doorman-<Name>), the sandbox state (<Name>-eth0) and its decision
	// log (<LogDir>/<Name>-eth0.log). Default "run-" and 8 hex digits.
	Name string
	// Search is the resolv.conf search list (default: the host's).
	Search []string
	// Bridge is the host bridge (default DefaultBridge).
	Bridge string
	// Subnets are the run network's ranges, at most one per family
	// (default DefaultSubnet). Each must not be routed elsewhere on the host.
	Subnets []netip.Prefix
	// CNIPath are the directories searched for the plugins loopback,
	// bridge, host-local and doorman (default SearchPath of this binary).
	CNIPath []string
	// StateDir is the doorman plugin's (default /run/doorman).
	StateDir string
	// RunDir is this package's own directory (default DefaultRunDir).
	RunDir string
	// Runtime, if set, is the argv of an OCI runtime (gVisor's runsc and
	// its flags) that runs the command on a network stack of its own:
	// Start runs `<Runtime> --root <dir> run --bundle <dir> <id>` with a
	// bundle whose root is the command's view of the host (see
	// ociSpec). Nil runs the command as a process of the host kernel.
	Runtime []string
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
	if c.CADir == "" {
		c.CADir = hostconf.DefaultCADir
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
	// The spec, in the doorman plugin's own keys.
	settings := plugin.DefaultSettings()
	settings.Spec, settings.StateDir = c.Spec, c.StateDir
	settings.DNSFilter, settings.HostLayer = true, true
	doorman, err := settings.Entry()
	if err != nil {
		return nil, err
	}
	doorman["type"] = "doorman"
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
