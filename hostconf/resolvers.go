package hostconf

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/miekg/dns"
)

// Where the host's resolvers are read from when nothing else names them.
const (
	// ResolvConf is the host's resolv.conf.
	ResolvConf = "/etc/resolv.conf"
	// SystemdResolvConf lists systemd-resolved's upstream servers: where
	// ResolvConf names only its stub on 127.0.0.53, which a sandbox
	// cannot reach, these are the servers behind it (runtimes give
	// containers the same).
	SystemdResolvConf = "/run/systemd/resolve/resolv.conf"
)

// Resolvers returns the host's DNS servers from ResolvConf, or, when those
// are all loopback addresses (a local stub such as systemd-resolved's
// 127.0.0.53), the upstream servers SystemdResolvConf lists. Addresses with
// a zone are left out. The CNI plugin falls back to them, and so does
// `doorman run`.
func Resolvers() ([]netip.Addr, error) {
	return resolvers(ResolvConf, SystemdResolvConf)
}

// resolvers is Resolvers reading the given files.
func resolvers(resolvConf, upstreamConf string) ([]netip.Addr, error) {
	data, err := os.ReadFile(resolvConf)
	if err != nil {
		return nil, fmt.Errorf("read the host's resolvers: %w", err)
	}
	addrs := ParseResolvConf(data)
	if onlyLoopback(addrs) {
		if up, err := os.ReadFile(upstreamConf); err == nil {
			if ups := ParseResolvConf(up); len(ups) > 0 && !onlyLoopback(ups) {
				return ups, nil
			}
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s names no nameserver", resolvConf)
	}
	return addrs, nil
}

// onlyLoopback reports whether addrs has servers and all are loopback.
func onlyLoopback(addrs []netip.Addr) bool {
	for _, a := range addrs {
		if !a.IsLoopback() {
			return false
		}
	}
	return len(addrs) > 0
}

// ParseResolvConf returns the nameserver addresses of a resolv.conf, in
// order, IPv4-mapped ones as IPv4; addresses with a zone, which no
// sandbox's rules can name, are left out.
func ParseResolvConf(data []byte) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Zone() == "" {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

// Search is ResolvConf's search list (nil if none or unreadable).
func Search() []string {
	cfg, err := dns.ClientConfigFromFile(ResolvConf)
	if err != nil {
		return nil
	}
	return cfg.Search
}
