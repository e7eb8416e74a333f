package chain

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/miekg/dns"
)

// Where the host's resolvers are read from.
const (
	hostResolvConf = "/etc/resolv.conf"
	// systemdResolvConf lists systemd-resolved's upstream servers: where
	// /etc/resolv.conf names only its stub on 127.0.0.53, which a sandbox
	// cannot reach, these are the servers behind it (Docker does the same).
	systemdResolvConf = "/run/systemd/resolve/resolv.conf"
)

// HostResolvers returns the host's DNS servers from /etc/resolv.conf, or,
// when those are all loopback addresses (a local stub such as
// systemd-resolved's 127.0.0.53), the upstream servers systemd-resolved
// lists. Addresses with a zone are left out.
func HostResolvers() ([]netip.Addr, error) {
	return resolversFrom(hostResolvConf, systemdResolvConf)
}

// resolversFrom is HostResolvers reading the given files.
func resolversFrom(resolvConf, upstreamConf string) ([]netip.Addr, error) {
	addrs, err := resolvConfServers(resolvConf)
	if err != nil {
		return nil, err
	}
	if allLoopback(addrs) {
		if up, err := resolvConfServers(upstreamConf); err == nil && len(up) > 0 && !allLoopback(up) {
			return up, nil
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s names no nameserver: give the resolvers with --dns", resolvConf)
	}
	return addrs, nil
}

// HostSearch is the host resolv.conf's search list (nil if none or
// unreadable).
func HostSearch() []string {
	cfg, err := dns.ClientConfigFromFile(hostResolvConf)
	if err != nil {
		return nil
	}
	return cfg.Search
}

func resolvConfServers(path string) ([]netip.Addr, error) {
	cfg, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the host's resolvers: %w", err)
	}
	var out []netip.Addr
	for _, s := range cfg.Servers {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			continue
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

func allLoopback(addrs []netip.Addr) bool {
	for _, a := range addrs {
		if !a.IsLoopback() {
			return false
		}
	}
	return len(addrs) > 0
}

// resolvConf renders the sandbox's /etc/resolv.conf.
func resolvConf(resolvers []netip.Addr, search []string) []byte {
	var b bytes.Buffer
	b.WriteString("# written by doorman run: the resolvers this sandbox may query\n")
	for _, r := range resolvers {
		fmt.Fprintf(&b, "nameserver %s\n", r)
	}
	if len(search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(search, " "))
	}
	return b.Bytes()
}

// writeResolvConf writes the sandbox's resolv.conf into dir and returns its
// path.
func writeResolvConf(dir string, resolvers []netip.Addr, search []string) (string, error) {
	path := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(path, resolvConf(resolvers, search), 0o644); err != nil {
		return "", fmt.Errorf("write the sandbox's resolv.conf: %w", err)
	}
	return path, nil
}

// errNoResolvConf is returned when the host has no /etc/resolv.conf to
// mount the sandbox's over.
var errNoResolvConf = errors.New("the host has no " + hostResolvConf + " to put the sandbox's resolvers over")
