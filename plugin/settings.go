package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/internal/strictjson"
	"github.com/doorman-net/doorman/kube/agentclient"
	"github.com/doorman-net/doorman/spec"
)

// Keys are doorman's own keys in its conflist entry, in the order the
// installer writes them (see package cniinstall, whose --config takes the
// same keys and is checked by ParseSettings).
var Keys = []string{
	"mode", "allowedHosts", "excludeNamespaces", "clusterDomain",
	"serviceCIDRs", "podCIDRs", "nat64Prefixes", "allowDirect", "resolvers", "upstreamResolver",
	"policyDir", "stateDir", "logDir",
	"otlpEndpoint", "otlpInsecure", "otlpHeaders",
	"dnsFilter", "hostLayer", "allowICMP",
	"inspect", "caDir", "upstreamCAFile", "limits", "proxyLimits", "agent",
}

// CNIKeys are the keys of a plugin's entry that belong to the CNI and the
// runtime rather than to doorman: the spec's (type, name, cniVersion,
// capabilities, dns, prevResult), what runtimes add (runtimeConfig, args,
// the valid attachments of a GC). The CNI's parsers read them.
var CNIKeys = []string{
	"type", "name", "cniVersion", "capabilities", "dns", "runtimeConfig",
	"prevResult", "args", "cni.dev/valid-attachments", "cni.dev/attachments",
}

// Defaults of the keys an entry may leave out (besides stateDir and
// logDir, whose defaults are hostconf's).
const (
	// DefaultClusterDomain is the default of clusterDomain.
	DefaultClusterDomain = "cluster.local"
)

// DefaultExcludeNamespaces is the default of excludeNamespaces: the
// cluster's own namespace, whose CoreDNS and CNI pods must keep working.
func DefaultExcludeNamespaces() []string { return []string{"kube-system"} }

// Settings are doorman's own keys of its conflist entry (Keys), each
// parsed and checked once (ParseEntry, ParseSettings), with the defaults
// of the keys left out; Entry writes them back.
type Settings struct {
	// Spec is the network's spec, which a container attached to it
	// enforces but for what its pod, a policyDir file or the runtime say
	// (see NetConf.spec):
	//   - Policy, from mode (default allowlist), allowedHosts (default
	//     none) and inspect (request rules and rule sets, see
	//     conf.ParseInspectRules);
	//   - Resolvers (resolvers; none means the runtime's or the interface
	//     plugin's, see NetConf.resolvers) and UpstreamResolvers
	//     (upstreamResolver: at most one);
	//   - AllowDirect, NAT64Prefixes, AllowICMP (default false), DNSFilter
	//     and HostLayer (default true);
	//   - LogDir (default hostconf.DefaultLogDir);
	//   - CADir, the root of the networks' CAs (default
	//     hostconf.DefaultCADir): a network's is CADir/<network name>,
	//     made when a policy first inspects a host; UpstreamCAFile;
	//   - OTLP (otlpEndpoint, otlpInsecure, otlpHeaders): with no
	//     Endpoint, the host's (hostconf.OTLPFile) apply;
	//   - Limits, the caps of each container's proxy: each key given wins
	//     over the host's /etc/doorman/limits.json (hostconf.LimitsFile),
	//     each one left out is the host's, else the default;
	//   - ProxyLimits, from proxyLimits ({"memory": "256Mi", "pids": 512,
	//     "cpuWeight": 100}, see spec.ProxyLimitsConfig).
	// ClusterNames come from the keys below.
	spec.Spec
	// ExcludeNamespaces are the Kubernetes namespaces whose pods doorman
	// passes through untouched (default DefaultExcludeNamespaces).
	ExcludeNamespaces []string
	// ClusterDomain (default DefaultClusterDomain) is the cluster's DNS
	// domain: names under it may reach ServiceCIDRs and PodCIDRs.
	ClusterDomain          string
	ServiceCIDRs, PodCIDRs []netip.Prefix
	// PolicyDir holds per-container policy files ("" none); StateDir
	// defaults to hostconf's.
	PolicyDir, StateDir string
	// Agent, if set, says that a doorman node agent computes each pod's
	// policy (from "agent"; see AgentSettings). nil: the pod's policy
	// comes from its annotations and these settings, as without a
	// cluster.
	Agent *AgentSettings
}

