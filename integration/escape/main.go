// Command escape is the probe of doorman's escape suite
// (integration/escape_test.go). It runs inside a sandbox as root and tries,
// one way after another, to get a byte to a listener on the test's fake
// internet that the sandbox's policy does not allow. Each attempt prints one
// JSON line:
//
//	{"attempt":"tcp","sent_bytes":31,"error":"...","detail":"..."}
//
// sent_bytes is what the probe believes it handed to the kernel; it proves
// nothing. The test decides whether an attempt escaped by what arrived at the
// fake internet's servers, which count bytes, connections, datagrams, DNS
// queries and HTTP requests.
//
// The probe aims only at the addresses and ports given on its command line
// (the fake internet's allowed and denied hosts, its DNS servers, the tunnel
// zone, the proxy's listener ports, the test's LAN and neighbour sandbox,
// the names that rebind to them) and at its own link, so that whatever
// escapes stays on the machine. It is built with CGO_ENABLED=0 so that it runs in an otherwise
// empty rootfs.
//
// Usage:
//
//	escape [flags] ATTEMPT|all|control|caps|flush|sleep D
//
// Attempts (see attempts.go for what each one sends):
//
//	tcp, sni-spoof, h2c, keepalive-host, absolute-uri, connect, udp, quic,
//	dns-rogue, dns-tunnel, raw-ip, af-packet, so-mark, ipv6, ipv4-mapped,
//	proxy-port, icmp, icmp-lan, router-advert, rebind, arp-spoof, ip-spoof,
//	arp-trailer, mld-aux, nd-options, l2-flood, http-desync, h2c-upgrade,
//	rebind-nat64, open-nat64, silent
//
// Other commands:
//
//	all      every attempt, silent running alongside the others
//	control  an HTTP request the policy allows (proves the path works)
//	caps     the probe's effective capabilities
//	flush    delete every nftables table in the probe's network namespace
//	         (needs CAP_NET_ADMIN): the workload removing its own ruleset
//	sleep D  sleep (keeps a container running for exec)
//
// With -caps docker[,NAME...] the probe first reduces its capabilities to
// Docker's default set (plus the names given) and re-executes itself, so
// that a test running it as root in a bare network namespace sees what a
// Docker container would.
//
// The exit status is 0 whenever the command ran, whatever the attempts
// achieved; 2 for bad usage; 1 if the probe itself could not work.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// config is what the command line says about the fake internet.
type config struct {
	allowedName string     // a name the policy allows (api.example.test)
	allowed4    netip.Addr // its IPv4 address
	deniedName  string     // a name the policy does not allow (evil.example.test)
	denied4     netip.Addr // its addresses
	denied6     netip.Addr

	httpPort, httpsPort uint16 // the hosts' HTTP and HTTPS ports
	tcpPort             uint16 // a recorder port of the denied host (tcp, ipv6, ipv4-mapped)
	markPort            uint16 // another recorder port (so-mark)
	silentPort          uint16 // another recorder port (silent)
	udpPort             uint16 // a UDP echo port of the denied host
	quicPort            uint16 // UDP echo on the hosts' QUIC port

	resolver   netip.Addr   // the sandbox's resolver
	rogueDNS   []netip.Addr // DNS servers that are not the resolver
	tunnelZone string       // a zone whose authoritative server counts queries

	proxyPort4, proxyPort6 uint16   // the proxy's listener ports inside the sandbox (0: none)
	marks                  []uint32 // SO_MARK values to try

	neighbour4, neighbour6 netip.Addr       // a neighbour sandbox on the same bridge (icmp-lan, arp-spoof, ip-spoof)
	neighbourMAC           net.HardwareAddr // its MAC (the layer-2 attempts send to it too)
	lan                    []netip.Addr     // private addresses of the host's LAN (icmp-lan)
	rebind                 []string         // allowed names whose DNS answers private addresses (rebind)
	rebindNAT64            []string         // allowed names whose DNS answers NAT64 forms of a LAN address (rebind-nat64)
	nat64                  []netip.Addr     // NAT64 forms of a LAN address (open-nat64)
	redisPort              uint16           // a recorder port behind the rebound names (rebind)
	spoofPort              uint16           // the port ip-spoof listens on as the neighbour
	raPrefix               netip.Prefix     // the prefix router-advert advertises
	spoofTime              time.Duration    // how long arp-spoof, ip-spoof and router-advert keep at it

	silentConns int           // how many silent connections to hold
	hold        time.Duration // how long to hold them (longer than the proxy's sniff timeout)
	timeout     time.Duration // per connect, read or query
}

