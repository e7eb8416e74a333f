// Package proxyconf is the config file of one `doorman proxy` process:
// what it serves and how, typed once, in the one place the sandbox package
// that writes it and the proxy that reads it share.
//
// A file rather than flags: the settings are typed on both sides without
// a flag syntax between them, the file says which inherited descriptor is
// which listener, and the OTLP headers, which often hold a token, stay off
// the command line that every user of the host can read in /proc. It is a
// package of its own, apart from the process that runs it (package
// daemon), so that the sandbox package, which writes it, does not depend
// on the proxy's wiring.
package proxyconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/internal/strictjson"
	"github.com/doorman-net/doorman/proxy/guard"
	"github.com/doorman-net/doorman/proxy/otlplog"
)

// Defaults for the zero values of Config's timeouts.
const (
	DefaultSniffTimeout = 10 * time.Second
	DefaultDrainTimeout = 10 * time.Second
)

// Config is what one proxy process serves, as its config file holds it
// (JSON, the keys below). The sandbox package writes it (WriteFile), and
// `doorman proxy --config` reads it (Load) and runs it (see package
// daemon).
type Config struct {
	// Sandbox is the sandbox id, for the decision log and the 403 page.
	Sandbox string `json:"sandbox"`
	// PodUID is the uid of the Kubernetes pod the sandbox is, if any:
	// every line of the log carries it (decisionlog.WithPod).
	PodUID string `json:"podUID,omitempty"`
	// PolicyFile is the policy in the plain form (see conf.ParseFile),
	// watched for changes.
	PolicyFile string `json:"policyFile"`
	// LogFile receives the decision lines (appended); "" or "-" is
	// standard error.
	LogFile string `json:"logFile,omitempty"`
	// Resolvers are the DNS servers names admitted by name entries are
	// resolved with, tried in order; none means this host's
	// /etc/resolv.conf (and a warning line).
	Resolvers []netip.AddrPort `json:"resolvers,omitempty"`
	// DNSUpstreams are the servers the DNS filter forwards admitted
	// queries to.
	DNSUpstreams []netip.AddrPort `json:"dnsUpstreams,omitempty"`
	// AllowDirect are the destinations the sandbox reaches without the
	// proxy: their new flows are logged from conntrack in NetNS.
	AllowDirect []conf.Direct `json:"allowDirect,omitempty"`
	// ClusterNames open private ranges to the names under a domain: a
	// Kubernetes cluster's service and pod CIDRs to the names under its
	// cluster domain (see guard.Scope), for the proxy and the DNS filter.
	ClusterNames []NameScope `json:"clusterNames,omitempty"`
	// NAT64Prefixes are the prefixes of NAT64 translators the host
	// reaches besides 64:ff9b::/96 and 64:ff9b:1::/48 (see
	// guard.Config.NAT64Prefixes), for the proxy and the DNS filter.
	NAT64Prefixes []netip.Prefix `json:"nat64Prefixes,omitempty"`
	// NetNS is the network namespace whose allowDirect flows are logged;
	// "" means the one the first listener was created in (the sandbox's,
	// for an inherited listener).
	NetNS string `json:"netns,omitempty"`
	// OTLP, if set, also exports the decision and DNS records.
	OTLP *OTLP `json:"otlp,omitempty"`
	// SniffTimeout bounds the wait for the first bytes that carry a
	// name; DrainTimeout how long open connections may finish after
	// SIGTERM. Zero means the defaults above.
	SniffTimeout Duration `json:"sniffTimeout,omitempty"`
	DrainTimeout Duration `json:"drainTimeout,omitempty"`
	// CADir is the network's CA directory (package ca), whose leaves
	// the proxy presents for inspected hosts; "" means none.
	CADir string `json:"caDir,omitempty"`
	// UpstreamCAFile, if set, holds the PEM roots inspected hosts'
	// certificates are verified against instead of the system's (which
	// SSL_CERT_FILE in the proxy's environment can also name).
	UpstreamCAFile string `json:"upstreamCAFile,omitempty"`
	// Limits are the sandbox's caps (see Limits); sniffTimeout above, if
	// set, wins over limits.sniffTimeout.
	Limits Limits `json:"limits,omitzero"`
	// Listeners are the sockets to serve.
	Listeners Listeners `json:"listeners"`
}

// NameScope is one of Config.ClusterNames: the names under Domain (a DNS
// name in canonical form, such as "cluster.local") may reach the private
// addresses inside Prefixes.
type NameScope struct {
	Domain   string         `json:"domain"`
	Prefixes []netip.Prefix `json:"prefixes"`
}