// AgentSettings are the "agent" key's: where the node agent is and what a
// pod gets when it does not answer.
type AgentSettings struct {
	// Dir holds the agent's socket and the files it writes
	// (default agentclient.DefaultDir).
	Dir string `json:"dir,omitempty"`
	// Wait bounds how long ADD waits for the agent's answer (default
	// 5s, at most 60s).
	Wait spec.Duration `json:"wait,omitempty"`
	// WithoutAgent is what a pod gets when neither the agent nor a file
	// it wrote has its policy: "refuse" (default: the ADD fails and the
	// kubelet retries) or "default" (the node's policy, mode and
	// allowedHosts, narrowed by the pod's annotations).
	WithoutAgent string `json:"withoutAgent,omitempty"`
	// Annotations is what pods' doorman.io/* annotations do: "narrow"
	// (default: they narrow what the cluster grants) or "replace" (they
	// replace it, as without the agent: for single-tenant clusters). The
	// agent reads it too.
	Annotations string `json:"annotations,omitempty"`
}

// check fills in a's defaults and checks its values.
func (a *AgentSettings) check() error {
	if a.Dir == "" {
		a.Dir = agentclient.DefaultDir
	}
	var errs []error
	if !filepath.IsAbs(a.Dir) || filepath.Clean(a.Dir) != a.Dir {
		errs = append(errs, fmt.Errorf("agent.dir %q: want a clean absolute path on the node", a.Dir))
	}
	switch wait := time.Duration(a.Wait); {
	case wait == 0:
		a.Wait = spec.Duration(5 * time.Second)
	case wait < 0 || wait > time.Minute:
		errs = append(errs, fmt.Errorf("agent.wait %v: want more than 0 and at most 1m", wait))
	}
	switch a.WithoutAgent {
	case "":
		a.WithoutAgent = "refuse"
	case "refuse", "default":
	default:
		errs = append(errs, fmt.Errorf("agent.withoutAgent %q: want refuse or default", a.WithoutAgent))
	}
	switch a.Annotations {
	case "":
		a.Annotations = "narrow"
	case "narrow", "replace":
	default:
		errs = append(errs, fmt.Errorf("agent.annotations %q: want narrow or replace", a.Annotations))
	}
	return errors.Join(errs...)
}

// DefaultSettings are the settings of an entry with none of Keys.
func DefaultSettings() *Settings {
	s := &Settings{
		ExcludeNamespaces: DefaultExcludeNamespaces(),
		ClusterDomain:     DefaultClusterDomain,
		StateDir:          hostconf.DefaultStateDir,
	}
	s.Policy = &conf.Policy{Mode: conf.ModeAllowlist}
	s.LogDir, s.CADir = hostconf.DefaultLogDir, hostconf.DefaultCADir
	s.DNSFilter, s.HostLayer = true, true
	return s
}

// ParseEntry parses doorman's keys in its conflist entry data (a JSON
// object, as the runtime passes it on stdin) and checks every value,
// reporting every problem at once: each error names the key, the value
// and why. A key that is neither one of Keys nor one of CNIKeys is an
// error too, so that a misspelt key is never silently its default. It is
// the one place these keys are judged: the installer checks its --config
// with ParseSettings, and so writes only entries the plugin accepts.
//
// On error the settings returned hold what did parse and the defaults
// of the rest: DEL, which must succeed, tears down with them.
func ParseEntry(data []byte) (*Settings, error) {
	raw, err := decodeObject(data)
	if err != nil {
		return DefaultSettings(), err
	}
	return parseSettings(raw, CNIKeys)
}

