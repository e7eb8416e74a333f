package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/otlplog"
)

// Config is the node's defaults that the installer writes into doorman's
// entry: the policy of pods without doorman annotations, which namespaces
// doorman leaves alone, what the cluster's names may reach, and where the
// plugin keeps its state and logs. It is read from the installer's --config
// file with ValidateConfig; the zero value is not valid, DefaultConfig is.
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
	// AllowDirect are IP or CIDR entries (optionally with a port) every
	// pod reaches without the proxy.
	AllowDirect []string `json:"allowDirect,omitempty"`
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
}

// Defaults of the keys a --config file may leave out.
const (
	DefaultMode          = "allowlist"
	DefaultClusterDomain = "cluster.local"
)

// DefaultExcludeNamespaces is the default of Config.ExcludeNamespaces.
func DefaultExcludeNamespaces() []string { return []string{"kube-system"} }

// DefaultConfig is the configuration of an installer run without --config.
func DefaultConfig() *Config {
	return &Config{
		Mode:              DefaultMode,
		AllowedHosts:      []string{},
		ExcludeNamespaces: DefaultExcludeNamespaces(),
		ClusterDomain:     DefaultClusterDomain,
	}
}

// configKeys are the keys of a --config file, in the order the entry
// carries them.
var configKeys = []string{
	"mode", "allowedHosts", "excludeNamespaces", "clusterDomain",
	"serviceCIDRs", "podCIDRs", "allowDirect", "stateDir", "logDir",
	"otlpEndpoint", "otlpInsecure", "otlpHeaders",
	"dnsFilter", "hostLayer", "allowICMP",
}

// ValidateConfig parses an installer configuration (a JSON object with the
// keys of Config) and checks every value, filling in the defaults of the
// keys it leaves out. It reports every problem at once, each naming the key
// and the value and saying why; an unknown key is one of them, so that a
// misspelt key is never silently a default. On any error it returns nil.
//
// It is the one place where these settings are judged: the CNI plugin
// reads the same keys in its entry (with the CNI's own keys besides, see
// ValidateEntry), so a --config the installer accepts is one the plugin
// accepts.
func ValidateConfig(data []byte) (*Config, error) {
	return validate(data, nil)
}

// cniKeys are the keys of a conflist entry that belong to the CNI and the
// runtime rather than to doorman's configuration.
var cniKeys = map[string]bool{
	"type": true, "name": true, "cniVersion": true, "capabilities": true,
	"runtimeConfig": true, "prevResult": true, "args": true,
}

// ValidateEntry is ValidateConfig for doorman's entry in a conflist, as the
// plugin receives it: the same keys and checks, and the CNI's own keys
// (type, name, cniVersion, capabilities, runtimeConfig, prevResult, args)
// besides, which it leaves to the CNI's parsers.
func ValidateEntry(data []byte) (*Config, error) {
	return validate(data, cniKeys)
}