// Listeners say which sockets a proxy serves: descriptors it inherited
// (their numbers), or addresses it binds itself.
type Listeners struct {
	// TCP are listening TCP sockets for redirected connections.
	TCP []int `json:"tcp,omitempty"`
	// DNSUDP and DNSTCP are the DNS filter's UDP sockets and listening
	// TCP sockets.
	DNSUDP []int `json:"dnsUDP,omitempty"`
	DNSTCP []int `json:"dnsTCP,omitempty"`
	// Addrs are TCP addresses to bind and serve (a proxy run by hand).
	Addrs []string `json:"addrs,omitempty"`
}

// OTLP is the OTLP export part of a Config, with the keys of
// /etc/doorman/otlp.json (see otlplog.LoadFile).
type OTLP struct {
	Endpoint  string            `json:"endpoint"`
	Insecure  bool              `json:"insecure,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	QueueSize int               `json:"queueSize,omitempty"`
}

// OTLPOf returns the file form of c, or nil if c exports nothing.
func OTLPOf(c otlplog.Config) *OTLP {
	if c.Endpoint == "" {
		return nil
	}
	return &OTLP{Endpoint: c.Endpoint, Insecure: c.Insecure, Headers: c.Headers, QueueSize: c.QueueSize}
}

// Config returns o as export settings; nil exports nothing.
func (o *OTLP) Config() otlplog.Config {
	if o == nil {
		return otlplog.Config{}
	}
	return otlplog.Config{Endpoint: o.Endpoint, Insecure: o.Insecure, Headers: o.Headers, QueueSize: o.QueueSize}
}

// Duration is a time.Duration written as in Go ("500ms", "10s").
type Duration time.Duration

// MarshalText renders d as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses text with time.ParseDuration; negative durations
// are refused. The error says why, not what: the caller names the key
// and the value.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return errors.New(`want a duration such as "10s", "1m30s" or "0s"`)
	}
	if v < 0 {
		return errors.New("a negative duration")
	}
	*d = Duration(v)
	return nil
}

// Or returns d, or def if d is zero.
func (d Duration) Or(def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}

// Validate reports the first setting of c that a proxy would refuse,
// naming its key.
func (c Config) Validate() error {
	switch {
	case c.Sandbox == "":
		return errors.New("no sandbox")
	case c.PolicyFile == "":
		return errors.New("no policyFile")
	case len(c.Listeners.TCP) == 0 && len(c.Listeners.Addrs) == 0:
		return errors.New("no listener: give listeners.tcp or listeners.addrs")
	}
	for _, l := range []struct {
		key string
		fds []int
	}{{"tcp", c.Listeners.TCP}, {"dnsUDP", c.Listeners.DNSUDP}, {"dnsTCP", c.Listeners.DNSTCP}} {
		for i, fd := range l.fds {
			if fd < 3 {
				return fmt.Errorf("listeners.%s[%d] %d: not an inherited descriptor (3 or above)", l.key, i, fd)
			}
		}
	}
	if err := c.OTLP.Config().Validate(); err != nil {
		var se *otlplog.SettingError
		if errors.As(err, &se) {
			return fmt.Errorf("otlp.%w", err)
		}
		return fmt.Errorf("otlp: %w", err)
	}
	for i, n := range c.ClusterNames {
		if d, err := conf.NormalizeName(n.Domain); err != nil || d != n.Domain || d == "" {
			return fmt.Errorf("clusterNames[%d].domain %q: want a DNS name in canonical form, such as cluster.local", i, n.Domain)
		}
		for j, p := range n.Prefixes {
			if !p.IsValid() || p.Masked() != p {
				return fmt.Errorf("clusterNames[%d].prefixes[%d] %q: want a CIDR prefix without host bits", i, j, p)
			}
		}
	}
	for i, p := range c.NAT64Prefixes {
		if err := guard.ValidateNAT64Prefix(p); err != nil {
			return fmt.Errorf("nat64Prefixes[%d] %q: %w", i, p.String(), err)
		}
	}
	return c.Limits.Validate()
}

// Load reads the config file at path. Unknown keys are errors: a
// misspelt setting must not pass silently.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("proxy config: %w", err)
	}
	c, err := decode(data)
	if err != nil {
		return Config{}, fmt.Errorf("proxy config %s: %w", path, err)
	}
	return c, nil
}

// decode parses and validates one config file's content.
func decode(data []byte) (Config, error) {
	var c Config
	if err := strictjson.Decode("", data, &c); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// WriteFile writes c to path, readable by its owner only (the OTLP
// headers often hold a token), replacing it atomically. It does not fsync:
// the file describes a process that does not outlive a reboot.
func (c Config) WriteFile(path string) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("proxy config %s: %w", path, err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("proxy config: %w", err)
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("proxy config %s: %w", path, err)
	}
	return nil
}