// ParseSettings is ParseEntry for doorman's keys alone (the installer's
// --config): the CNI's keys are errors there. On error it returns nil.
func ParseSettings(data []byte) (*Settings, error) {
	raw, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	s, err := parseSettings(raw, nil)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// decodeObject decodes a JSON object into its keys' raw values: the one
// decode of an entry, whose values each key's parser then decodes into
// its field.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if raw == nil {
		return nil, errors.New("not a JSON object: null")
	}
	return raw, nil
}

// parseSettings parses doorman's keys among raw (an entry's), accepting
// the keys in other besides Keys.
func parseSettings(raw map[string]json.RawMessage, other []string) (*Settings, error) {
	s := DefaultSettings()
	var errs []error
	var unknown []string
	for k := range raw {
		if !slices.Contains(Keys, k) && !slices.Contains(other, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		errs = append(errs, fmt.Errorf("unknown key %q: the keys are %s", k, strings.Join(Keys, ", ")))
	}
	v := valueReader{raw: raw, errs: &errs}
	s.parsePolicy(v)
	s.parseCluster(v)
	var nat64 []string
	if v.strings("nat64Prefixes", &nat64) {
		for i, n := range nat64 {
			p, err := spec.ParseNAT64Prefixes(fmt.Sprintf("nat64Prefixes[%d]", i), []string{n})
			if err != nil {
				errs = append(errs, err)
			}
			s.NAT64Prefixes = append(s.NAT64Prefixes, p...)
		}
	}
	s.parseDNS(v)
	var direct []string
	if v.strings("allowDirect", &direct) {
		for i, d := range direct {
			parsed, err := spec.ParseAllowDirect(fmt.Sprintf("allowDirect[%d]", i), []string{d})
			if err != nil {
				errs = append(errs, err)
			}
			s.AllowDirect = append(s.AllowDirect, parsed...)
		}
	}
	for _, d := range s.dirs() {
		key, dst := d.key, d.dst
		var p string
		if !v.str(key, &p) || p == "" {
			continue // "": the default
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			errs = append(errs, fmt.Errorf("%s %q: want a clean absolute path on the node", key, p))
			continue
		}
		*dst = p
	}
	s.parseOTLP(v)
	if raw, has := v.raw["proxyLimits"]; has && string(raw) != "null" {
		var c spec.ProxyLimitsConfig
		err := strictjson.Decode("proxyLimits", raw, &c)
		if err == nil {
			s.ProxyLimits, err = c.Limits("proxyLimits")
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if raw, has := v.raw["limits"]; has && string(raw) != "null" {
		l, err := spec.ParseLimits(raw)
		if err != nil {
			errs = append(errs, err)
		} else {
			s.Limits = l
		}
	}
	if raw, has := v.raw["agent"]; has && string(raw) != "null" {
		var a AgentSettings
		err := strictjson.Decode("agent", raw, &a)
		if err == nil {
			err = a.check()
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			s.Agent = &a
		}
	}
	for _, b := range s.booleans() {
		v.boolean(b.key, b.dst)
	}
	if len(errs) > 0 {
		return s, errors.Join(errs...)
	}
	return s, nil
}

// dirs are the keys of s that are paths on the node, and their fields.
func (s *Settings) dirs() []struct {
	key string
	dst *string
} {
	return []struct {
		key string
		dst *string
	}{{"policyDir", &s.PolicyDir}, {"stateDir", &s.StateDir}, {"logDir", &s.LogDir},
		{"caDir", &s.CADir}, {"upstreamCAFile", &s.UpstreamCAFile}}
}

// booleans are the keys of s that are true or false, and their fields.
func (s *Settings) booleans() []struct {
	key string
	dst *bool
} {
	return []struct {
		key string
		dst *bool
	}{{"dnsFilter", &s.DNSFilter}, {"hostLayer", &s.HostLayer}, {"allowICMP", &s.AllowICMP}}
}

// parsePolicy reads mode, allowedHosts and inspect into s.Policy, each
// entry and rule parsed once.
func (s *Settings) parsePolicy(v valueReader) {
	mode := string(conf.ModeAllowlist)
	var hosts []string
	okMode := !v.has("mode") || v.str("mode", &mode)
	okHosts := !v.has("allowedHosts") || v.strings("allowedHosts", &hosts)
	m, err := conf.ParseMode(mode)
	if okMode && err != nil {
		*v.errs = append(*v.errs, fmt.Errorf("mode: %w", err))
	}
	ok := okMode && okHosts && err == nil
	entries := make([]conf.Entry, 0, len(hosts))
	for i, h := range hosts {
		e, err := conf.ParseEntry(h)
		if err != nil {
			*v.errs = append(*v.errs, fmt.Errorf("allowedHosts[%d]: %w", i, err))
			ok = false
		}
		entries = append(entries, e)
	}
	var inspect conf.InspectRules
	if raw, has := v.raw["inspect"]; has && string(raw) != "null" {
		var err error
		if inspect, err = conf.ParseInspectRules(raw); err != nil {
			// Its errors name the key, "inspect", and the host.
			*v.errs = append(*v.errs, err)
			ok = false
		}
	}
	if ok {
		s.Policy = conf.PolicyOf(m, entries, inspect)
	}
}

// parseCluster reads excludeNamespaces, clusterDomain, serviceCIDRs and
// podCIDRs.
func (s *Settings) parseCluster(v valueReader) {
	if v.strings("excludeNamespaces", &s.ExcludeNamespaces) {
		if s.ExcludeNamespaces == nil {
			s.ExcludeNamespaces = []string{}
		}
		for i, ns := range s.ExcludeNamespaces {
			if err := checkNamespace(ns); err != nil {
				*v.errs = append(*v.errs, fmt.Errorf("excludeNamespaces[%d] %q: %v", i, ns, err))
			}
		}
	}
	var domain string
	if v.str("clusterDomain", &domain) {
		if err := checkDomain(domain); err != nil {
			*v.errs = append(*v.errs, fmt.Errorf("clusterDomain %q: %v", domain, err))
		} else {
			s.ClusterDomain = domain
		}
	}
	for _, r := range []struct {
		key string
		dst *[]netip.Prefix
	}{{"serviceCIDRs", &s.ServiceCIDRs}, {"podCIDRs", &s.PodCIDRs}} {
		key, dst := r.key, r.dst
		var cidrs []string
		if !v.strings(key, &cidrs) {
			continue
		}
		for i, c := range cidrs {
			p, err := checkCIDR(c)
			if err != nil {
				*v.errs = append(*v.errs, fmt.Errorf("%s[%d] %q: %v", key, i, c, err))
				continue
			}
			*dst = append(*dst, p)
		}
	}
}

// parseDNS reads resolvers and upstreamResolver.
func (s *Settings) parseDNS(v valueReader) {
	var resolvers []string
	if v.strings("resolvers", &resolvers) {
		for i, r := range resolvers {
			a, err := spec.ParseAddrs(fmt.Sprintf("resolvers[%d]", i), []string{r})
			if err != nil {
				*v.errs = append(*v.errs, err)
			}
			s.Resolvers = append(s.Resolvers, a...)
		}
	}
	var upstream string
	if v.str("upstreamResolver", &upstream) {
		ups, err := spec.ParseUpstreamResolver("upstreamResolver", upstream)
		if err != nil {
			*v.errs = append(*v.errs, err)
		}
		s.UpstreamResolvers = ups
	}
}

// parseOTLP reads otlpEndpoint, otlpInsecure and otlpHeaders.
func (s *Settings) parseOTLP(v valueReader) {
	c := spec.OTLP{}
	v.str("otlpEndpoint", &c.Endpoint)
	v.boolean("otlpInsecure", &c.Insecure)
	if r, ok := v.raw["otlpHeaders"]; ok {
		if err := strictUnmarshal(r, &c.Headers); err != nil {
			*v.errs = append(*v.errs, fmt.Errorf("otlpHeaders %s: want an object of strings", compact(r)))
		}
	}
	if c.Endpoint == "" {
		if c.Insecure || len(c.Headers) > 0 {
			*v.errs = append(*v.errs, errors.New("otlpInsecure and otlpHeaders need an otlpEndpoint"))
		}
		return
	}
	if err := c.Validate(); err != nil {
		// Its errors name the setting (as otlp.json does) and the value.
		var se *spec.SettingError
		if errors.As(err, &se) {
			e := *se
			e.Key = otlpKeys[e.Key]
			err = &e
		}
		*v.errs = append(*v.errs, err)
		return
	}
	if len(c.Headers) == 0 {
		c.Headers = nil
	}
	s.OTLP = c
}

// otlpKeys are the entry's keys of the OTLP settings, by their keys in
// otlp.json (spec.SettingError).
var otlpKeys = map[string]string{"endpoint": "otlpEndpoint", "insecure": "otlpInsecure", "headers": "otlpHeaders"}

// valueReader decodes the values of an entry's keys into their fields,
// recording a type error for each value of the wrong type.
type valueReader struct {
	raw  map[string]json.RawMessage
	errs *[]error
}

func (v valueReader) has(key string) bool { _, ok := v.raw[key]; return ok }

// str decodes key into dst if it is present; it reports whether it was
// present and decoded.
func (v valueReader) str(key string, dst *string) bool {
	return v.decode(key, dst, "a string")
}

func (v valueReader) strings(key string, dst *[]string) bool {
	return v.decode(key, dst, "an array of strings")
}

func (v valueReader) boolean(key string, dst *bool) bool {
	return v.decode(key, dst, "true or false")
}

func (v valueReader) decode(key string, dst any, want string) bool {
	r, ok := v.raw[key]
	if !ok {
		return false
	}
	if err := strictUnmarshal(r, dst); err != nil {
		*v.errs = append(*v.errs, fmt.Errorf("%s %s: want %s", key, compact(r), want))
		return false
	}
	return true
}

// strictUnmarshal is json.Unmarshal that also refuses null, which
// encoding/json would take as "leave the field alone", and null inside an
// array or object of strings, which it would take as "".
func strictUnmarshal(r json.RawMessage, dst any) error {
	t := bytes.TrimSpace(r)
	if bytes.Equal(t, []byte("null")) {
		return errors.New("null")
	}
	if len(t) > 0 && (t[0] == '[' || t[0] == '{') {
		var elems []json.RawMessage
		if t[0] == '{' {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(t, &m); err == nil {
				for _, e := range m {
					elems = append(elems, e)
				}
			}
		} else {
			json.Unmarshal(t, &elems)
		}
		for _, e := range elems {
			if bytes.Equal(bytes.TrimSpace(e), []byte("null")) {
				return errors.New("null")
			}
		}
	}
	return json.Unmarshal(t, dst)
}

// compact renders a JSON value on one line for an error message, cut
// short when long.
func compact(r json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, r) != nil {
		b.Reset()
		b.Write(r)
	}
	s := b.String()
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// dns1123Label is a Kubernetes namespace name.
var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// checkNamespace says why ns cannot be a Kubernetes namespace name, which
// is a DNS-1123 label.
func checkNamespace(ns string) error {
	if len(ns) > 63 {
		return fmt.Errorf("longer than 63 characters: not a namespace name")
	}
	if !dns1123Label.MatchString(ns) {
		return fmt.Errorf("not a namespace name: want lower-case letters, digits and '-', starting and ending with a letter or digit")
	}
	return nil
}

// checkDomain says why d cannot be a cluster domain.
func checkDomain(d string) error {
	if d == "" {
		return errors.New("empty: want a DNS name such as cluster.local")
	}
	if strings.HasPrefix(d, "*") {
		return errors.New("a wildcard: want the domain itself, such as cluster.local")
	}
	if _, err := netip.ParseAddr(d); err == nil {
		return errors.New("an address: want a DNS name such as cluster.local")
	}
	n, err := conf.NormalizeName(d)
	if err != nil {
		return err
	}
	if n != d {
		return fmt.Errorf("not in canonical form: write %q", n)
	}
	return nil
}

// checkCIDR parses a service or pod CIDR, or says why s cannot be one.
func checkCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("not a CIDR prefix (such as 10.96.0.0/12 or fd00:10:96::/112)")
	}
	if p.Addr().Zone() != "" {
		return p, errors.New("a prefix has no zone")
	}
	if m := p.Masked(); m != p {
		return p, fmt.Errorf("host bits set: did you mean %s?", m)
	}
	return p, nil
}

// Entry is s in doorman's keys of a conflist entry: mode, and each other
// key whose value is not its default (see DefaultSettings): what
// ParseEntry reads back
// into s. `doorman run` writes its network's entry with it (package
// runner), so that its typed spec reaches the plugin through the plugin's
// own keys, parsed once there. It fails for what no key says: more than
// one upstream resolver, an OTLP queue size, cluster names other than the
// cluster keys'.
func (s *Settings) Entry() (map[string]any, error) {
	d := DefaultSettings()
	e := map[string]any{}
	if p := s.Policy; p != nil {
		// The mode is written even when it is the default, so that an
		// entry says what it enforces.
		e["mode"] = p.Mode
		if len(p.Entries) > 0 {
			e["allowedHosts"] = p.Hosts()
		}
		if p.HasInspection() {
			// The request rules and rule sets, placeholders as their
			// SHA-256.
			js, err := p.MarshalInspectRules()
			if err != nil {
				return nil, err
			}
			e["inspect"] = json.RawMessage(js)
		}
	}
	if !slices.Equal(s.ExcludeNamespaces, d.ExcludeNamespaces) {
		e["excludeNamespaces"] = append([]string{}, s.ExcludeNamespaces...)
	}
	if s.ClusterDomain != d.ClusterDomain {
		e["clusterDomain"] = s.ClusterDomain
	}
	for key, list := range map[string][]netip.Prefix{"serviceCIDRs": s.ServiceCIDRs, "podCIDRs": s.PodCIDRs, "nat64Prefixes": s.NAT64Prefixes} {
		if len(list) > 0 {
			e[key] = list
		}
	}
	if len(s.AllowDirect) > 0 {
		e["allowDirect"] = s.AllowDirect
	}
	if len(s.Resolvers) > 0 {
		e["resolvers"] = s.Resolvers
	}
	switch len(s.UpstreamResolvers) {
	case 0:
	case 1:
		e["upstreamResolver"] = s.UpstreamResolvers[0].String()
	default:
		return nil, fmt.Errorf("upstreamResolver: %d upstream resolvers, where the entry takes one", len(s.UpstreamResolvers))
	}
	defaultDirs := d.dirs()
	for i, dir := range s.dirs() {
		if *dir.dst != *defaultDirs[i].dst {
			e[dir.key] = *dir.dst
		}
	}
	if s.OTLP.QueueSize != 0 {
		return nil, fmt.Errorf("otlp queueSize %d: the entry has no key for it", s.OTLP.QueueSize)
	}
	if len(s.ClusterNames) > 0 {
		return nil, errors.New("clusterNames: the entry says them with clusterDomain, serviceCIDRs and podCIDRs")
	}
	if s.OTLP.Endpoint != "" {
		e["otlpEndpoint"] = s.OTLP.Endpoint
		if s.OTLP.Insecure {
			e["otlpInsecure"] = true
		}
		if len(s.OTLP.Headers) > 0 {
			e["otlpHeaders"] = s.OTLP.Headers
		}
	}
	defaultBools := d.booleans()
	for i, b := range s.booleans() {
		if *b.dst != *defaultBools[i].dst {
			e[b.key] = *b.dst
		}
	}
	if s.Limits != (spec.Limits{}) {
		e["limits"] = s.Limits
	}
	if l := spec.ProxyLimitsConfigOf(s.ProxyLimits); l != nil {
		e["proxyLimits"] = l
	}
	if s.Agent != nil {
		a := *s.Agent
		e["agent"] = &a
	}
	return e, nil
}