// row is one attempt's report.
type row struct {
	Attempt   string `json:"attempt"`
	SentBytes int    `json:"sent_bytes"`
	Error     string `json:"error,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, caps, rest, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "escape:", err)
		return 2
	}
	if caps != "" {
		if err := restrictCaps(caps); err != nil {
			fmt.Fprintln(os.Stderr, "escape: -caps:", err)
			return 1
		}
	}
	if len(rest) == 0 {
		fmt.Fprintln(os.Stderr, "escape: no command; see the package comment")
		return 2
	}
	out := json.NewEncoder(os.Stdout)
	switch rest[0] {
	case "sleep", "caps", "flush":
	default:
		if err := cfg.checkTargets(); err != nil {
			fmt.Fprintln(os.Stderr, "escape:", err)
			return 2
		}
	}
	switch cmd := rest[0]; cmd {
	case "sleep":
		if len(rest) != 2 {
			fmt.Fprintln(os.Stderr, "escape: sleep DURATION")
			return 2
		}
		d, err := time.ParseDuration(rest[1])
		if err != nil {
			fmt.Fprintf(os.Stderr, "escape: sleep %q: %v\n", rest[1], err)
			return 2
		}
		time.Sleep(d)
	case "caps":
		out.Encode(capsRow())
	case "flush":
		out.Encode(flushRow())
	case "control":
		out.Encode(control(cfg))
	case "all":
		done := make(chan row, 1)
		go func() { done <- attempts["silent"](cfg) }()
		for _, name := range attemptOrder {
			if name != "silent" {
				out.Encode(attempts[name](cfg))
			}
		}
		out.Encode(<-done)
	default:
		fn, ok := attempts[cmd]
		if !ok || len(rest) != 1 {
			fmt.Fprintf(os.Stderr, "escape: unknown command %q (attempts: %s)\n", strings.Join(rest, " "), strings.Join(attemptOrder, ", "))
			return 2
		}
		out.Encode(fn(cfg))
	}
	return 0
}

// parseFlags reads the flags, which come before the command.
func parseFlags(args []string) (*config, string, []string, error) {
	fs := flag.NewFlagSet("escape", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	cfg := &config{}
	var (
		allowed4, denied4, denied6, resolver string
		rogue, marks, proxyPorts, caps       string
		ports                                = map[string]*uint16{}
	)
	fs.StringVar(&cfg.allowedName, "allowed-name", "api.example.test", "a name the policy allows")
	fs.StringVar(&allowed4, "allowed4", "", "the allowed name's IPv4 address (required by attempts)")
	fs.StringVar(&cfg.deniedName, "denied-name", "evil.example.test", "a name the policy does not allow")
	fs.StringVar(&denied4, "denied4", "", "the denied name's IPv4 address (required by attempts)")
	fs.StringVar(&denied6, "denied6", "", "the denied name's IPv6 address")
	for _, p := range []struct {
		name string
		dst  *uint16
		def  uint16
		doc  string
	}{
		{"http-port", &cfg.httpPort, 80, "HTTP port of the hosts"},
		{"https-port", &cfg.httpsPort, 443, "HTTPS port of the hosts"},
		{"tcp-port", &cfg.tcpPort, 9000, "recorder port of the denied host"},
		{"mark-port", &cfg.markPort, 5432, "recorder port for the so-mark attempt"},
		{"silent-port", &cfg.silentPort, 22, "recorder port for the silent attempt"},
		{"udp-port", &cfg.udpPort, 9999, "UDP echo port of the denied host"},
		{"quic-port", &cfg.quicPort, 443, "UDP (QUIC) port of the hosts"},
		{"redis-port", &cfg.redisPort, 6379, "recorder port behind the rebound names"},
		{"spoof-port", &cfg.spoofPort, 7070, "port the ip-spoof attempt listens on as the neighbour"},
	} {
		fs.Func(p.name, fmt.Sprintf("%s (default %d)", p.doc, p.def), portFlag(p.name, p.dst))
		*p.dst = p.def
		ports[p.name] = p.dst
	}
	fs.StringVar(&resolver, "resolver", "", "the sandbox's resolver (required by attempts)")
	fs.StringVar(&rogue, "rogue-dns", "", "comma-separated DNS servers that are not the resolver")
	fs.StringVar(&cfg.tunnelZone, "tunnel-zone", "tunnel.test", "zone for the dns-tunnel attempt")
	fs.StringVar(&proxyPorts, "proxy-ports", "", "PORT4,PORT6: the proxy's listener ports (0 for none)")
	fs.StringVar(&marks, "marks", "0x1", "comma-separated SO_MARK values (hex or decimal)")
	fs.IntVar(&cfg.silentConns, "silent-conns", 200, "connections the silent attempt holds")
	fs.DurationVar(&cfg.hold, "hold", 11*time.Second, "how long the silent attempt holds its connections")
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "deadline of each connect, read and query")
	fs.StringVar(&caps, "caps", "", "docker[,CAP...]: reduce capabilities to Docker's defaults (plus CAPs) first")
	var neighbour4, neighbour6, lan, rebind, rebindNAT64, nat64, raPrefix string
	fs.StringVar(&neighbour4, "neighbour4", "", "IPv4 address of a neighbour sandbox on the same bridge")
	fs.StringVar(&neighbour6, "neighbour6", "", "its IPv6 address")
	fs.Func("neighbour-mac", "its MAC address", func(v string) error {
		mac, err := net.ParseMAC(v)
		if err != nil || len(mac) != 6 {
			return fmt.Errorf("%q: not an Ethernet address", v)
		}
		cfg.neighbourMAC = mac
		return nil
	})
	fs.StringVar(&lan, "lan", "", "comma-separated private addresses on the host's LAN")
	fs.StringVar(&rebind, "rebind", "", "comma-separated allowed names whose DNS answers private addresses")
	fs.StringVar(&rebindNAT64, "rebind-nat64", "", "comma-separated allowed names whose DNS answers a LAN address in an IPv6 NAT64 prefix")
	fs.StringVar(&nat64, "nat64", "", "comma-separated NAT64 forms of a LAN address (open-nat64)")
	fs.StringVar(&raPrefix, "ra-prefix", "2001:db8:bad::/64", "the prefix the router-advert attempt advertises")
	fs.DurationVar(&cfg.spoofTime, "spoof-time", 3*time.Second, "how long arp-spoof, ip-spoof and router-advert keep at it")
	if err := fs.Parse(args); err != nil {
		return nil, "", nil, err
	}
	var err error
	parseAddr := func(flagName, s string, required bool) netip.Addr {
		if s == "" {
			if required && err == nil {
				err = fmt.Errorf("-%s is required", flagName)
			}
			return netip.Addr{}
		}
		a, perr := netip.ParseAddr(s)
		if perr != nil && err == nil {
			err = fmt.Errorf("-%s %q: not an IP address", flagName, s)
		}
		return a
	}
	cfg.allowed4 = parseAddr("allowed4", allowed4, false)
	cfg.denied4 = parseAddr("denied4", denied4, false)
	cfg.denied6 = parseAddr("denied6", denied6, false)
	cfg.resolver = parseAddr("resolver", resolver, false)
	for _, s := range splitList(rogue) {
		cfg.rogueDNS = append(cfg.rogueDNS, parseAddr("rogue-dns", s, true))
	}
	cfg.neighbour4 = parseAddr("neighbour4", neighbour4, false)
	cfg.neighbour6 = parseAddr("neighbour6", neighbour6, false)
	for _, s := range splitList(lan) {
		cfg.lan = append(cfg.lan, parseAddr("lan", s, true))
	}
	cfg.rebind = splitList(rebind)
	cfg.rebindNAT64 = splitList(rebindNAT64)
	for _, s := range splitList(nat64) {
		cfg.nat64 = append(cfg.nat64, parseAddr("nat64", s, true))
	}
	if err != nil {
		return nil, "", nil, err
	}
	if cfg.neighbour4.IsValid() && !cfg.neighbour4.Is4() || cfg.neighbour6.IsValid() && !cfg.neighbour6.Is6() {
		return nil, "", nil, fmt.Errorf("-neighbour4 %s must be an IPv4 address and -neighbour6 %s an IPv6 one", cfg.neighbour4, cfg.neighbour6)
	}
	if cfg.raPrefix, err = netip.ParsePrefix(raPrefix); err != nil || !cfg.raPrefix.Addr().Is6() || cfg.raPrefix.Bits() != 64 {
		return nil, "", nil, fmt.Errorf("-ra-prefix %q: want an IPv6 /64 prefix", raPrefix)
	}
	if pp := splitList(proxyPorts); len(pp) > 0 {
		if len(pp) != 2 {
			return nil, "", nil, fmt.Errorf("-proxy-ports %q: want PORT4,PORT6", proxyPorts)
		}
		for i, dst := range []*uint16{&cfg.proxyPort4, &cfg.proxyPort6} {
			if err := portFlag("proxy-ports", dst)(pp[i]); err != nil {
				return nil, "", nil, err
			}
		}
	}
	for _, s := range splitList(marks) {
		v, err := strconv.ParseUint(s, 0, 32)
		if err != nil {
			return nil, "", nil, fmt.Errorf("-marks: %q is not a 32-bit number", s)
		}
		cfg.marks = append(cfg.marks, uint32(v))
	}
	if cfg.silentConns < 1 || cfg.timeout <= 0 || cfg.hold < 0 || cfg.spoofTime <= 0 {
		return nil, "", nil, fmt.Errorf("-silent-conns must be at least 1, -timeout and -spoof-time positive and -hold not negative")
	}
	return cfg, caps, fs.Args(), nil
}

// checkTargets fails unless the addresses every attempt needs are set.
func (c *config) checkTargets() error {
	for _, f := range []struct {
		name string
		addr netip.Addr
	}{{"allowed4", c.allowed4}, {"denied4", c.denied4}, {"resolver", c.resolver}} {
		if !f.addr.IsValid() {
			return fmt.Errorf("-%s is required", f.name)
		}
	}
	if !c.allowed4.Is4() || !c.denied4.Is4() {
		return fmt.Errorf("-allowed4 %s and -denied4 %s must be IPv4 addresses", c.allowed4, c.denied4)
	}
	if c.denied6.IsValid() && !c.denied6.Is6() {
		return fmt.Errorf("-denied6 %s must be an IPv6 address", c.denied6)
	}
	return nil
}

func portFlag(name string, dst *uint16) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return fmt.Errorf("-%s %q: not a port number (0-65535)", name, s)
		}
		*dst = uint16(v)
		return nil
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