// validate is ValidateConfig, also accepting (and ignoring) the keys in
// extra.
func validate(data []byte, extra map[string]bool) (*Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if raw == nil {
		return nil, errors.New("not a JSON object: null")
	}
	c := DefaultConfig()
	var errs []error
	var unknown []string
	for k := range raw {
		if !isConfigKey(k) && !extra[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		errs = append(errs, fmt.Errorf("unknown key %q: the keys are %s", k, strings.Join(configKeys, ", ")))
	}
	v := valueReader{raw: raw, errs: &errs}
	v.str("mode", &c.Mode)
	if _, err := conf.ParseMode(c.Mode); err != nil {
		errs = append(errs, fmt.Errorf("mode: %v", err))
	}
	if v.strings("allowedHosts", &c.AllowedHosts) {
		for i, h := range c.AllowedHosts {
			if _, err := conf.ParseEntry(h); err != nil {
				errs = append(errs, fmt.Errorf("allowedHosts[%d]: %v", i, err))
			}
		}
	}
	if v.strings("excludeNamespaces", &c.ExcludeNamespaces) {
		for i, ns := range c.ExcludeNamespaces {
			if err := checkNamespace(ns); err != nil {
				errs = append(errs, fmt.Errorf("excludeNamespaces[%d] %q: %v", i, ns, err))
			}
		}
	}
	if v.str("clusterDomain", &c.ClusterDomain) {
		if err := checkDomain(c.ClusterDomain); err != nil {
			errs = append(errs, fmt.Errorf("clusterDomain %q: %v", c.ClusterDomain, err))
		}
	}
	for _, key := range []string{"serviceCIDRs", "podCIDRs"} {
		dst := &c.ServiceCIDRs
		if key == "podCIDRs" {
			dst = &c.PodCIDRs
		}
		if v.strings(key, dst) {
			for i, s := range *dst {
				if err := checkCIDR(s); err != nil {
					errs = append(errs, fmt.Errorf("%s[%d] %q: %v", key, i, s, err))
				}
			}
		}
	}
	if v.strings("allowDirect", &c.AllowDirect) {
		for i, s := range c.AllowDirect {
			e, err := conf.ParseEntry(s)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("allowDirect[%d]: %v", i, err))
			case e.Kind != conf.KindPrefix:
				errs = append(errs, fmt.Errorf("allowDirect[%d] %q: only an IP or CIDR (with an optional port) can bypass the proxy", i, s))
			}
		}
	}
	for _, key := range []string{"stateDir", "logDir"} {
		dst := &c.StateDir
		if key == "logDir" {
			dst = &c.LogDir
		}
		if v.str(key, dst) && (!filepath.IsAbs(*dst) || filepath.Clean(*dst) != *dst) {
			errs = append(errs, fmt.Errorf("%s %q: want a clean absolute path on the node", key, *dst))
		}
	}
	v.str("otlpEndpoint", &c.OTLPEndpoint)
	v.boolean("otlpInsecure", &c.OTLPInsecure)
	if r, ok := raw["otlpHeaders"]; ok {
		if err := strictUnmarshal(r, &c.OTLPHeaders); err != nil {
			errs = append(errs, fmt.Errorf("otlpHeaders %s: want an object of strings", compact(r)))
		}
	}
	if c.OTLPEndpoint == "" && (c.OTLPInsecure || len(c.OTLPHeaders) > 0) {
		errs = append(errs, errors.New("otlpInsecure and otlpHeaders need an otlpEndpoint"))
	}
	if err := (otlplog.Config{Endpoint: c.OTLPEndpoint, Insecure: c.OTLPInsecure, Headers: c.OTLPHeaders}).Validate(); err != nil {
		// Its errors name the setting and the value.
		errs = append(errs, err)
	}
	for _, key := range []string{"dnsFilter", "hostLayer"} {
		if _, ok := raw[key]; !ok {
			continue
		}
		b := new(bool)
		if v.boolean(key, b) {
			if key == "dnsFilter" {
				c.DNSFilter = b
			} else {
				c.HostLayer = b
			}
		}
	}
	v.boolean("allowICMP", &c.AllowICMP)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Empty optional lists are left out of the entry: they are nil, as
	// if absent.
	for _, l := range []*[]string{&c.ServiceCIDRs, &c.PodCIDRs, &c.AllowDirect} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	if len(c.OTLPHeaders) == 0 {
		c.OTLPHeaders = nil
	}
	return c, nil
}

func isConfigKey(k string) bool {
	for _, c := range configKeys {
		if c == k {
			return true
		}
	}
	return false
}

// valueReader decodes the values of a config's keys into their fields,
// recording a type error for each value of the wrong type.
type valueReader struct {
	raw  map[string]json.RawMessage
	errs *[]error
}

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
// array of strings, which it would take as "".
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

// checkCIDR says why s cannot be a service or pod CIDR.
func checkCIDR(s string) error {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return fmt.Errorf("not a CIDR prefix (such as 10.96.0.0/12 or fd00:10:96::/112)")
	}
	if p.Addr().Zone() != "" {
		return errors.New("a prefix has no zone")
	}
	if m := p.Masked(); m != p {
		return fmt.Errorf("host bits set: did you mean %s?", m)
	}
	return nil
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
