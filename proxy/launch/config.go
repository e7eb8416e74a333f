package launch

// The proxy's config file: what the worker serves and how, typed on
// both sides without a flag syntax between them. The file says which
// inherited descriptor is which listener, and the OTLP headers, which
// often hold a token, stay off the command line that every user of the
// host can read in /proc.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce/hostlayer"
	"github.com/doorman-net/doorman/internal/atomicfile"
	"github.com/doorman-net/doorman/internal/strictjson"
	"github.com/doorman-net/doorman/spec"
)

// DefaultDrainTimeout is how long open connections may finish after
// SIGTERM when Config.DrainTimeout is zero.
const DefaultDrainTimeout = 10 * time.Second

// Config is what one proxy process serves, as its config file holds it
// (JSON, the keys below). The sandbox package writes it (WriteFile); the
// supervisor checks it and the worker reads it (Load: see Supervised and
// InheritWorker) and runs it (see package daemon).
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
	// NetNS is the network namespace whose allowDirect flows are logged;
	// "" means the one the first listener was created in (the sandbox's,
	// for an inherited listener).
	NetNS string `json:"netns,omitempty"`
	// HostLayerKey is the sandbox's key in the host-side layer (package
	// enforce/hostlayer) of the proxy's own namespace: what that layer
	// drops for it is logged from the layer's counters. "" means the
	// sandbox has no such layer.
	HostLayerKey string `json:"hostLayerKey,omitempty"`
	// HostDropsState is the file where the proxy keeps what it has
	// logged of the layer's drops (see package proxy/droplog), so that a
	// new worker carries on where the last one stopped; "" keeps it in
	// memory, and a new worker logs the counters' totals again.
	HostDropsState string `json:"hostDropsState,omitempty"`
	// SniffTimeout bounds the wait for the first bytes that carry a
	// name (zero: limits.sniffTimeout, else spec.DefaultSniffTimeout);
	// set, it wins over limits.sniffTimeout. DrainTimeout is how long
	// open connections may finish after SIGTERM (zero:
	// DefaultDrainTimeout).
	SniffTimeout spec.Duration `json:"sniffTimeout,omitempty"`
	DrainTimeout spec.Duration `json:"drainTimeout,omitempty"`
	// Listeners are the sockets to serve: descriptors inherited at 3, 4,
	// ... (see Start), or addresses a proxy run by hand binds.
	Listeners Listeners `json:"listeners"`
	// Proxy is what the sandbox's spec says its proxy enforces besides
	// the policy: allowDirect (whose new flows are logged from conntrack
	// in NetNS), clusterNames, nat64Prefixes, otlp, caDir,
	// upstreamCAFile and limits (see spec.Proxy).
	spec.Proxy
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
	if c.HostLayerKey != "" {
		if err := hostlayer.CheckKey(c.HostLayerKey); err != nil {
			return fmt.Errorf("hostLayerKey: %w", err)
		}
	}
	if c.HostDropsState != "" {
		switch {
		case c.HostLayerKey == "":
			return fmt.Errorf("hostDropsState %q: set without hostLayerKey, there are no host-layer drops to keep", c.HostDropsState)
		case !filepath.IsAbs(c.HostDropsState):
			return fmt.Errorf("hostDropsState %q: want an absolute path", c.HostDropsState)
		}
	}
	return c.Proxy.Validate()
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

// loadFor loads the config file at path for the --sandbox flag's value,
// which only names the sandbox in ps and must match the config's ("" when
// not given).
func loadFor(path, sandbox string) (Config, error) {
	cfg, err := Load(path)
	if err != nil {
		return Config{}, err
	}
	if sandbox != "" && sandbox != cfg.Sandbox {
		return Config{}, fmt.Errorf("--sandbox %q: %s is the config of sandbox %q", sandbox, path, cfg.Sandbox)
	}
	return cfg, nil
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
	if err := atomicfile.Write(path, bytes.NewReader(append(data, '\n')), atomicfile.Options{Perm: 0o600, TempInfix: "."}); err != nil {
		return fmt.Errorf("proxy config %s: %w", path, err)
	}
	return nil
}

// DirectLoggedFile names the file, beside a worker's config file, where
// the worker says which allowDirect list it logs flows of: written once
// its conntrack watch follows that list (at the start, and after each
// change of the config file's allowDirect), so that a sandbox widening
// allowDirect can wait for it before its rules admit the new flows.
func DirectLoggedFile(configFile string) string {
	return filepath.Join(filepath.Dir(configFile), "direct-logged.json")
}

// WriteDirectLogged writes list to DirectLoggedFile(configFile).
func WriteDirectLogged(configFile string, list []conf.Direct) error {
	if list == nil {
		list = []conf.Direct{}
	}
	data, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return atomicfile.Write(DirectLoggedFile(configFile), bytes.NewReader(data), atomicfile.Options{Perm: 0o600, TempInfix: "."})
}

// ReadDirectLogged reads what WriteDirectLogged wrote beside configFile.
func ReadDirectLogged(configFile string) ([]conf.Direct, error) {
	data, err := os.ReadFile(DirectLoggedFile(configFile))
	if err != nil {
		return nil, err
	}
	var list []conf.Direct
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", DirectLoggedFile(configFile), err)
	}
	return list, nil
}
