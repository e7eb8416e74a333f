package runner

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/doorman-net/doorman/hostconf"
)

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
var errNoResolvConf = errors.New("the host has no " + hostconf.ResolvConf + " to put the sandbox's resolvers over")
