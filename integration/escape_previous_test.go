package integration

import (
	"strings"
	"testing"
)

// issue14Previous is the last commit before the fixes for the holes that
// issue14Rows measure: ICMP tunnels, DNS rebinding into private networks,
// neighbour spoofing on the bridge, and the plaintext HTTP desync and h2c
// upgrade.
const issue14Previous = "1cea9776bd9b856f779fb241edf4850a5493d173"

// issue14Rows are the escape suite's rows for those holes.
var issue14Rows = []string{"icmp", "icmp-lan", "router-advert", "rebind", "arp-spoof", "ip-spoof", "http-desync", "h2c-upgrade"}

// issue24Previous is the last commit before the fixes for the holes that
// issue24Rows measure (issue 24).
const issue24Previous = "8feb24a0848883375a1dac75813d736f8282143f"

// issue24Rows are the escape suite's rows for those holes: a LAN address
// in the local-use NAT64 prefix's /48, /56 and /64 layouts, by name and
// in mode open; and the layer-2 channels between sandboxes.
var issue24Rows = []string{
	"rebind-nat64", "open-nat64", // private IPv4 inside IPv6 forms
	"arp-trailer", "mld-aux", "nd-options", "l2-flood", // layer-2 channels between sandboxes
}

// previousReleases are the releases before each round of fixes, each
// with the rows that measure its fixes.
var previousReleases = []struct {
	commit string
	rows   []string
}{
	{issue14Previous, issue14Rows},
	{issue24Previous, issue24Rows},
}

// TestEscapeRowsFailOnThePreviousRelease runs the CNI column of the
// escape suite against the doorman of each previous release, built from
// this repository's history, and requires each of the release's rows to
// measure an escape in at least one of its two columns: a row that
// measured 0 there could not tell the fix from its absence. (TestEscape
// requires the same rows to measure 0 against the doorman under test.)
func TestEscapeRowsFailOnThePreviousRelease(t *testing.T) {
	skipUnlessRoot(t)
	bin := buildEscapeProbe(t)
	for _, r := range previousReleases {
		t.Run(r.commit[:7], func(t *testing.T) { escapeRowsFailOn(t, bin, r.commit, r.rows) })
	}
}

// escapeRowsFailOn runs the CNI column of the escape suite with the
// probe bin against the doorman of commit, and requires each of rows to
// measure an escape in at least one column.
func escapeRowsFailOn(t *testing.T, bin, commit string, rows []string) {
	pluginDir := buildPreviousDoorman(t, commit)
	k := escapeCNIKind(t, bin, pluginDir, true, &escapeKind{name: "CNI sandbox, " + commit[:7]}, nil, true)
	for _, id := range rows {
		var cells []string
		escaped := false
		for _, col := range k.columns {
			for _, r := range col.results {
				if r.attempt.id != id {
					continue
				}
				cells = append(cells, col.mode.String()+": "+r.arrived.summary())
				escaped = escaped || !r.arrived.zero()
			}
		}
		if len(cells) == 0 {
			t.Errorf("row %s: not run", id)
		} else if !escaped {
			t.Errorf("row %s measured nothing against %s (%s): it cannot tell the fix from its absence", id, commit[:7], strings.Join(cells, "; "))
		} else {
			t.Logf("row %s against %s: %s", id, commit[:7], strings.Join(cells, "; "))
		}
	}
}
