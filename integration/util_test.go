package integration

import (
	"fmt"
	"os"
	"strconv"

	"github.com/google/nftables"

	"github.com/doorman-net/doorman/sandbox"
)

func itoa(i int) string { return strconv.Itoa(i) }

func fmtSscan(s string, v *int) (int, error) { return fmt.Sscan(s, v) }

// withDNSGap is the label a sandbox without the DNS filter or the
// host-side layer records, given what its in-namespace rules cover.
func withDNSGap(base string) string { return sandbox.ComposeLabel(base, false, false, "allowlist") }

// nftIn runs fn with an nftables connection into the network namespace at
// nsPath.
func nftIn(nsPath string, fn func(c *nftables.Conn) error) error {
	f, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("nftables in %s: %w", nsPath, err)
	}
	return fn(c)
}
