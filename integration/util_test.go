package integration

import (
	"fmt"
	"github.com/doorman-net/doorman/enforce/sandbox"
	"strconv"
)

func itoa(i int) string { return strconv.Itoa(i) }

func fmtSscan(s string, v *int) (int, error) { return fmt.Sscan(s, v) }

// withDNSGap is the label a sandbox without the DNS filter or the
// host-side layer records, given what its in-namespace rules cover.
func withDNSGap(base string) string { return sandbox.ComposeLabel(base, false, false, "allowlist") }
